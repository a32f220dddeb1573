// The counters of one-sided operations (ncclPutSignal, ncclSignal, ncclWaitSignal).
//
// As in NCCL, signals are counted at their target and the expected value is kept by the
// waiter: each rank owns a board with one counter per (context, source rank). A put or a
// signal from rank s to rank t adds one to t's counter (ctx, s) with release order, after its
// data has landed; a wait at t for opCnt signals from s raises what t has consumed of (ctx, s)
// by opCnt and polls the counter with acquire order until it reaches that: the data of every
// put counted is then visible. Counting is cumulative, so a signal that arrives before its
// wait is never lost, and several puts are waited for at once (opCnt > 1).
//
// The board is made when the communicator's first window is registered (a collective call,
// where the ranks exchange the boards' addresses): a rank addresses the boards of the ranks
// that are threads of its process.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace braid::comm {

class SignalBoard {
 public:
  SignalBoard(int rank, int nRanks, int contexts);
  SignalBoard(const SignalBoard&) = delete;
  SignalBoard& operator=(const SignalBoard&) = delete;

  /// This rank's counters as the window registration announces them to its peers.
  uint64_t address() const { return reinterpret_cast<uint64_t>(counters_.get()); }
  /// The board of `rank`, announced at `address` by a rank of this process.
  void learn(int rank, uint64_t address);
  /// Whether this rank can bump `rank`'s counters (that rank is a thread of this process).
  bool reaches(int rank) const { return peers_[rank].load(std::memory_order_acquire) != nullptr; }
  /// Adds one to `peer`'s counter of (ctx, this rank), with release order: whatever this
  /// thread wrote before is visible to the peer's wait that sees it. The peer must be reached.
  void bump(int peer, int ctx);
  /// A wait for opCnt more signals of (ctx, peer): the count that satisfies it.
  uint64_t expect(int peer, int ctx, int opCnt);
  /// Whether this rank's counter of (ctx, peer) has reached `target` (acquire order).
  bool arrived(int peer, int ctx, uint64_t target) const {
    return counters_[slot(ctx, peer)].load(std::memory_order_acquire) >= target;
  }
  /// Signals of (ctx, peer) arrived so far, and consumed by waits so far (messages, tests).
  uint64_t arrivedCount(int peer, int ctx) const { return counters_[slot(ctx, peer)].load(std::memory_order_acquire); }
  uint64_t consumed(int peer, int ctx) const;

 private:
  size_t slot(int ctx, int rank) const { return static_cast<size_t>(ctx) * nRanks_ + rank; }

  const int rank_, nRanks_;
  std::unique_ptr<std::atomic<uint64_t>[]> counters_;          // (ctx, source) -> signals arrived
  std::unique_ptr<std::atomic<std::atomic<uint64_t>*>[]> peers_;  // by rank: its counters, or null
  mutable std::mutex mutex_;                                      // guards consumed_
  std::vector<uint64_t> consumed_;                                // (ctx, source) -> signals waited for
};

}  // namespace braid::comm
