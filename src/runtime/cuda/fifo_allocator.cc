#include "runtime/cuda/fifo_allocator.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/fd_exchange.h"
#include "core/log.h"
#include "core/status.h"
#include "runtime/cuda/cuda_support.h"
#include "runtime/cuda/cumem.h"

namespace braid::runtime::cuda {

namespace {

class FifoAllocator final : public transport::FifoAllocator {
 public:
  explicit FifoAllocator(int device) : device_(device) {}
  void* allocateControl(size_t bytes) override {
    DeviceGuard guard(device_);
    return allocateMapped(bytes, "FIFO counters");
  }
  void freeControl(void* p) override { cudaFreeHost(p); }
  void* allocateData(size_t bytes, bool shareable) override {
    DeviceGuard guard(device_);
    void* p = nullptr;
    // cuMem also where no other process will map them: a suspended communicator then gives
    // their physical memory back and keeps the address its peers and kernels hold.
    if (cumemEnabled(device_)) {
      try {
        p = cumemAllocate(device_, bytes);
      } catch (const Error& e) {  // (containers and sandboxes may refuse cuMem's shareable memory)
        BRAID_INFO(log::kInit | log::kAlloc, "CUDA device %d: no cuMem memory for FIFO slots (%s); cudaMalloc%s "
                   "instead", device_, e.what(), shareable ? " and legacy CUDA IPC" : "");
      }
    }
    if (p == nullptr) BRAID_CUDA_CHECK(cudaMalloc(&p, bytes));
    // Zeroed before any kernel reads it (stale LL flags would read as data), on a stream of
    // the allocator's own: the legacy stream would also wait for other ranks' kernels in
    // blocking streams, which may be waiting for this rank.
    std::lock_guard<std::mutex> lock(mutex_);
    cudaError_t err = stream_ == nullptr ? cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) : cudaSuccess;
    if (err == cudaSuccess) err = cudaMemsetAsync(p, 0, bytes, stream_);
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream_);
    if (err != cudaSuccess) {
      releaseData(p);
      check(err, "zeroing FIFO slots (cudaMemsetAsync)");
    }
    return p;
  }
  void freeData(void* p) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = offered_.find(p);
      if (it != offered_.end()) {
        fds::withdraw(it->second);
        offered_.erase(it);
      }
      kept_.erase(p);  // (freed while suspended: a communicator destroyed before its resume)
    }
    quietlyOn(device_, [this, p] { releaseData(p); });
  }
  void registerHost(void* p, size_t bytes) override {
    DeviceGuard guard(device_);
    BRAID_CUDA_CHECK(cudaHostRegister(p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable));
    try {
      requireSameAddress(p, "shared FIFO memory");
    } catch (...) {
      cudaHostUnregister(p);
      throw;
    }
  }
  void unregisterHost(void* p) override { cudaHostUnregister(p); }
  /// A handle's first byte says its kind: a legacy CUDA IPC handle after 8 bytes, or a cuMem
  /// allocation's descriptor offered by another process (CumemHandle: where to fetch it).
  enum HandleKind : uint8_t { kLegacyIpc = 1, kCumemFd = 2 };
  struct CumemHandle {
    uint8_t kind;
    uint8_t pad[7];
    fds::Offer offer;
    uint64_t bytes;
  };
  static_assert(8 + sizeof(cudaIpcMemHandle_t) <= kHandleBytes && sizeof(CumemHandle) <= kHandleBytes);

  bool exportData(void* p, uint8_t* handle) override {
    std::memset(handle, 0, kHandleBytes);
    if (cumemOwns(p)) {
      CumemHandle h{};
      h.kind = kCumemFd;
      int fd = -1;
      try {
        // (peerReimports: the importer lets go at each suspend and maps the new memory at resume)
        fd = cumemExport(p, &h.bytes, /*peerReimports=*/true);
        h.offer = fds::offer(fd);
      } catch (const Error& e) {  // (no descriptor to pass: the slots stay in shared host memory)
        if (fd >= 0) close(fd);
        BRAID_INFO(log::kInit | log::kShm, "CUDA device %d cannot share cuMem FIFO memory with other processes (%s); "
                   "their FIFO slots stay in shared host memory", device_, e.what());
        return false;
      } catch (...) {
        if (fd >= 0) close(fd);
        throw;
      }
      close(fd);  // (the offer keeps its own)
      {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = offered_.find(p);  // (a handle made before, withdrawn at a suspend or still offered)
        if (it != offered_.end()) fds::withdraw(it->second);
        offered_[p] = h.offer.token;
      }
      std::memcpy(handle, &h, sizeof h);
      return true;
    }
    cudaIpcMemHandle_t h{};
    const cudaError_t err = cudaIpcGetMemHandle(&h, p);
    if (err != cudaSuccess) {  // (no IPC here, say): the slots stay in host memory
      cudaGetLastError();
      BRAID_INFO(log::kInit | log::kShm, "CUDA device %d cannot share FIFO memory with other processes "
                 "(cudaIpcGetMemHandle: %s); their FIFO slots stay in shared host memory", device_, cudaGetErrorName(err));
      return false;
    }
    handle[0] = kLegacyIpc;
    std::memcpy(handle + 8, &h, sizeof h);
    return true;
  }
  void* importData(const uint8_t* handle, uint64_t bytes) override {
    DeviceGuard guard(device_);
    if (handle[0] == kCumemFd) {
      CumemHandle h{};
      std::memcpy(&h, handle, sizeof h);
      if (h.bytes < bytes) {
        fail(ncclSystemError, "a peer's FIFO slots handle maps %llu bytes but its slots take %llu",
             static_cast<unsigned long long>(h.bytes), static_cast<unsigned long long>(bytes));
      }
      const int fd = fds::fetch(h.offer);
      try {
        void* p = cumemImport(device_, fd, h.bytes);
        close(fd);
        return p;
      } catch (...) {
        close(fd);
        throw;
      }
    }
    if (handle[0] != kLegacyIpc) fail(ncclInternalError, "a FIFO memory handle of unknown kind %u", handle[0]);
    cudaIpcMemHandle_t h{};
    std::memcpy(&h, handle + 8, sizeof h);
    void* p = nullptr;
    BRAID_CUDA_CHECK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
    return p;
  }
  int dmabufFd(void* p, size_t bytes, uint64_t* offset) override {
    DeviceGuard guard(device_);
    std::string why;
    const int fd = cuda::dmabufFd(device_, p, bytes, offset, &why);
    if (fd < 0) BRAID_INFO(log::kInit | log::kNet, "CUDA device %d: no GPU Direct RDMA (%s)", device_, why.c_str());
    return fd;
  }
  /// As NCCL decides where a receive needs no flush: Hopper or later, the writes ordering
  /// attribute at least "owner", and not a GPU attached to its CPU by C2C (Grace: native host
  /// atomics), where completions and data take different paths.
  bool ordersRemoteWrites() override {
    int ordering = 0, major = 0, c2c = 0;
    const bool known = cudaDeviceGetAttribute(&ordering, cudaDevAttrGPUDirectRDMAWritesOrdering, device_) == cudaSuccess &&
                       cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_) == cudaSuccess &&
                       cudaDeviceGetAttribute(&c2c, cudaDevAttrHostNativeAtomicSupported, device_) == cudaSuccess;
    cudaGetLastError();
    return known && major >= 9 && !c2c && ordering >= cudaGPUDirectRDMAWritesOrderingOwner;
  }
  /// NCCL_NET_GDR_READ's default: NICs read GPU memory well from Ampere on.
  bool nicReadsWell() override {
    int major = 0;
    const bool known = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_) == cudaSuccess;
    cudaGetLastError();
    return known && major >= 8;
  }
  DataUse dataUse(void* p, uint64_t requested) override {
    if (!cumemOwns(p)) return DataUse{requested, false};  // (cudaMalloc: no address apart from the pages)
    return DataUse{cumemSize(p), cumemSuspendable(p) > 0};
  }
  bool suspendData(void* p, uint64_t keepBytes) override {
    if (cumemSuspendable(p) == 0) return false;  // (cumemSuspend refuses one suspended already)
    DeviceGuard guard(device_);
    std::vector<char> kept(keepBytes);
    if (keepBytes > 0) BRAID_CUDA_CHECK(cudaMemcpy(kept.data(), p, keepBytes, cudaMemcpyDeviceToHost));
    cumemSuspend(p);
    std::lock_guard<std::mutex> lock(mutex_);
    kept_[p] = std::move(kept);
    auto it = offered_.find(p);  // (the offered descriptor holds the old memory: NCCL closes its too)
    if (it != offered_.end()) {
      fds::withdraw(it->second);
      offered_.erase(it);
    }
    return true;
  }
  void resumeData(void* p) override {
    DeviceGuard guard(device_);
    std::vector<char> kept;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = kept_.find(p);
      if (it == kept_.end()) fail(ncclInternalError, "FIFO memory at %p was not suspended", p);
      kept = it->second;
    }
    cumemResume(p);
    // Zeroed as at allocation (stale LL flags would read as data), the kept words written back.
    std::lock_guard<std::mutex> lock(mutex_);
    cudaError_t err = stream_ == nullptr ? cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) : cudaSuccess;
    if (err == cudaSuccess) err = cudaMemsetAsync(p, 0, cumemSize(p), stream_);
    if (err == cudaSuccess && !kept.empty()) {
      err = cudaMemcpyAsync(p, kept.data(), kept.size(), cudaMemcpyHostToDevice, stream_);
    }
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream_);
    check(err, "restoring suspended FIFO slots (cudaMemsetAsync, cudaMemcpyAsync)");
    kept_.erase(p);
  }
  /// Only cuMem imports: a legacy IPC mapping's memory is cudaMalloc's, which its owner keeps.
  bool suspendImport(void* p) override {
    if (!cumemOwns(p)) return false;
    DeviceGuard guard(device_);
    cumemSuspendImport(p);
    return true;
  }
  void resumeImport(void* p, const uint8_t* handle, uint64_t bytes) override {
    CumemHandle h{};
    std::memcpy(&h, handle, sizeof h);
    if (h.kind != kCumemFd) {
      fail(ncclSystemError, "a peer's new FIFO slots handle is of kind %u, not a cuMem descriptor", h.kind);
    }
    if (h.bytes < bytes) {
      fail(ncclSystemError, "a peer's new FIFO slots handle maps %llu bytes but its slots take %llu",
           static_cast<unsigned long long>(h.bytes), static_cast<unsigned long long>(bytes));
    }
    DeviceGuard guard(device_);
    const int fd = fds::fetch(h.offer);
    try {
      cumemResumeImport(p, fd, h.bytes);
    } catch (...) {
      close(fd);
      throw;
    }
    close(fd);
  }
  void closeData(void* p) override {
    quietlyOn(device_, [p] {
      if (cumemOwns(p)) {
        cumemFree(p);
      } else {
        cudaIpcCloseMemHandle(p);
      }
    });
  }

 private:
  static void releaseData(void* p) {
    if (cumemOwns(p)) {
      cumemFree(p);
    } else {
      cudaFree(p);
    }
  }

  int device_;
  std::mutex mutex_;
  cudaStream_t stream_ = nullptr;  // for zeroing slots (never destroyed, as the allocator)
  std::map<void*, fds::Token> offered_;  // exported cuMem slots: their descriptors' tokens (fds::offer)
  std::map<void*, std::vector<char>> kept_;  // suspended slots: the bytes suspendData kept
};

}  // namespace

transport::FifoAllocator* fifoAllocatorOf(int device) {
  static std::mutex mutex;
  static std::vector<FifoAllocator*>* all = new std::vector<FifoAllocator*>();
  std::lock_guard<std::mutex> lock(mutex);
  if (static_cast<int>(all->size()) <= device) all->resize(device + 1, nullptr);
  if ((*all)[device] == nullptr) (*all)[device] = new FifoAllocator(device);
  return (*all)[device];
}

}  // namespace braid::runtime::cuda
