// InfiniBand / RoCE ports from libibverbs, opened with dlopen (headers only at build time).
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <sstream>

#include "braid_config.h"
#include "core/interfaces.h"
#include "core/log.h"
#include "topology/detect.h"

#if BRAID_HAVE_IBVERBS_HEADERS
#include <infiniband/verbs.h>
#endif

namespace braid::topo {

#if BRAID_HAVE_IBVERBS_HEADERS
namespace {

// Mb/s per lane for ibv_port_attr.active_speed, and lanes for active_width.
int laneMbps(int speed) {
  switch (speed) {
    case 1: return 2500;
    case 2: return 5000;
    case 4: case 8: return 10000;
    case 16: return 14000;
    case 32: return 25000;
    case 64: return 50000;
    case 128: return 100000;
    case 256: return 200000;
    default: return 10000;
  }
}
int lanes(int width) {
  switch (width) {
    case 1: return 1;
    case 2: return 4;
    case 4: return 8;
    case 8: return 12;
    case 16: return 2;
    default: return 1;
  }
}

using GetDeviceList = ibv_device** (*)(int*);
using FreeDeviceList = void (*)(ibv_device**);
using GetDeviceName = const char* (*)(ibv_device*);
using OpenDevice = ibv_context* (*)(ibv_device*);
using CloseDevice = int (*)(ibv_context*);
using QueryDevice = int (*)(ibv_context*, ibv_device_attr*);
using QueryPort = int (*)(ibv_context*, uint8_t, ibv_port_attr*);
using QueryGid = int (*)(ibv_context*, uint8_t, int, ibv_gid*);

bool peerMemoryLoaded(const std::string& sysRoot) {
  for (const char* p : {"/sys/kernel/mm/memory_peers/nv_mem/version", "/sys/module/nvidia_peermem/version",
                        "/sys/module/nv_peer_mem/version"})
    if (access((sysRoot + p).c_str(), F_OK) == 0) return true;
  return false;
}

}  // namespace

std::vector<DetectedDevice> detectVerbsPorts(const std::string& library, const std::string& sysRoot,
                                             const std::string& hcaFilter) {
  std::vector<DetectedDevice> out;
  const net::HcaFilter filter = net::HcaFilter::parse(hcaFilter);
  for (const std::string& problem : filter.problems) BRAID_WARN("NCCL_IB_HCA=%s: %s", hcaFilter.c_str(), problem.c_str());
  void* h = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    BRAID_INFO(log::kGraph, "libibverbs not loaded (%s): no RDMA ports detected", dlerror());
    return out;
  }
  auto getList = reinterpret_cast<GetDeviceList>(dlsym(h, "ibv_get_device_list"));
  auto freeList = reinterpret_cast<FreeDeviceList>(dlsym(h, "ibv_free_device_list"));
  auto getName = reinterpret_cast<GetDeviceName>(dlsym(h, "ibv_get_device_name"));
  auto open = reinterpret_cast<OpenDevice>(dlsym(h, "ibv_open_device"));
  auto close = reinterpret_cast<CloseDevice>(dlsym(h, "ibv_close_device"));
  auto queryDevice = reinterpret_cast<QueryDevice>(dlsym(h, "ibv_query_device"));
  auto queryPort = reinterpret_cast<QueryPort>(dlsym(h, "ibv_query_port"));
  auto queryGid = reinterpret_cast<QueryGid>(dlsym(h, "ibv_query_gid"));
  if (!getList || !freeList || !getName || !open || !close || !queryDevice || !queryPort) {
    BRAID_WARN("%s lacks verbs functions Braid needs; RDMA ports are not detected", library.c_str());
    dlclose(h);
    return out;
  }
  bool gdr = peerMemoryLoaded(sysRoot);
  int n = 0;
  ibv_device** list = getList(&n);
  int netDev = 0;
  for (int i = 0; list && i < n; ++i) {
    const char* name = getName(list[i]);
    ibv_context* ctx = open(list[i]);
    if (!ctx) continue;
    ibv_device_attr attr{};
    if (queryDevice(ctx, &attr) != 0) {
      close(ctx);
      continue;
    }
    DetectedDevice d;
    d.pciClass = "0x020700";
    char real[PATH_MAX];
    std::string link = std::string(list[i]->ibdev_path) + "/device";
    if (realpath(link.c_str(), real)) {
      std::stringstream parts(real);
      for (std::string part; std::getline(parts, part, '/');)
        if (part.size() == 12 && part[4] == ':' && part[10] == '.') d.busId = part;
    }
    d.element.name = "nic";
    for (int port = 1; port <= attr.phys_port_cnt && port <= 8; ++port) {
      ibv_port_attr pa{};
      if (queryPort(ctx, static_cast<uint8_t>(port), &pa) != 0 || pa.state != IBV_PORT_ACTIVE) continue;
      if (!filter.matches(name, port)) {
        BRAID_INFO(log::kGraph | log::kNet, "%s port %d left out by NCCL_IB_HCA=%s", name, port, hcaFilter.c_str());
        continue;
      }
      if (pa.link_layer == IBV_LINK_LAYER_ETHERNET) d.pciClass = "0x020000";
      NetPort net;
      net.name = name;
      net.dev = netDev++;
      net.speedMbps = static_cast<long>(laneMbps(pa.active_speed)) * lanes(pa.active_width);
      net.port = port;
      net.guid = attr.node_guid;
      net.maxConn = attr.max_qp;
      net.gdr = gdr;
      addNetPort(d.element, net);
      ibv_gid gid{};
      if (queryGid && queryGid(ctx, static_cast<uint8_t>(port), 0, &gid) == 0)
        BRAID_INFO(log::kGraph, "%s port %d (%s): GID[0] %016llx:%016llx", name, port,
                   pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "IB",
                   static_cast<unsigned long long>(be64toh(gid.global.subnet_prefix)),
                   static_cast<unsigned long long>(be64toh(gid.global.interface_id)));
    }
    close(ctx);
    if (!d.element.children.empty()) out.push_back(std::move(d));
  }
  if (list) freeList(list);
  dlclose(h);
  return out;
}

#else

std::vector<DetectedDevice> detectVerbsPorts(const std::string&, const std::string&, const std::string&) {
  BRAID_INFO(log::kGraph, "built without verbs headers: no RDMA ports detected");
  return {};
}

#endif

}  // namespace braid::topo
