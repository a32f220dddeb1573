// The thread group of the host executor: the threads that run one channel together.
// Kernels take it as their Group (rank(), size(), sync(), setAborted(), aborted()).
#pragma once

#include <atomic>
#include <cstdint>

#include "kernels/platform.h"

namespace braid::runtime::host {

/// A reusable spin barrier that backs off like every other wait (many ranks, few cores).
class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : n_(n) {}
  void wait() {
    const uint32_t generation = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
      return;
    }
    for (uint32_t spins = 0; generation_.load(std::memory_order_acquire) == generation; ++spins) {
      kernels::backOff(spins);
    }
  }

 private:
  const int n_;
  std::atomic<int> arrived_{0};
  std::atomic<uint32_t> generation_{0};
};

/// What the threads of one channel share.
struct ChannelShared {
  explicit ChannelShared(int threads) : barrier(threads) {}
  SpinBarrier barrier;
  std::atomic<int> aborted{0};
};

class HostGroup {
 public:
  HostGroup(int rank, int size, ChannelShared* shared) : rank_(rank), size_(size), shared_(shared) {}
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// All threads of the group: returns when every one has called it.
  void sync() {
    if (size_ > 1) shared_->barrier.wait();
  }
  void setAborted() { shared_->aborted.store(1, std::memory_order_release); }
  bool aborted() const { return shared_->aborted.load(std::memory_order_acquire) != 0; }

 private:
  int rank_;
  int size_;
  ChannelShared* shared_;
};

}  // namespace braid::runtime::host
