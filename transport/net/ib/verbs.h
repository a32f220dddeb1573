// libibverbs as the verbs transport uses it: opened with dlopen (never linked, so Braid loads
// on machines without it), its functions looked up once per process; the ports NCCL_IB_HCA
// allows; devices opened once per process, with their protection domain and a registration
// cache. Posting and polling go through the context's ops (inline functions of verbs.h), so
// they need no lookup.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "braid_config.h"
#include "transport/fifo.h"

#if BRAID_HAVE_IBVERBS_HEADERS
#include <infiniband/verbs.h>

namespace braid::transport::ib {

/// The library's functions Braid calls.
struct Verbs {
  std::string library;
  ibv_device** (*getDeviceList)(int*);
  void (*freeDeviceList)(ibv_device**);
  const char* (*getDeviceName)(ibv_device*);
  ibv_context* (*openDevice)(ibv_device*);
  int (*closeDevice)(ibv_context*);
  int (*queryDevice)(ibv_context*, ibv_device_attr*);
  int (*queryPort)(ibv_context*, uint8_t, ibv_port_attr*);  ///< the exported (compat) symbol: prefix only
  int (*queryGid)(ibv_context*, uint8_t, int, ibv_gid*);
  ibv_pd* (*allocPd)(ibv_context*);
  int (*deallocPd)(ibv_pd*);
  ibv_mr* (*regMr)(ibv_pd*, void*, size_t, int);
  int (*deregMr)(ibv_mr*);
  ibv_cq* (*createCq)(ibv_context*, int, void*, ibv_comp_channel*, int);
  int (*destroyCq)(ibv_cq*);
  ibv_qp* (*createQp)(ibv_pd*, ibv_qp_init_attr*);
  int (*modifyQp)(ibv_qp*, ibv_qp_attr*, int);
  int (*destroyQp)(ibv_qp*);
  const char* (*wcStatusStr)(ibv_wc_status);
  /// Completion channels: a descriptor that becomes readable when a completion lands on a queue
  /// that asked for notification (ibv_req_notify_cq, an inline of verbs.h, arms it once).
  ibv_comp_channel* (*createCompChannel)(ibv_context*);
  int (*destroyCompChannel)(ibv_comp_channel*);
  int (*getCqEvent)(ibv_comp_channel*, ibv_cq**, void**);
  void (*ackCqEvents)(ibv_cq*, unsigned int);
  /// GPU Direct RDMA through dma-buf (rdma-core 34 and later); null where the library lacks it.
  ibv_mr* (*regDmabufMr)(ibv_pd*, uint64_t offset, size_t length, uint64_t iova, int fd, int access);
};

/// `library` loaded and looked up (once per process and name; never unloaded); null with the
/// reason in `why` when it cannot be opened or lacks a function.
const Verbs* loadVerbs(const std::string& library, std::string* why);

/// One active port.
struct Port {
  std::string device;
  int port = 0;
  bool roce = false;  ///< Ethernet link layer
  uint16_t lid = 0;
  int activeMtu = 0;  ///< enum ibv_mtu
  int gidTableLen = 0;
};

/// The active ports that `hcaFilter` (NCCL_IB_HCA) allows, in device order. Entries of the
/// filter that make no sense are warned about.
std::vector<Port> usablePorts(const Verbs& verbs, const std::string& hcaFilter);

/// A device opened by this process, shared by its connections: the context, one protection
/// domain, and the registrations made in it.
class Device {
 public:
  Device(const Verbs& verbs, const std::string& name);  ///< throws ncclSystemError naming the device
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const Verbs& verbs() const { return verbs_; }
  const std::string& name() const { return name_; }
  ibv_context* context() const { return context_; }
  ibv_pd* pd() const { return pd_; }

  /// A memory region covering [addr, addr + bytes) with at least `access`: an earlier
  /// registration that covers it is shared (counted), else a new one is made. Throws
  /// ncclSystemError naming the device. Thread-safe.
  ibv_mr* registerMemory(void* addr, size_t bytes, int access);
  /// Gives back a region of registerMemory() (the last user deregisters it) or of
  /// registerDmabuf().
  void release(ibv_mr* mr);
  /// A new region of `bytes` of device memory exported as dma-buf `fd` from `offset`, which the
  /// connection addresses as `iova` (its address in this process); never shared. Throws
  /// ncclSystemError naming the device when the library lacks dma-buf or refuses.
  ibv_mr* registerDmabuf(int fd, uint64_t offset, size_t bytes, void* iova, int access);
  /// Registrations held (tests).
  size_t registrations() const;

 private:
  struct Registration {
    ibv_mr* mr;
    int access;
    int users;
  };
  const Verbs& verbs_;
  std::string name_;
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  mutable std::mutex mutex_;
  std::vector<Registration> registrations_;
};

/// The device `name`, opened once per process while any connection holds it.
std::shared_ptr<Device> openDevice(const Verbs& verbs, const std::string& name);

/// The GID index to use on a port: `wanted` when >= 0 (NCCL_IB_GID_INDEX), else for RoCE the
/// first RoCE v2 entry with an IPv4-mapped address that sysfs knows (then v2, then index 0),
/// for InfiniBand 0.
int chooseGidIndex(const Device& device, const Port& port, int wanted, const std::string& sysRoot = "");

/// Whether a failed completion's status blames the peer or the fabric (remote access, retries
/// exhausted) rather than this end: ncclRemoteError, else ncclSystemError.
bool peerFault(ibv_wc_status status);

/// What a queue pair's RTR and RTS steps take from the settings (NCCL_IB_SL, NCCL_IB_TC,
/// NCCL_IB_TIMEOUT, NCCL_IB_RETRY_CNT).
struct QpAttributes {
  int serviceLevel = 0;
  int trafficClass = 0;
  int ackTimeout = 20;
  int retryCount = 7;
};

/// Moves `qp` (in INIT, on `port`) through RTR to RTS towards the peer's queue pair `remote`;
/// `local` is this end's (its PSN and MTU). RoCE (either side) routes by GID with `gidIndex`.
/// Returns "" or what failed. Used by the FIFO connections and the one-sided carrier alike.
std::string connectQueuePair(const Verbs& verbs, ibv_qp* qp, const Port& port, int gidIndex, const QpAttributes& a,
                             const IbEndpoint& local, const IbEndpoint& remote);

}  // namespace braid::transport::ib

#endif
