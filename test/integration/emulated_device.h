// A GPU played by the CPU, for testing the CUDA backend's path above the runtime where no GPU
// exists: launches return at once and run later on a thread of the device's, one after the
// other in the order they were made (as the CUDA backend orders a communicator's launches
// whatever their streams; so stream joins have nothing to do here); a collective launch runs
// every channel's works in turn on the host kernels, a peer launch runs the group's sends and
// receives, both marking their channels' statuses started and done as the CUDA kernels do;
// FIFOs, scratch and statuses are host memory, FIFO slots shared between processes memory
// files passed as cuMem's descriptors are (core/fd_exchange.h). Installed with
// comm::setTestDeviceFactory. It counts its launches and its sends' FIFO steps, so tests can
// check how a group was enqueued and whether a send went straight into the receiver's buffer.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/device.h"
#include "runtime/host/executor.h"

namespace braid::test {

class EmulatedDevice final : public runtime::Device {
 public:
  EmulatedDevice();
  ~EmulatedDevice() override;

  /// Launches (collective and peer) made by every emulated device of this process so far.
  static std::atomic<int> launches;
  /// Collective works those launches carried.
  static std::atomic<int> works;
  /// FIFO steps the peer launches' sends took (a direct send takes one).
  static std::atomic<uint64_t> sendSteps;
  /// The blocks every emulated device says it holds at once (Device::residentBlocks; 1024
  /// unless a test sets it before creating communicators).
  static std::atomic<int> residentBlocksAll;
  /// The most channels a collective launch of any emulated device has had so far.
  static std::atomic<int> maxLaunchChannels;
  /// The most bytes of arguments a collective launch carries in its parameters (as the CUDA
  /// device's limit: kernels::inlineArgLimit; kInlineArgBytes unless a test sets it), and how
  /// many launches carried theirs so.
  static std::atomic<size_t> inlineLimit;
  static std::atomic<int> packedLaunches;
  /// The most blocks a peer launch has asked for so far, and how many asked for fewer than 1 or
  /// more than their queues.
  static std::atomic<int> maxPeerBlocks;
  static std::atomic<int> badPeerBlocks;
  /// A stream the device says is being captured into a CUDA graph (captureId 1; null: none).
  /// Its launches run as any other (as if the graph were launched at once), but host
  /// functions are refused on it, as on a GPU.
  static std::atomic<void*> capturedStream;
  /// Bytes of "device memory" this process's emulated devices hold now: the FIFO slots they
  /// allocated (not those mapped from another process) and their scratch, as a GPU driver
  /// counts its physical allocations; a suspend's unmapped slots and scratch drop out.
  static std::atomic<int64_t> physicalBytes;
  /// Memory other processes can map (what ncclMemAlloc gives on a GPU): a memory file.
  static void* allocateShareable(size_t bytes);
  static void freeShareable(void* p);

  int ordinal() const override { return 0; }
  int residentBlocks() const override { return residentBlocksAll.load(); }
  transport::FifoAllocator* fifoAllocator() override;
  kernels::ChannelStatus* statuses() override { return statuses_.get(); }
  uint32_t* abortWord() override { return abort_.get(); }
  void* scratch(uint64_t bytes) override;
  uint64_t scratchBytes() const override;
  void releaseScratch() override;
  void restoreScratch() override;
  void reachDevice(int) override {}
  bool reachableFrom(int64_t) override { return true; }  // (every process's emulated device is the same "GPU")
  void checkBuffer(const void*, const char*, const char*) override {}
  void checkStream(void* stream, int localDeviceRanks, const char* call) override;
  uint64_t captureId(void* stream) override {
    return stream != nullptr && stream == capturedStream.load() ? 1 : 0;
  }
  int relaxCapture() override { return 0; }
  void restoreCapture(int) override {}
  void launchCollective(const kernels::CollWork* works, int nWorks, const kernels::RingHandle* rings, int nChannels,
                        int nRanks, bool copy, int red, int dtype, void* stream, const char* call) override;
  void launchPeers(const kernels::PeerOp* ops, const int* starts, int nQueues, int blocks,
                   const kernels::MappedBuffer* mapped, int nMapped, void* stream, const char* call) override;
  bool exportBuffer(const void* p, uint64_t bytes, BufferExport* out) override;
  void* importBuffer(const fds::Offer& from, uint64_t bytes) override;
  void closeBuffer(void* p) override;
  void* reachHost(void* p, size_t) override { return p; }  // (the "device" is the host)
  std::shared_ptr<char> allocatePinned(size_t bytes) override;
  std::unique_ptr<HostCopier> hostCopier() override;
  void putSignal(void* dst, const void* src, size_t bytes, uint64_t* counter, void* stream, const char* call) override;
  void waitSignals(const kernels::SignalWait* waits, int n, void* stream, const char* call) override;
  /// Copies into device memory made by the devices' host copiers (puts landed from another host).
  static std::atomic<int> hostCopies;
  /// One-sided operations (putSignal, waitSignals) run so far by every emulated device.
  static std::atomic<int> oneSidedRuns;
  uint64_t launchMark() override { return seq_; }
  bool launchesDone(uint64_t mark) override;
  void joinStreams(void* main, const std::vector<void*>& others) override;
  void releaseStreams(void* main, const std::vector<void*>& others) override;
  void copy(void* dst, const void* src, size_t bytes, void* stream) override;
  bool hostFunction(void* stream, std::function<void()> fn) override;
  void synchronize() override;
  bool busy() override;

 private:
  void enqueue(std::function<void()> job);
  void loop();

  std::unique_ptr<kernels::ChannelStatus[]> statuses_;
  std::unique_ptr<uint32_t> abort_;
  // The scratch blocks, the current one last (older ones kept, as on a GPU): the allocator's
  // unshared "device memory", whose address a suspend keeps (releaseScratch) as cuMem's.
  std::vector<void*> scratch_;
  uint64_t scratchBytes_ = 0;
  bool scratchSuspended_ = false;
  uint64_t seq_ = 0;  // launches made (the statuses' marks)
  std::atomic<uint64_t> doneLaunch_{0};  // the last launch that ran (they run in order)
  std::unique_ptr<transport::FifoAllocator> allocator_;
  runtime::host::Executor executor_{1};  // the worker's: runs a launch's channels
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> jobs_;
  uint64_t enqueued_ = 0, done_ = 0;
  bool stop_ = false;
  std::thread worker_;  // last: started when everything above exists
};

/// Installs the emulated device for every communicator created while it lives.
class EmulatedDeviceScope {
 public:
  EmulatedDeviceScope();
  ~EmulatedDeviceScope();
  EmulatedDeviceScope(const EmulatedDeviceScope&) = delete;
  EmulatedDeviceScope& operator=(const EmulatedDeviceScope&) = delete;
};

}  // namespace braid::test
