#include "transport/net/ib/verbs.h"

#if BRAID_HAVE_IBVERBS_HEADERS

#include <dlfcn.h>

#include <cstring>
#include <fstream>
#include <map>

#include "core/interfaces.h"
#include "core/log.h"
#include "core/status.h"

namespace braid::transport::ib {

namespace {

template <typename F>
bool lookUp(void* handle, const char* name, F* into, std::string* missing) {
  *into = reinterpret_cast<F>(dlsym(handle, name));
  if (*into == nullptr) *missing += std::string(missing->empty() ? "" : ", ") + name;
  return *into != nullptr;
}

std::mutex& registryMutex() {
  static std::mutex m;
  return m;
}

}  // namespace

const Verbs* loadVerbs(const std::string& library, std::string* why) {
  std::lock_guard<std::mutex> lock(registryMutex());
  static std::map<std::string, std::unique_ptr<Verbs>> loaded;  // never unloaded: QPs may outlive anything
  auto it = loaded.find(library);
  if (it != loaded.end()) return it->second.get();
  void* h = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    *why = library + " cannot be loaded (" + dlerror() + ")";
    return nullptr;
  }
  auto v = std::make_unique<Verbs>();
  v->library = library;
  std::string missing;
  lookUp(h, "ibv_get_device_list", &v->getDeviceList, &missing);
  lookUp(h, "ibv_free_device_list", &v->freeDeviceList, &missing);
  lookUp(h, "ibv_get_device_name", &v->getDeviceName, &missing);
  lookUp(h, "ibv_open_device", &v->openDevice, &missing);
  lookUp(h, "ibv_close_device", &v->closeDevice, &missing);
  lookUp(h, "ibv_query_device", &v->queryDevice, &missing);
  lookUp(h, "ibv_query_port", &v->queryPort, &missing);
  lookUp(h, "ibv_query_gid", &v->queryGid, &missing);
  lookUp(h, "ibv_alloc_pd", &v->allocPd, &missing);
  lookUp(h, "ibv_dealloc_pd", &v->deallocPd, &missing);
  lookUp(h, "ibv_reg_mr", &v->regMr, &missing);
  lookUp(h, "ibv_dereg_mr", &v->deregMr, &missing);
  lookUp(h, "ibv_create_cq", &v->createCq, &missing);
  lookUp(h, "ibv_destroy_cq", &v->destroyCq, &missing);
  lookUp(h, "ibv_create_qp", &v->createQp, &missing);
  lookUp(h, "ibv_modify_qp", &v->modifyQp, &missing);
  lookUp(h, "ibv_destroy_qp", &v->destroyQp, &missing);
  lookUp(h, "ibv_wc_status_str", &v->wcStatusStr, &missing);
  std::string optional;
  lookUp(h, "ibv_reg_dmabuf_mr", &v->regDmabufMr, &optional);  // (without it: no GPU Direct RDMA)
  if (!missing.empty()) {
    *why = library + " lacks " + missing;
    dlclose(h);
    return nullptr;
  }
  return (loaded[library] = std::move(v)).get();
}

std::vector<Port> usablePorts(const Verbs& verbs, const std::string& hcaFilter) {
  const net::HcaFilter filter = net::HcaFilter::parse(hcaFilter);
  for (const std::string& problem : filter.problems) BRAID_WARN("NCCL_IB_HCA=%s: %s", hcaFilter.c_str(), problem.c_str());
  std::vector<Port> ports;
  int n = 0;
  ibv_device** list = verbs.getDeviceList(&n);
  for (int i = 0; list != nullptr && i < n; ++i) {
    const std::string name = verbs.getDeviceName(list[i]);
    ibv_context* ctx = verbs.openDevice(list[i]);
    if (ctx == nullptr) continue;
    ibv_device_attr attr{};
    if (verbs.queryDevice(ctx, &attr) == 0) {
      for (int p = 1; p <= attr.phys_port_cnt; ++p) {
        ibv_port_attr pa{};
        if (verbs.queryPort(ctx, static_cast<uint8_t>(p), &pa) != 0 || pa.state != IBV_PORT_ACTIVE) continue;
        if (!filter.matches(name, p)) continue;
        Port port;
        port.device = name;
        port.port = p;
        port.roce = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
        port.lid = pa.lid;
        port.activeMtu = pa.active_mtu;
        port.gidTableLen = pa.gid_tbl_len;
        ports.push_back(port);
      }
    }
    verbs.closeDevice(ctx);
  }
  if (list != nullptr) verbs.freeDeviceList(list);
  return ports;
}

Device::Device(const Verbs& verbs, const std::string& name) : verbs_(verbs), name_(name) {
  int n = 0;
  ibv_device** list = verbs.getDeviceList(&n);
  for (int i = 0; list != nullptr && i < n && context_ == nullptr; ++i)
    if (name == verbs.getDeviceName(list[i])) context_ = verbs.openDevice(list[i]);
  if (list != nullptr) verbs.freeDeviceList(list);
  if (context_ == nullptr) fail(ncclSystemError, "NET/IB: cannot open device %s", name.c_str());
  pd_ = verbs.allocPd(context_);
  if (pd_ == nullptr) {
    verbs.closeDevice(context_);
    fail(ncclSystemError, "NET/IB: cannot allocate a protection domain on %s (%s)", name.c_str(), strerror(errno));
  }
}

Device::~Device() {
  for (const Registration& r : registrations_) verbs_.deregMr(r.mr);
  verbs_.deallocPd(pd_);
  verbs_.closeDevice(context_);
}

ibv_mr* Device::registerMemory(void* addr, size_t bytes, int access) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto begin = reinterpret_cast<uintptr_t>(addr);
  for (Registration& r : registrations_) {
    const auto base = reinterpret_cast<uintptr_t>(r.mr->addr);
    if (r.access >= 0 && begin >= base && begin + bytes <= base + r.mr->length && (r.access & access) == access) {
      ++r.users;
      return r.mr;
    }
  }
  ibv_mr* mr = verbs_.regMr(pd_, addr, bytes, access);
  if (mr == nullptr) {
    fail(ncclSystemError, "NET/IB: registering %zu bytes at %p on %s failed (%s)", bytes, addr, name_.c_str(),
         strerror(errno));
  }
  registrations_.push_back({mr, access, 1});
  return mr;
}

ibv_mr* Device::registerDmabuf(int fd, uint64_t offset, size_t bytes, void* iova, int access) {
  if (verbs_.regDmabufMr == nullptr) {
    fail(ncclSystemError, "NET/IB: %s lacks ibv_reg_dmabuf_mr (rdma-core 34 or later has it)", verbs_.library.c_str());
  }
  ibv_mr* mr = verbs_.regDmabufMr(pd_, offset, bytes, reinterpret_cast<uint64_t>(iova), fd, access);
  if (mr == nullptr) {
    fail(ncclSystemError, "NET/IB: registering %zu bytes of GPU memory at %p (dma-buf) on %s failed (%s)", bytes, iova,
         name_.c_str(), strerror(errno));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    registrations_.push_back({mr, -1, 1});  // (access -1: never shared by registerMemory)
  } catch (...) {
    verbs_.deregMr(mr);
    throw;
  }
  return mr;
}

void Device::release(ibv_mr* mr) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = registrations_.begin(); it != registrations_.end(); ++it) {
    if (it->mr != mr) continue;
    if (--it->users == 0) {
      verbs_.deregMr(mr);
      registrations_.erase(it);
    }
    return;
  }
}

size_t Device::registrations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return registrations_.size();
}

std::shared_ptr<Device> openDevice(const Verbs& verbs, const std::string& name) {
  std::lock_guard<std::mutex> lock(registryMutex());
  static std::map<std::string, std::weak_ptr<Device>> open;  // by library and device
  std::weak_ptr<Device>& slot = open[verbs.library + "/" + name];
  std::shared_ptr<Device> d = slot.lock();
  if (!d) slot = d = std::make_shared<Device>(verbs, name);
  return d;
}

int chooseGidIndex(const Device& device, const Port& port, int wanted, const std::string& sysRoot) {
  if (wanted >= 0 || !port.roce) return wanted >= 0 ? wanted : 0;
  int v2 = -1;
  for (int i = 0; i < port.gidTableLen && i < 256; ++i) {
    ibv_gid gid{};
    if (device.verbs().queryGid(device.context(), static_cast<uint8_t>(port.port), i, &gid) != 0) continue;
    static const uint8_t zero[16] = {};
    if (std::memcmp(gid.raw, zero, 16) == 0) continue;
    std::ifstream type(sysRoot + "/sys/class/infiniband/" + port.device + "/ports/" + std::to_string(port.port) +
                       "/gid_attrs/types/" + std::to_string(i));
    std::string text;
    std::getline(type, text);
    if (text.find("v2") == std::string::npos) continue;
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(gid.raw, mapped, 12) == 0) return i;  // RoCE v2 over IPv4: NCCL's choice too
    if (v2 < 0) v2 = i;
  }
  return v2 >= 0 ? v2 : 0;
}

}  // namespace braid::transport::ib

#endif
