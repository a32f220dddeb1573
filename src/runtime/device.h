// What a communicator whose kernels run on a GPU needs beside the data path it shares with the
// host backend (src/datapath/data_path.h): where FIFOs, statuses, the abort word and scratch
// memory live, and how kernels are enqueued on the user's stream. The CUDA backend implements
// it (src/runtime/cuda/); this header needs no CUDA headers, so everything above it builds
// without CUDA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/fd_exchange.h"
#include "kernels/algorithms/send_recv.h"
#include "kernels/one_sided.h"
#include "kernels/work.h"
#include "transport/fifo.h"

namespace braid::runtime {

class Device {
 public:
  virtual ~Device() = default;
  /// The device's ordinal (cudaSetDevice's).
  virtual int ordinal() const = 0;
  /// Blocks of Braid's collective kernels (at their most threads and shared memory) the whole
  /// device runs at once: the ranks sharing it split these between their channels, so that
  /// every rank's blocks are resident together (a rank spinning on a peer whose block waits
  /// for a free multiprocessor would hang). 0 when unknown.
  virtual int residentBlocks() const = 0;
  /// Where the connections' FIFOs come from (process-wide per device: FIFOs may outlive this).
  virtual transport::FifoAllocator* fifoAllocator() = 0;
  /// kMaxChannels channel statuses, written by the kernels and read by the watchdog.
  virtual kernels::ChannelStatus* statuses() = 0;
  /// The word the kernels poll for abort (the communicator raises it with its own).
  virtual uint32_t* abortWord() = 0;
  /// Device memory of at least `bytes` for the kernels' scratch; growing it first waits for
  /// this rank's enqueued work.
  virtual void* scratch(uint64_t bytes) = 0;
  /// Bytes of device memory scratch() holds now (outgrown blocks included; while suspended,
  /// those releaseScratch kept the address of).
  virtual uint64_t scratchBytes() const { return 0; }
  /// Gives back every scratch block's memory (a suspended communicator's; after synchronize, so
  /// no kernel uses one). Blocks whose address can be kept (cuMem) keep it, so that a CUDA graph
  /// captured before the suspend still finds its scratch after restoreScratch; the others are
  /// freed, and the next scratch() allocates anew.
  virtual void releaseScratch() {}
  /// Resume: maps the blocks releaseScratch kept the address of again (contents undefined: a
  /// kernel's scratch lives within its launch).
  virtual void restoreScratch() {}
  /// Lets this device's kernels reach device `other`'s memory (another rank of this process
  /// there keeps FIFO slots this rank writes); throws ncclInvalidUsage when they cannot.
  virtual void reachDevice(int other) = 0;
  /// Whether this device's memory may hold FIFO slots that a rank of another process on the
  /// GPU with PCI bus id `busId` (cudaBusId's) writes: the same GPU, or one with peer access
  /// to this one; a GPU this process does not see is assumed to reach it (CUDA IPC opens
  /// handles of devices the process cannot see).
  virtual bool reachableFrom(int64_t busId) = 0;
  /// Throws ncclInvalidArgument naming `name` and `call` when `p` is memory the device cannot
  /// reach (a pageable host pointer, another device's memory without peer access).
  virtual void checkBuffer(const void* p, const char* name, const char* call) = 0;
  /// Throws ncclInvalidUsage when work on `stream` could never run beside the other ranks' of
  /// `call` (several ranks of this process on one device with the legacy default stream), or
  /// when the stream's CUDA graph capture has been invalidated.
  virtual void checkStream(void* stream, int localDeviceRanks, const char* call) = 0;
  /// The id of the CUDA graph capture `stream` is part of, 0 when it is not being captured.
  virtual uint64_t captureId(void* stream) = 0;
  /// Sets the calling thread's stream capture mode to relaxed and returns the one it had: while
  /// a user captures a graph in the global mode, the calls Braid makes beside its launches
  /// (allocating, querying its own events) would otherwise invalidate that capture.
  virtual int relaxCapture() = 0;
  /// Gives the calling thread back the capture mode relaxCapture returned.
  virtual void restoreCapture(int mode) = 0;
  /// Enqueues nWorks collectives as one launch on `stream` (a cudaStream_t): nChannels blocks
  /// over rings[0, nChannels) of a communicator of nRanks, block c running works[i * nChannels
  /// + c] for i = 0, 1, ... in turn; `copy`: the byte kernel, else the reduction kernel of (red,
  /// dtype). Returns at once; the arguments are copied (the caller's may go). On a stream being captured the launch goes into the graph,
  /// which keeps its arguments for as long as it lives, and is not ordered after this rank's
  /// uncaptured work (the user orders graph launches, as with NCCL).
  virtual void launchCollective(const kernels::CollWork* works, int nWorks, const kernels::RingHandle* rings,
                                int nChannels, int nRanks, bool copy, int red, int dtype, void* stream,
                                const char* call) = 0;
  /// Enqueues a group's sends and receives: queue q is ops[starts[q], starts[q + 1]), run in
  /// order on its connection, the queues spread over `blocks` channels (1 to nQueues: queue q
  /// on channel q mod blocks, each marking its own status). An op's `mapped` points into
  /// mapped[0, nMapped), copied with the ops (the kernel reads the copy).
  virtual void launchPeers(const kernels::PeerOp* ops, const int* starts, int nQueues, int blocks,
                           const kernels::MappedBuffer* mapped, int nMapped, void* stream, const char* call) = 0;
  /// Makes `main` wait for the work enqueued so far on each of `others`, so that one launch on
  /// main can serve a group whose operations name several streams.
  virtual void joinStreams(void* main, const std::vector<void*>& others) = 0;
  /// Makes each of `others` wait for what is enqueued on `main` so far (the group's launch).
  virtual void releaseStreams(void* main, const std::vector<void*>& others) = 0;
  /// Enqueues a copy (a send to this rank itself; a cross-host put's staging: device or pinned
  /// host memory on either side, as cudaMemcpyDefault takes them).
  virtual void copy(void* dst, const void* src, size_t bytes, void* stream) = 0;
  /// Enqueues fn on `stream`, after this rank's work enqueued so far and before what it
  /// enqueues later: it runs on a thread of the runtime's once that work has ended (it may not
  /// call the device). False, and nothing enqueued, on a stream being captured into a graph
  /// (a replay would run it again).
  virtual bool hostFunction(void* stream, std::function<void()> fn) = 0;
  /// Waits until everything this rank enqueued has finished (or was aborted).
  virtual void synchronize() = 0;
  /// Where a registered receive buffer lies for a sender in another process of this host to
  /// map (kernels/algorithms/send_recv.h's offering operations): the allocation holding it.
  struct BufferExport {
    fds::Offer offer;  ///< where importBuffer fetches the allocation
    const char* base;  ///< its first byte
    uint64_t bytes;    ///< its size
  };
  /// Exports the allocation holding all of [p, p + bytes) (once: the export lives as long as
  /// the allocation); false when such memory cannot be shared this way (not memory of this
  /// backend's ncclMemAlloc).
  virtual bool exportBuffer(const void* p, uint64_t bytes, BufferExport* out) = 0;
  /// Maps the `bytes` another process exported as `from`; throws when it cannot.
  virtual void* importBuffer(const fds::Offer& from, uint64_t bytes) = 0;
  /// Unmaps what importBuffer returned.
  virtual void closeBuffer(void* p) = 0;
  /// Host memory [p, p + bytes) (a signal board's memory file, comm/signals.h) as the device's
  /// kernels address it: pinned and mapped at the first call for p (and kept until the device
  /// goes), the same address afterwards. Throws ncclUnhandledCudaError when CUDA refuses.
  virtual void* reachHost(void* p, size_t bytes) = 0;
  /// Host memory of `bytes` (> 0) that this device copies to and from at full speed (pinned; the
  /// one-sided operations' staging across hosts, datapath/one_sided_relay.h). The deleter needs
  /// no Device: the memory may outlive this object. Throws ncclUnhandledCudaError when CUDA refuses.
  virtual std::shared_ptr<char> allocatePinned(size_t bytes) = 0;
  /// Copies host bytes into this device's memory now, on the calling thread (a proxy thread's),
  /// on a stream of its own that waits for no other: a stream that a wait kernel holds does not
  /// hold it. May outlive the Device that made it.
  class HostCopier {
   public:
    virtual ~HostCopier() = default;
    /// Returns once [dst, dst + bytes) holds the bytes, visible to kernels that read them after
    /// a system-scope acquire of a host word written after this returned. Throws on a CUDA error.
    virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  };
  virtual std::unique_ptr<HostCopier> hostCopier() = 0;
  /// ncclPutSignal and ncclSignal on `stream`, after this rank's earlier work (as every launch):
  /// copies `bytes` from src to dst (0: none), then adds one to *counter (a reachHost address)
  /// with release order after the copy's data (kernels/one_sided.h).
  virtual void putSignal(void* dst, const void* src, size_t bytes, uint64_t* counter, void* stream,
                         const char* call) = 0;
  /// ncclWaitSignal on `stream`: what is enqueued on it later runs once every counter of
  /// waits[0, n) (reachHost addresses) has reached its target, or the abort word was raised.
  /// Returns at once.
  virtual void waitSignals(const kernels::SignalWait* waits, int n, void* stream, const char* call) = 0;
  /// The number of this rank's latest launch not captured into a graph (0: none yet).
  virtual uint64_t launchMark() = 0;
  /// Whether every uncaptured launch up to `mark` (launchMark's) has finished running.
  virtual bool launchesDone(uint64_t mark) = 0;
  /// Whether a kernel of this rank's is running (started and not ended, captured or not;
  /// one still queued behind other work does not count); any thread may ask (the watchdog's
  /// does), and no CUDA call is made.
  virtual bool busy() = 0;
};

/// Whether a kernel runs on any of statuses[0, n): one that marked its channel started and not
/// yet done (the marks every kernel leaves, for Device::busy).
inline bool anyChannelRunning(const kernels::ChannelStatus* statuses, int n) {
  for (int c = 0; c < n; ++c) {
    auto* s = const_cast<kernels::ChannelStatus*>(statuses + c);
    if (kernels::loadAcquire(&s->startedSeq) != kernels::loadAcquire(&s->doneSeq)) return true;
  }
  return false;
}

/// relaxCapture() while it lives (nothing without a device).
class RelaxedCapture {
 public:
  explicit RelaxedCapture(Device* device) : device_(device), saved_(device != nullptr ? device->relaxCapture() : 0) {}
  ~RelaxedCapture() {
    if (device_ != nullptr) device_->restoreCapture(saved_);
  }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  Device* device_;
  int saved_;
};

/// The CUDA device `ordinal` for one communicator, running threadsPerBlock threads per channel;
/// throws ncclInvalidUsage in a build without CUDA, ncclUnhandledCudaError when CUDA refuses.
std::unique_ptr<Device> openCudaDevice(int ordinal, int threadsPerBlock);

/// CUDA device `ordinal`'s PCI bus id as one number (domain << 16 | bus << 8 | device << 3),
/// the same in every process whatever CUDA_VISIBLE_DEVICES says; -1 without CUDA.
int64_t cudaBusId(int ordinal);

/// The calling thread's current CUDA device, or -1 (no CUDA in this build, no driver, no
/// device); `why` says which when it is -1.
int currentCudaDevice(const char** why = nullptr);

/// ncclMemAlloc on the CUDA backend: `bytes` of device memory on the calling thread's current
/// device (cudaMalloc); throws ncclUnhandledCudaError naming the call when CUDA refuses.
void* allocateDeviceMemory(size_t bytes);
void freeDeviceMemory(void* p);

}  // namespace braid::runtime
