// The CUDA backend's device: pinned host memory the GPU maps (FIFO counters, statuses, the
// abort word, launch arguments), device memory (FIFO slots, scratch), and launches on the
// user's stream, ordered after this rank's previous work whatever stream that went to.
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "core/log.h"
#include "core/params.h"
#include "core/status.h"
#include "comm/config.h"
#include "core/fd_exchange.h"
#include "runtime/cuda/cuda_support.h"
#include "runtime/cuda/cumem.h"
#include "runtime/cuda/fifo_allocator.h"
#include "kernels/launch_args.h"
#include "kernels/launch_sizes.h"
#include "runtime/cuda/kernel_table.h"
#include "runtime/cuda/one_sided_launch.h"
#include "runtime/cuda/host_landing.h"
#include "runtime/cuda/pinned_host.h"
#include "runtime/device.h"

namespace braid::runtime {

namespace cuda {
namespace {

/// Frees a scratch block (cuMem's or cudaMalloc's), suspended or not.
void freeScratchBlock(void* p) {
  if (cumemOwns(p)) {
    cumemFree(p);
  } else {
    cudaFree(p);
  }
}

/// Launch arguments that a captured graph owns: taken when a launch is captured, handed back
/// by the graph's destruction (a CUDA user object's destructor, which may not call CUDA, so
/// blocks are kept for later captures rather than freed). Process-wide and never destroyed:
/// a graph may outlive the communicator that captured into it.
class GraphBlocks {
 public:
  static GraphBlocks& process() {
    static GraphBlocks* pool = new GraphBlocks();
    return *pool;
  }
  /// Mapped host memory of at least `bytes` (a returned block, or a new one).
  char* take(size_t bytes, size_t* size) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (size_t i = 0; i < free_.size(); ++i) {
        if (free_[i].second < bytes) continue;
        char* p = free_[i].first;
        *size = free_[i].second;
        free_.erase(free_.begin() + static_cast<long>(i));
        return p;
      }
    }
    *size = (bytes + 4095) / 4096 * 4096;
    return static_cast<char*>(allocateMapped(*size, "a graph's launch arguments"));
  }
  void giveBack(char* p, size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.emplace_back(p, size);
  }
  /// Ties block p, which a launch captured into `graph` reads, to that graph: it comes back
  /// here when the graph and its instances are gone (never, when the driver refuses to tie it).
  void attach(cudaGraph_t graph, char* p, size_t size) {
    auto* owned = new Owned{p, size};
    cudaUserObject_t object = nullptr;
    cudaError_t err = cudaUserObjectCreate(&object, owned, &GraphBlocks::released, 1, cudaUserObjectNoDestructorSync);
    if (err != cudaSuccess) {  // (the captured launch reads p at every replay: p is not reused)
      delete owned;
      check(err, "cudaUserObjectCreate (a graph's launch arguments)");
    }
    err = cudaGraphRetainUserObject(graph, object, 1, cudaGraphUserObjectMove);
    if (err != cudaSuccess) {
      // The launch is in the graph already and reads the block at every replay: it is left
      // to the object (never released, so never reused) rather than handed back.
      check(err, "cudaGraphRetainUserObject (a graph's launch arguments)");
    }
  }

 private:
  struct Owned {
    char* memory;
    size_t size;
  };
  static void CUDART_CB released(void* data) {
    auto* owned = static_cast<Owned*>(data);
    process().giveBack(owned->memory, owned->size);
    delete owned;
  }
  std::mutex mutex_;
  std::vector<std::pair<char*, size_t>> free_;
};

/// Whether `s` is being captured into a graph, and that graph; throws ncclInvalidUsage when
/// its capture was invalidated (the launch would be lost, and the user's graph with it).
cudaGraph_t capturingGraph(cudaStream_t s, const char* call) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  cudaGraph_t graph = nullptr;
  check(cudaStreamGetCaptureInfo(s, &status, &id, &graph), "cudaStreamGetCaptureInfo");
  if (status == cudaStreamCaptureStatusInvalidated) {
    fail(ncclInvalidUsage, "%s: the stream's CUDA graph capture has been invalidated (by an earlier call that a "
                           "capture does not allow); end the capture and capture again", call);
  }
  return status == cudaStreamCaptureStatusActive ? graph : nullptr;
}

constexpr int kPeerThreads = 512;

/// Once per device and process, before any of Braid's kernels runs there: every kernel loaded
/// and the per-thread stack large enough for all of them. Either, left to a kernel's first
/// launch, makes the driver wait for the whole device, where other ranks' kernels may be
/// spinning until this rank's runs. Returns the blocks of Braid's kernels the whole device
/// holds at once (occupancy x multiprocessors), for the channel cap of ranks sharing it.
int prepareDevice(int device) {
  static std::mutex mutex;
  static std::vector<int>* resident = new std::vector<int>();  // per device; 0: not prepared yet, -1: unknown
  std::lock_guard<std::mutex> lock(mutex);
  if (static_cast<int>(resident->size()) <= device) resident->resize(device + 1, 0);
  if ((*resident)[device] != 0) return std::max(0, (*resident)[device]);
  KernelFacts facts;
  check(preloadKernels(&facts), "loading Braid's kernels (cudaFuncGetAttributes, cudaOccupancy...)");
  check(preloadOneSided(&facts.maxLocalBytes), "loading the one-sided kernels (cudaFuncGetAttributes)");
  size_t stack = 0;
  check(cudaDeviceGetLimit(&stack, cudaLimitStackSize), "cudaDeviceGetLimit(cudaLimitStackSize)");
  if (facts.maxLocalBytes > stack) {
    check(cudaDeviceSetLimit(cudaLimitStackSize, (facts.maxLocalBytes + 255) / 256 * 256),
          "cudaDeviceSetLimit(cudaLimitStackSize)");
  }
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute(SM count)");
  // (unknown, when no kernel was measured: no cap; a kernel that fits no block of 512 threads
  // leaves one a rank, and its launches fail with CUDA's reason)
  const int blocks = facts.minBlocksPerSm < 0 ? 0 : std::max(1, facts.minBlocksPerSm * std::max(1, sms));
  BRAID_INFO(log::kInit, "CUDA device %d: kernels loaded, %zu bytes of local memory a thread at most (stack limit "
             "%zu); %d blocks of %d threads resident at once (%d per multiprocessor x %d)", device,
             facts.maxLocalBytes, stack, blocks, kernels::kMaxBlockThreads, facts.minBlocksPerSm, sms);
  (*resident)[device] = blocks > 0 ? blocks : -1;
  return blocks;
}
constexpr size_t kMaxSharedBytes = 48 * 1024;  // shared memory without opting in
constexpr size_t kPeerStaticShared = 256;      // the peer kernel's own __shared__ variables, at most

class CudaDevice final : public Device {
 public:
  CudaDevice(int ordinal, int threadsPerBlock)
      : ordinal_(ordinal), threads_(threadsPerBlock), allocator_(fifoAllocatorOf(ordinal)) {
    DeviceGuard guard(ordinal_);
    residentBlocks_ = prepareDevice(ordinal_);
    BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors_, cudaDevAttrMultiProcessorCount, ordinal_));
    statuses_ = static_cast<kernels::ChannelStatus*>(
        allocateMapped(sizeof(kernels::ChannelStatus) * kMaxChannels, "channel statuses"));
    abort_ = static_cast<uint32_t*>(allocateMapped(64, "the abort word"));
    BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&last_, cudaEventDisableTiming));
    BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
    int driver = 0, major = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
    BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal_));
    inlineLimit_ = kernels::inlineArgLimit(params::process().integer("BRAID_INLINE_LAUNCH_ARGS") != 0, driver, major);
    BRAID_INFO(log::kInit, "CUDA device %d: launches carry up to %zu bytes of arguments in their parameters "
               "(driver %d.%d, sm_%d%s)", ordinal_, inlineLimit_, driver / 1000, driver % 1000 / 10, major * 10,
               inlineLimit_ == kernels::kInlineArgBytes || inlineLimit_ == 0 ? "" : "; more needs a 12.1 driver and sm_70");
  }

  ~CudaDevice() override {
    try {
      synchronize();
    } catch (const Error& e) {
      BRAID_WARN("CUDA device %d: while releasing a communicator's work: %s", ordinal_, e.what());
    }
    quietlyOn(ordinal_, [this] {
      for (Block& b : free_) release(b);
      for (Block& b : inFlight_) release(b);
      if (scratch_ != nullptr) freeScratchBlock(scratch_);
      for (const auto& [p, bytes] : retired_) freeScratchBlock(p);
      for (const auto& [host, view] : hostViews_) unpinHost(host);
      cudaEventDestroy(last_);
      cudaEventDestroy(join_);
      cudaFreeHost(statuses_);
      cudaFreeHost(abort_);
    });
  }

  int ordinal() const override { return ordinal_; }
  int residentBlocks() const override { return residentBlocks_; }

  /// The blocks of a peer launch: a block per queue up to `blocks` (the rank's channel cap, its
  /// share of the device's resident blocks of kernels with a collective's shared memory). A
  /// launch of many operations takes more shared memory a block, and the device holds fewer of
  /// those: the share shrinks in proportion, so that every rank's blocks still run together.
  int peerGrid(int blocks, int nQueues, size_t shared) const {
    int grid = std::clamp(blocks, 1, std::max(1, nQueues));
    if (grid == 1 || residentBlocks_ <= 0) return grid;
    int perSm = 0;
    if (cuda::peerBlocksPerSm(kPeerThreads, shared, &perSm) != cudaSuccess) {
      cudaGetLastError();
      return 1;  // (unknown: one block, as a launch of one queue)
    }
    const int64_t fits = static_cast<int64_t>(perSm) * multiprocessors_;
    if (fits < residentBlocks_) grid = static_cast<int>(std::max<int64_t>(1, grid * fits / residentBlocks_));
    return grid;
  }
  transport::FifoAllocator* fifoAllocator() override { return allocator_; }
  kernels::ChannelStatus* statuses() override { return statuses_; }
  uint32_t* abortWord() override { return abort_; }

  void* scratch(uint64_t bytes) override {
    if (bytes <= scratchBytes_) return scratch_;
    // The old block is kept, not freed, until the device goes: cudaFree would wait for every
    // kernel on the GPU, other ranks' too, which may be waiting for this rank's next one.
    DeviceGuard guard(ordinal_);
    void* grown = nullptr;
    if (cumemEnabled(ordinal_)) {  // (a suspend then keeps its address: see releaseScratch)
      try {
        grown = cumemAllocate(ordinal_, bytes);
      } catch (const Error& e) {
        BRAID_INFO(log::kAlloc, "CUDA device %d: scratch from cudaMalloc (%s)", ordinal_, e.what());
      }
    }
    if (grown == nullptr) BRAID_CUDA_CHECK(cudaMalloc(&grown, bytes));
    if (scratch_ != nullptr) retired_.emplace_back(scratch_, scratchBytes_);
    retiredBytes_ += scratchBytes_;
    scratch_ = grown;
    scratchBytes_ = cumemOwns(grown) ? cumemSize(grown) : bytes;  // (cuMem's: the granularity's multiple)
    return scratch_;
  }
  uint64_t scratchBytes() const override { return scratchBytes_ + retiredBytes_; }
  void releaseScratch() override {
    // (suspend: every rank of the communicator has synchronized, as NCCL's suspend does, so
    // cudaFree's wait for the device's kernels waits for none of theirs)
    synchronize();
    DeviceGuard guard(ordinal_);
    // cuMem blocks give their memory back and keep their address (a graph captured before the
    // suspend holds it); cudaMalloc's are freed.
    std::vector<std::pair<void*, uint64_t>> kept;
    for (const auto& [p, bytes] : retired_) {
      if (cumemSuspendable(p) > 0) {
        cumemSuspend(p);
        kept.emplace_back(p, bytes);
      } else {
        retiredBytes_ -= bytes;
        BRAID_CUDA_CHECK(cudaFree(p));
      }
    }
    retired_ = std::move(kept);
    if (scratch_ != nullptr && cumemSuspendable(scratch_) > 0) {
      cumemSuspend(scratch_);
    } else if (scratch_ != nullptr) {
      BRAID_CUDA_CHECK(cudaFree(scratch_));
      scratch_ = nullptr;
      scratchBytes_ = 0;
    }
    scratchSuspended_ = true;
  }
  void restoreScratch() override {
    if (!scratchSuspended_) return;
    DeviceGuard guard(ordinal_);
    for (const auto& [p, bytes] : retired_) cumemResume(p);
    if (scratch_ != nullptr) cumemResume(scratch_);
    scratchSuspended_ = false;
  }

  void reachDevice(int other) override {
    if (other == ordinal_) return;
    int canAccess = 0;
    BRAID_CUDA_CHECK(cudaDeviceCanAccessPeer(&canAccess, ordinal_, other));
    if (!canAccess) {
      fail(ncclInvalidUsage, "CUDA device %d cannot reach device %d's memory (no peer access), where another rank of "
                             "this process keeps the FIFOs this rank writes; run those ranks as separate processes",
           ordinal_, other);
    }
    DeviceGuard guard(ordinal_);
    const cudaError_t err = cudaDeviceEnablePeerAccess(other, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled) {
      cudaGetLastError();
      return;
    }
    check(err, "cudaDeviceEnablePeerAccess");
  }

  bool reachableFrom(int64_t busId) override {
    if (busId < 0 || busId == cudaBusId(ordinal_)) return busId >= 0;
    char text[32];
    std::snprintf(text, sizeof text, "%04llx:%02llx:%02llx.0", static_cast<unsigned long long>(busId >> 16),
                  static_cast<unsigned long long>((busId >> 8) & 0xff), static_cast<unsigned long long>((busId >> 3) & 0x1f));
    int other = -1;
    if (cudaDeviceGetByPCIBusId(&other, text) != cudaSuccess) {
      cudaGetLastError();
      return true;  // (not visible here: CUDA IPC may still open it; a failure there names NCCL_P2P_DISABLE)
    }
    int canAccess = 0;
    cudaDeviceCanAccessPeer(&canAccess, other, ordinal_);
    cudaGetLastError();
    return canAccess != 0;
  }

  void checkBuffer(const void* p, const char* name, const char* call) override {
    if (p == nullptr) return;
    cudaPointerAttributes a{};
    const cudaError_t err = cudaPointerGetAttributes(&a, p);
    if (err != cudaSuccess) check(err, "cudaPointerGetAttributes");
    if (a.type == cudaMemoryTypeUnregistered) {
      fail(ncclInvalidArgument, "%s: %s %p is pageable host memory, which CUDA device %d cannot reach; pass device "
                                "memory (cudaMalloc, ncclMemAlloc) or pinned memory, or set BRAID_BACKEND=host to run "
                                "on the CPU", call, name, p, ordinal_);
    }
    if (a.type == cudaMemoryTypeDevice && a.device != ordinal_) {
      int canAccess = 0;
      cudaDeviceCanAccessPeer(&canAccess, ordinal_, a.device);
      if (!canAccess) {
        fail(ncclInvalidArgument, "%s: %s %p is memory of CUDA device %d, which this rank's device %d cannot reach",
             call, name, p, a.device, ordinal_);
      }
    }
  }

  void checkStream(void* stream, int localDeviceRanks, const char* call) override {
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    capturingGraph(s, call);  // (throws for an invalidated capture)
    if (localDeviceRanks > 1 && (s == nullptr || s == cudaStreamLegacy)) {
      fail(ncclInvalidUsage, "%s: %d ranks of this process share CUDA device %d and this rank enqueues on the legacy "
                             "default stream, which runs its kernel only after every other stream's: the ranks' "
                             "kernels would wait for each other forever. Give each rank a stream of its own "
                             "(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking))", call, localDeviceRanks, ordinal_);
    }
  }

  uint64_t captureId(void* stream) override {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    BRAID_CUDA_CHECK(cudaStreamGetCaptureInfo(static_cast<cudaStream_t>(stream), &status, &id));
    return status == cudaStreamCaptureStatusActive ? static_cast<uint64_t>(id) : 0;
  }

  int relaxCapture() override {
    DeviceGuard guard(ordinal_);  // (a thread without a context gets this device's, not device 0's)
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    BRAID_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    return static_cast<int>(mode);
  }
  void restoreCapture(int mode) override {
    cudaStreamCaptureMode m = static_cast<cudaStreamCaptureMode>(mode);
    cudaThreadExchangeStreamCaptureMode(&m);
  }

  void launchCollective(const kernels::CollWork* works, int nWorks, const kernels::RingHandle* rings, int nChannels,
                        int nRanks, bool copy, int red, int dtype, void* stream, const char* call) override {
    DeviceGuard guard(ordinal_);
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    const int n = nWorks * nChannels;
    int withPeers = 0;  // works whose connection handles travel too
    for (int i = 0; i < n; ++i) withPeers += works[i].peerSend != nullptr;
    const size_t peerBytes = 2 * static_cast<size_t>(nRanks) * sizeof(kernels::ConnHandle);
    kernels::CollWork* w = nullptr;  // (null, with r: the arguments are in the launch's parameters)
    kernels::RingHandle* r = nullptr;
    const bool packed = kernels::packCollective(works, n, rings, nChannels, nRanks, &params_.args, inlineLimit_);
    Args args = packed ? argsInParameters(s, call)
                       : argsFor(s, n * sizeof(kernels::CollWork) + nChannels * sizeof(kernels::RingHandle) +
                                        withPeers * peerBytes,
                                 call);
    if (!packed) {
      w = reinterpret_cast<kernels::CollWork*>(args.memory);
      r = reinterpret_cast<kernels::RingHandle*>(w + n);
      auto* handles = reinterpret_cast<kernels::ConnHandle*>(r + nChannels);
      std::memcpy(w, works, n * sizeof(kernels::CollWork));
      std::memcpy(r, rings, nChannels * sizeof(kernels::RingHandle));
      for (int i = 0; i < n; ++i) {
        if (works[i].peerSend == nullptr) continue;
        std::memcpy(handles, works[i].peerSend, nRanks * sizeof(kernels::ConnHandle));
        std::memcpy(handles + nRanks, works[i].peerRecv, nRanks * sizeof(kernels::ConnHandle));
        w[i].peerSend = handles;
        w[i].peerRecv = handles + nRanks;
        handles += 2 * nRanks;
      }
    }
    const CollLaunch launch{dim3(nChannels), dim3(threads_), withPeers > 0 ? kernels::collectiveSharedBytes(nRanks) : 0,
                            s, w, nWorks, r, abort_, statuses_, ++launchSeq_, &params_,
                            packed ? kernels::inlineCollectiveBytes(n, nChannels, withPeers, nRanks) : 0};
    cudaGetLastError();  // the launch's own error only, not an earlier call's left behind
    const cudaError_t err = copy ? launchCopy(launch) : launchReduction(red, dtype, launch);
    launched(s, args, err);
    if (err == cudaErrorNotSupported) {
      fail(ncclInvalidUsage, "%s: this operator and type are not instantiated in this build's CUDA kernels "
                             "(-Dcuda-only-funcs=%s)", call, kCudaOnlyFuncs);
    }
    check(err, "the collective kernel's launch");
  }

  void launchPeers(const kernels::PeerOp* ops, const int* starts, int nQueues, int blocks,
                   const kernels::MappedBuffer* mapped, int nMapped, void* stream, const char* call) override {
    const int nOps = starts[nQueues];
    const size_t shared = kernels::peerSharedBytes(nOps, nQueues);
    if (shared > kMaxSharedBytes - kPeerStaticShared) {
      fail(ncclInvalidUsage, "%s: %d sends and receives in one group; the CUDA backend runs at most %zu at once", call,
           nOps, (kMaxSharedBytes - kPeerStaticShared - 4 * sizeof(int)) / (sizeof(kernels::PeerOp) + sizeof(int)));
    }
    DeviceGuard guard(ordinal_);
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    kernels::PeerOp* o = nullptr;  // (null, with q: the operations are in the launch's parameters)
    int* q = nullptr;
    const bool packed = kernels::packPeers(ops, starts, nQueues, &params_.args, inlineLimit_);
    const size_t opBytes = (nOps * sizeof(kernels::PeerOp) + (nQueues + 1) * sizeof(int) + 15) / 16 * 16;
    Args args = packed ? argsInParameters(s, call) : argsFor(s, opBytes + nMapped * sizeof(kernels::MappedBuffer), call);
    if (!packed) {
      o = reinterpret_cast<kernels::PeerOp*>(args.memory);
      q = reinterpret_cast<int*>(o + nOps);
      auto* m = reinterpret_cast<kernels::MappedBuffer*>(args.memory + opBytes);
      std::memcpy(o, ops, nOps * sizeof(kernels::PeerOp));
      std::memcpy(q, starts, (nQueues + 1) * sizeof(int));
      if (nMapped > 0) std::memcpy(m, mapped, nMapped * sizeof(kernels::MappedBuffer));
      for (int i = 0; i < nOps; ++i)
        if (o[i].mapped != nullptr) o[i].mapped = m + (ops[i].mapped - mapped);
    }
    cudaGetLastError();
    const cudaError_t err =
        cuda::launchPeers(PeerLaunch{dim3(peerGrid(blocks, nQueues, shared)), dim3(kPeerThreads), shared, s, o, q,
                                     nQueues, abort_, statuses_, ++launchSeq_, &params_,
                                     packed ? kernels::inlinePeerBytes(nQueues, nOps) : 0});
    launched(s, args, err);
    check(err, "the send/receive kernel's launch");
  }

  void joinStreams(void* main, const std::vector<void*>& others) override {
    DeviceGuard guard(ordinal_);
    for (void* other : others) {  // (one event serves them all: a wait takes the event as it is then)
      BRAID_CUDA_CHECK(cudaEventRecord(join_, static_cast<cudaStream_t>(other)));
      BRAID_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(main), join_, 0));
    }
  }
  void releaseStreams(void* main, const std::vector<void*>& others) override {
    if (others.empty()) return;
    DeviceGuard guard(ordinal_);
    BRAID_CUDA_CHECK(cudaEventRecord(join_, static_cast<cudaStream_t>(main)));
    for (void* other : others) BRAID_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(other), join_, 0));
  }

  bool hostFunction(void* stream, std::function<void()> fn) override {
    DeviceGuard guard(ordinal_);
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (capturingGraph(s, "a profiler's watch of the network") != nullptr) return false;
    beginOn(s);
    auto* held = new std::function<void()>(std::move(fn));
    const cudaError_t err = cudaLaunchHostFunc(
        s,
        [](void* p) {
          std::unique_ptr<std::function<void()>> f(static_cast<std::function<void()>*>(p));
          (*f)();
        },
        held);
    if (err != cudaSuccess) delete held;
    check(err, "cudaLaunchHostFunc");
    endOn(s, nullptr);
    return true;
  }

  void copy(void* dst, const void* src, size_t bytes, void* stream) override {
    DeviceGuard guard(ordinal_);
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    const bool captured = capturingGraph(s, "a copy to this rank itself") != nullptr;
    if (!captured) beginOn(s);
    BRAID_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
    if (!captured) endOn(s, nullptr);
  }

  void synchronize() override {
    DeviceGuard guard(ordinal_);
    RelaxedCapture relaxed(this);  // (another thread may be capturing in the global mode)
    if (hasLast_.load(std::memory_order_acquire)) BRAID_CUDA_CHECK(cudaEventSynchronize(last_));
    reclaim();
  }

  bool exportBuffer(const void* p, uint64_t bytes, BufferExport* out) override {
    DeviceGuard guard(ordinal_);
    void* base = nullptr;
    size_t size = 0;
    if (!cumemFind(p, bytes, &base, &size)) return false;  // (cudaMalloc, pools: not shareable this way)
    out->offer = cumemShare(base);
    out->base = static_cast<const char*>(base);
    out->bytes = size;
    return true;
  }
  void* importBuffer(const fds::Offer& from, uint64_t bytes) override {
    DeviceGuard guard(ordinal_);
    const int fd = fds::fetch(from, std::chrono::seconds(2));
    try {
      void* p = cumemImport(ordinal_, fd, bytes);
      close(fd);
      return p;
    } catch (...) {
      close(fd);
      throw;
    }
  }
  void closeBuffer(void* p) override {
    quietlyOn(ordinal_, [p] { cumemFree(p); });
  }
  void* reachHost(void* p, size_t bytes) override {
    std::lock_guard<std::mutex> lock(hostMutex_);
    auto known = hostViews_.find(p);
    if (known != hostViews_.end()) return known->second;
    DeviceGuard guard(ordinal_);
    pinHost(p, bytes);  // (counted: other ranks of this process may pin the same board)
    void* view = nullptr;
    const cudaError_t err = cudaHostGetDevicePointer(&view, p, 0);
    if (err != cudaSuccess) {
      unpinHost(p);
      check(err, "cudaHostGetDevicePointer (one-sided signal counters)");
    }
    hostViews_[p] = view;
    return view;
  }

  std::shared_ptr<char> allocatePinned(size_t bytes) override {
    DeviceGuard guard(ordinal_);
    return allocatePinnedHost(bytes);
  }
  std::unique_ptr<HostCopier> hostCopier() override { return makeHostCopier(ordinal_); }

  void putSignal(void* dst, const void* src, size_t bytes, uint64_t* counter, void* stream, const char* call) override {
    DeviceGuard guard(ordinal_);
    const cudaStream_t s = streamForOneSided(stream, call);
    beginOn(s);
    if (bytes > 0) BRAID_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
    check(launchSignal(counter, s), "the signal kernel's launch");
    endOn(s, nullptr);
  }

  void waitSignals(const kernels::SignalWait* waits, int n, void* stream, const char* call) override {
    DeviceGuard guard(ordinal_);
    const cudaStream_t s = streamForOneSided(stream, call);
    beginOn(s);
    for (int first = 0; first < n; first += kernels::kMaxSignalWaits) {  // (in turn: each must be reached)
      kernels::SignalWaits chunk{};
      chunk.count = std::min(n - first, kernels::kMaxSignalWaits);
      std::copy(waits + first, waits + first + chunk.count, chunk.waits);
      check(launchWaitSignals(chunk, abort_, s), "the signal wait kernel's launch");
    }
    endOn(s, nullptr);
  }

  uint64_t launchMark() override { return eagerSeq_; }
  bool launchesDone(uint64_t mark) override {
    reclaim();
    return inFlight_.empty() || inFlight_.front().seq > mark;
  }

  bool busy() override {
    // From the kernels' own marks, without a CUDA call: the watchdog's thread asks, and a CUDA
    // call there would make a context on its current device, could wait behind the driver's
    // locks, or fail as the process exits. A kernel still queued behind other work is not
    // running yet (its wait for peers has not begun).
    return anyChannelRunning(statuses_, kMaxChannels);
  }

 private:
  /// Launch arguments in mapped host memory, reused once the launch that read them is done.
  struct Block {
    char* memory = nullptr;
    size_t bytes = 0;
    cudaEvent_t done = nullptr;
    uint64_t seq = 0;  // the launch that reads it
  };

  static void release(Block& b) {
    if (b.done != nullptr) cudaEventDestroy(b.done);
    if (b.memory != nullptr) cudaFreeHost(b.memory);
  }

  void reclaim() {
    while (!inFlight_.empty() && cudaEventQuery(inFlight_.front().done) == cudaSuccess) {
      free_.push_back(inFlight_.front());
      inFlight_.pop_front();
    }
  }

  /// A free block of at least `bytes`, moved to the back of inFlight_.
  Block& takeBlock(size_t bytes) {
    reclaim();
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].bytes >= bytes) {
        inFlight_.push_back(free_[i]);
        free_.erase(free_.begin() + static_cast<long>(i));
        return inFlight_.back();
      }
    }
    Block b;
    b.bytes = (bytes + 65535) / 65536 * 65536;
    b.memory = static_cast<char*>(allocateMapped(b.bytes, "launch arguments"));
    const cudaError_t err = cudaEventCreateWithFlags(&b.done, cudaEventDisableTiming);
    if (err != cudaSuccess) {
      cudaFreeHost(b.memory);
      check(err, "cudaEventCreateWithFlags");
    }
    inFlight_.push_back(b);
    return inFlight_.back();
  }

  /// Where one launch's arguments go: a block of this device's, reused once that launch has
  /// run, or, on a stream being captured, memory the graph owns (graph != nullptr).
  struct Args {
    char* memory = nullptr;
    Block* block = nullptr;
    cudaGraph_t graph = nullptr;
    size_t size = 0;
  };
  /// Arguments of `bytes` for a launch on s, which is ordered after this rank's earlier
  /// uncaptured work (beginOn) unless s is being captured.
  Args argsFor(cudaStream_t s, size_t bytes, const char* call) {
    Args a;
    a.graph = capturingGraph(s, call);
    if (a.graph != nullptr) {
      a.memory = GraphBlocks::process().take(bytes, &a.size);
      return a;
    }
    a.block = &takeBlock(bytes);
    a.memory = a.block->memory;
    beginOn(s);
    return a;
  }
  /// A launch whose arguments travel in its parameters (params_): no memory to keep, but its
  /// order after this rank's uncaptured work, as argsFor's.
  Args argsInParameters(cudaStream_t s, const char* call) {
    Args a;
    a.graph = capturingGraph(s, call);
    if (a.graph == nullptr) beginOn(s);
    return a;
  }
  /// After the launch that used `a` returned err: on failure nothing runs, so the arguments
  /// are free again (the caller throws err); else they are kept until the launch has run, or
  /// for as long as the graph it went into lives.
  void launched(cudaStream_t s, Args& a, cudaError_t err) {
    if (a.memory == nullptr) {  // (argsInParameters': the graph holds the parameters itself)
      if (err == cudaSuccess && a.graph == nullptr) endOn(s, nullptr);
      return;
    }
    if (err != cudaSuccess) {
      if (a.graph != nullptr) {
        GraphBlocks::process().giveBack(a.memory, a.size);
      } else {
        free_.push_back(*a.block);
        inFlight_.pop_back();
      }
      return;
    }
    if (a.graph != nullptr) {
      GraphBlocks::process().attach(a.graph, a.memory, a.size);
    } else {
      a.block->seq = eagerSeq_ = launchSeq_;
      endOn(s, a.block);
    }
  }

  /// The stream of a one-sided call; throws ncclInvalidUsage when it is being captured: a
  /// replay would signal again, and a wait's count is fixed when it is enqueued.
  cudaStream_t streamForOneSided(void* stream, const char* call) {
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (capturingGraph(s, call) != nullptr) {
      fail(ncclInvalidUsage, "%s: the stream is being captured into a CUDA graph; one-sided calls in a graph are not "
                             "implemented on Braid's CUDA backend (call them outside the capture)", call);
    }
    return s;
  }

  /// Before enqueuing on s: this rank's previous work (on whatever stream) comes first, as
  /// NCCL orders a communicator's operations.
  void beginOn(cudaStream_t s) {
    if (hasLast_.load(std::memory_order_relaxed) && s != lastStream_) BRAID_CUDA_CHECK(cudaStreamWaitEvent(s, last_, 0));
  }
  /// After enqueuing on s: remember it as the last work, and when `block` is free again.
  void endOn(cudaStream_t s, Block* block) {
    BRAID_CUDA_CHECK(cudaEventRecord(last_, s));
    hasLast_.store(true, std::memory_order_release);
    lastStream_ = s;
    if (block != nullptr) BRAID_CUDA_CHECK(cudaEventRecord(block->done, s));
  }

  int ordinal_;
  int threads_;
  size_t inlineLimit_ = 0;          // the most bytes of arguments a launch carries in its parameters
  kernels::KernelParams params_{};  // a launch's parameters (copied by the launch, the bytes in use)
  int residentBlocks_ = 0;
  int multiprocessors_ = 1;
  transport::FifoAllocator* allocator_;
  kernels::ChannelStatus* statuses_ = nullptr;
  uint32_t* abort_ = nullptr;
  void* scratch_ = nullptr;
  uint64_t scratchBytes_ = 0;
  uint64_t retiredBytes_ = 0;  // retired_'s
  std::vector<std::pair<void*, uint64_t>> retired_;  // scratch blocks outgrown and their bytes (freed with the device)
  bool scratchSuspended_ = false;  // releaseScratch kept the blocks' addresses, not their memory
  cudaEvent_t last_ = nullptr;
  cudaEvent_t join_ = nullptr;  // joins a group's streams (joinStreams, releaseStreams)
  std::atomic<bool> hasLast_{false};
  uint64_t launchSeq_ = 0;  // kernels launched (their statuses' marks)
  uint64_t eagerSeq_ = 0;   // the latest of them not captured into a graph
  cudaStream_t lastStream_ = nullptr;
  std::mutex hostMutex_;              // guards hostViews_
  std::map<void*, void*> hostViews_;  // reachHost's: host memory (pinned, one hold) -> the kernels' address of it
  std::deque<Block> inFlight_;
  std::vector<Block> free_;
};

}  // namespace
}  // namespace cuda

std::unique_ptr<Device> openCudaDevice(int ordinal, int threadsPerBlock) {
  int count = 0;
  cuda::check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (ordinal < 0 || ordinal >= count) {
    fail(ncclInvalidArgument, "CUDA device %d does not exist (this process sees %d)", ordinal, count);
  }
  return std::make_unique<cuda::CudaDevice>(ordinal, threadsPerBlock);
}

int currentCudaDevice(const char** why) {
  // Without an NVIDIA driver's device node no CUDA device can exist: asking the runtime would
  // cost ~10 ms per process (it parses every registered kernel image first), which thousands of
  // host-backend ranks in forked processes (the test suites) would pay. /dev/dxg: WSL2's GPUs.
  static const bool driver = access("/dev/nvidiactl", F_OK) == 0 || access("/dev/dxg", F_OK) == 0;
  if (!driver) {
    if (why != nullptr) *why = "no NVIDIA driver (neither /dev/nvidiactl nor /dev/dxg exists)";
    return -1;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    if (why != nullptr) *why = count == 0 ? "no CUDA device or driver" : "the CUDA runtime found no usable device";
    return -1;
  }
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    if (why != nullptr) *why = "cudaGetDevice failed";
    return -1;
  }
  return device;
}

int64_t cudaBusId(int ordinal) {
  int domain = 0, bus = 0, device = 0;
  if (cudaDeviceGetAttribute(&domain, cudaDevAttrPciDomainId, ordinal) != cudaSuccess ||
      cudaDeviceGetAttribute(&bus, cudaDevAttrPciBusId, ordinal) != cudaSuccess ||
      cudaDeviceGetAttribute(&device, cudaDevAttrPciDeviceId, ordinal) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return (int64_t(domain) << 16) | (int64_t(bus) << 8) | (int64_t(device) << 3);
}

void* allocateDeviceMemory(size_t bytes) {
  int device = 0;
  cuda::check(cudaGetDevice(&device), "cudaGetDevice");
  if (cuda::cumemEnabled(device)) {
    try {
      return cuda::cumemAllocate(device, bytes);
    } catch (const Error& e) {
      BRAID_WARN("ncclMemAlloc: %s; using cudaMalloc", e.what());
    }
  }
  void* p = nullptr;
  cuda::check(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}

void freeDeviceMemory(void* p) {
  if (cuda::cumemOwns(p)) {
    cuda::cumemFree(p);
    return;
  }
  cuda::check(cudaFree(p), "cudaFree");
}

}  // namespace braid::runtime
