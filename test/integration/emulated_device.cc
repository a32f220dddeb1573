#include "integration/emulated_device.h"

#include <cstdlib>
#include <cstring>

#include "comm/config.h"
#include "core/status.h"
#include "kernels/algorithms/send_recv.h"
#include "runtime/host/kernel_table.h"
#include "runtime/host/peer_loop.h"
#include "transport/fifo.h"

namespace braid::test {

namespace {

/// The "device memory": host memory, zeroed, the slots apart from the counters as on a GPU.
/// Process-wide and never destroyed, as the CUDA backend's (FIFOs outlive communicators).
class HostFifoAllocator final : public transport::FifoAllocator {
 public:
  void* allocateControl(size_t bytes) override { return zeroed(bytes); }
  void freeControl(void* p) override { std::free(p); }
  void* allocateData(size_t bytes, bool) override { return zeroed(bytes); }
  void freeData(void* p) override { std::free(p); }
  void registerHost(void*, size_t) override {}
  void unregisterHost(void*) override {}

 private:
  static void* zeroed(size_t bytes) {
    void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (p == nullptr) fail(ncclSystemError, "emulated device: cannot allocate %zu bytes", bytes);
    std::memset(p, 0, bytes);
    return p;
  }
};

}  // namespace

std::atomic<int> EmulatedDevice::launches{0};
std::atomic<int> EmulatedDevice::works{0};

EmulatedDevice::EmulatedDevice()
    : statuses_(new kernels::ChannelStatus[kMaxChannels]()), abort_(new uint32_t(0)) {
  worker_ = std::thread([this] { loop(); });
}

EmulatedDevice::~EmulatedDevice() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  worker_.join();
}

transport::FifoAllocator* EmulatedDevice::fifoAllocator() {
  static HostFifoAllocator* allocator = new HostFifoAllocator();
  return allocator;
}

void* EmulatedDevice::scratch(uint64_t bytes) {
  if (bytes > scratchBytes_) {  // (older blocks are kept: a queued launch may still use one)
    scratch_.emplace_back(new char[bytes]());
    scratchBytes_ = bytes;
  }
  return scratch_.empty() ? nullptr : scratch_.back().get();
}

void EmulatedDevice::checkStream(void* stream, int localDeviceRanks, const char* call) {
  if (localDeviceRanks > 1 && stream == nullptr) {
    fail(ncclInvalidUsage, "%s: %d ranks of this process share the emulated device and this rank enqueues on the legacy "
                           "default stream", call, localDeviceRanks);
  }
}

void EmulatedDevice::launchCollective(const kernels::CollWork* given, int nWorks, const kernels::RingHandle* rings,
                                      int nChannels, int nRanks, bool copy, int red, int dtype, void*, const char* call) {
  using runtime::host::HostCollectiveFn;
  const HostCollectiveFn fn = copy ? runtime::host::kCopyFunction : runtime::host::kReductionTable[red][dtype];
  if (fn == nullptr) fail(ncclInvalidUsage, "%s: not instantiated in this build", call);
  // The arguments are copied, the connection handles too, as a GPU launch's are.
  const int n = nWorks * nChannels;
  auto w = std::make_shared<std::vector<kernels::CollWork>>(given, given + n);
  auto r = std::make_shared<std::vector<kernels::RingHandle>>(rings, rings + nChannels);
  auto handles = std::make_shared<std::vector<kernels::ConnHandle>>();
  handles->reserve(2 * static_cast<size_t>(n) * nRanks);
  for (kernels::CollWork& work : *w) {
    if (work.peerSend == nullptr) continue;
    const size_t at = handles->size();
    handles->insert(handles->end(), work.peerSend, work.peerSend + nRanks);
    handles->insert(handles->end(), work.peerRecv, work.peerRecv + nRanks);
    work.peerSend = handles->data() + at;
    work.peerRecv = handles->data() + at + nRanks;
  }
  const uint64_t seq = ++seq_;
  ++launches;
  works += nWorks;
  enqueue([this, fn, w, r, handles, nWorks, nChannels, seq] {
    executor_.runChannels(nChannels, [&](int c, runtime::host::HostGroup& g) {
      kernels::storeRelease(&statuses_[c].startedSeq, seq);
      for (int i = 0; i < nWorks; ++i) {
        if (!fn(g, (*w)[static_cast<size_t>(i) * nChannels + c], (*r)[c], abort_.get())) break;
      }
      kernels::storeRelease(&statuses_[c].doneSeq, seq);
    });
  });
}

void EmulatedDevice::launchPeers(const kernels::PeerOp* ops, const int* starts, int nQueues, void*, const char*) {
  std::vector<std::deque<kernels::PeerOp>> queues(nQueues);
  for (int q = 0; q < nQueues; ++q)
    for (int i = starts[q]; i < starts[q + 1]; ++i) queues[q].push_back(ops[i]);
  const uint64_t seq = ++seq_;
  ++launches;
  enqueue([this, queues = std::move(queues), seq]() mutable {
    kernels::storeRelease(&statuses_[0].startedSeq, seq);
    runtime::host::drivePeerQueues(queues, statuses_[0], abort_.get());  // (aborted or not, the launch ends)
    kernels::storeRelease(&statuses_[0].doneSeq, seq);
  });
}

void EmulatedDevice::joinStreams(void*, const std::vector<void*>&) {}
void EmulatedDevice::releaseStreams(void*, const std::vector<void*>&) {}

void EmulatedDevice::copy(void* dst, const void* src, size_t bytes, void*) {
  enqueue([dst, src, bytes] { std::memmove(dst, src, bytes); });
}

void EmulatedDevice::synchronize() {
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t target = enqueued_;
  changed_.wait(lock, [&] { return done_ >= target; });
}

bool EmulatedDevice::busy() { return runtime::anyChannelRunning(statuses_.get(), kMaxChannels); }

void EmulatedDevice::enqueue(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(job));
    ++enqueued_;
  }
  changed_.notify_all();
}

void EmulatedDevice::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // (stopping, and everything ran)
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    job();
    lock.lock();
    ++done_;
    changed_.notify_all();
  }
}

}  // namespace braid::test
