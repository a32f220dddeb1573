// The thread group of the host executor: the threads that run one channel together.
// Kernels take it as their Group (rank(), size(), sync(), syncAny()).
#pragma once

#include <atomic>
#include <cstdint>

#include "kernels/platform.h"

namespace braid::runtime::host {

/// A reusable spin barrier that backs off like every other wait (many ranks, few cores). Each
/// crossing also returns, to every thread alike, whether any of them passed `flag` (as CUDA's
/// __syncthreads_or): the threads of a channel agree at a barrier that the operation stops,
/// where reading a shared flag after it could see a later thread's setting and part ways.
class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : n_(n) {}
  bool wait(bool flag = false) {
    const uint32_t generation = generation_.load(std::memory_order_acquire);
    const int parity = generation & 1;
    if (flag) any_[parity].store(1, std::memory_order_relaxed);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      // The last to arrive: every earlier flag is visible (their arrivals released it). The
      // next crossing's accumulator was last used by the previous one, now over.
      const uint8_t any = any_[parity].load(std::memory_order_relaxed);
      result_[parity].store(any, std::memory_order_relaxed);
      any_[parity ^ 1].store(0, std::memory_order_relaxed);
      arrived_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
      return any != 0;
    }
    for (uint32_t spins = 0; generation_.load(std::memory_order_acquire) == generation; ++spins) {
      kernels::backOff(spins);
    }
    // Rewritten only two crossings on, which this thread must reach first.
    return result_[parity].load(std::memory_order_relaxed) != 0;
  }

 private:
  const int n_;
  std::atomic<int> arrived_{0};
  std::atomic<uint32_t> generation_{0};
  std::atomic<uint8_t> any_[2] = {};     ///< per crossing parity: a flag passed so far
  std::atomic<uint8_t> result_[2] = {};  ///< per crossing parity: what that crossing agreed
};

/// What the threads of one channel share.
struct ChannelShared {
  explicit ChannelShared(int threads) : barrier(threads) {}
  SpinBarrier barrier;
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
  /// All threads of the group: sync(), returning to every thread whether any of them passed
  /// true (the group agrees that the operation stops).
  bool syncAny(bool flag) { return size_ > 1 ? shared_->barrier.wait(flag) : flag; }
  /// LL128 (kernels/primitives.h, stepLL128): on the host a thread moves a whole 128-byte line.
  static constexpr int kLineLanes = 1;
  void lineSync() {}
  bool lineAny(bool flag) { return flag; }

 private:
  int rank_;
  int size_;
  ChannelShared* shared_;
};

}  // namespace braid::runtime::host
