#include "transport/net/ib/verbs.h"

#if BRAID_HAVE_IBVERBS_HEADERS

#include <dlfcn.h>

#include <algorithm>
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
  lookUp(h, "ibv_create_comp_channel", &v->createCompChannel, &missing);
  lookUp(h, "ibv_destroy_comp_channel", &v->destroyCompChannel, &missing);
  lookUp(h, "ibv_get_cq_event", &v->getCqEvent, &missing);
  lookUp(h, "ibv_ack_cq_events", &v->ackCqEvents, &missing);
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

bool peerFault(ibv_wc_status s) {
  return s == IBV_WC_REM_ACCESS_ERR || s == IBV_WC_REM_OP_ERR || s == IBV_WC_REM_INV_REQ_ERR ||
         s == IBV_WC_RETRY_EXC_ERR || s == IBV_WC_RNR_RETRY_EXC_ERR || s == IBV_WC_REM_ABORT_ERR ||
         s == IBV_WC_REM_INV_RD_REQ_ERR;
}

std::string connectQueuePair(const Verbs& verbs, ibv_qp* qp, const Port& port, int gidIndex, const QpAttributes& q,
                             const IbEndpoint& local, const IbEndpoint& r) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = static_cast<ibv_mtu>(std::min<int>(local.mtu, r.mtu));
  a.dest_qp_num = r.qpn;
  a.rq_psn = r.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.dlid = r.lid;
  a.ah_attr.sl = static_cast<uint8_t>(std::max(q.serviceLevel, 0));
  a.ah_attr.port_num = static_cast<uint8_t>(port.port);
  if (port.roce || r.roce) {  // RoCE routes by GID
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, r.gid, 16);
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(gidIndex);
    a.ah_attr.grh.hop_limit = 255;
    a.ah_attr.grh.traffic_class = static_cast<uint8_t>(std::max(q.trafficClass, 0));
  }
  int rc = verbs.modifyQp(qp, &a,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (rc != 0) return "moving the queue pair to RTR (remote QP " + std::to_string(r.qpn) + ") failed: " + strerror(rc);
  ibv_qp_attr b{};
  b.qp_state = IBV_QPS_RTS;
  b.timeout = static_cast<uint8_t>(q.ackTimeout);
  b.retry_cnt = static_cast<uint8_t>(q.retryCount);
  b.rnr_retry = 7;
  b.sq_psn = local.psn;
  b.max_rd_atomic = 1;
  rc = verbs.modifyQp(qp, &b,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                          IBV_QP_MAX_QP_RD_ATOMIC);
  if (rc != 0) return std::string("moving the queue pair to RTS failed: ") + strerror(rc);
  return "";
}

}  // namespace braid::transport::ib

#endif
