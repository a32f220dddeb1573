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
// where the ranks exchange the boards' addresses and offers): a rank addresses the boards of
// the ranks that are threads of its process, and maps those of the other processes of its
// host (the counters live in a memory file: core/memory_files.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/memory_files.h"

namespace braid::comm {

class SignalBoard {
 public:
  SignalBoard(int rank, int nRanks, int contexts);
  ~SignalBoard();
  SignalBoard(const SignalBoard&) = delete;
  SignalBoard& operator=(const SignalBoard&) = delete;

  /// This rank's counters as the window registration announces them to its peers.
  uint64_t address() const { return reinterpret_cast<uint64_t>(counters_); }
  /// The board of `rank`, announced at `address` by a rank of this process.
  void learn(int rank, uint64_t address);
  /// An offer of this rank's counters to the other processes of this host (withdraw it with
  /// fds::withdraw once they have mapped it).
  fds::Offer offer() const;
  /// Maps the board `rank` (a process of this host) offered; throws what the mapping throws.
  void map(int rank, const fds::Offer& from);
  /// Whether this rank can bump `rank`'s counters (that rank is a thread of this process).
  bool reaches(int rank) const { return peers_[rank].load(std::memory_order_acquire) != nullptr; }
  /// Adds one to `peer`'s counter of (ctx, this rank), with release order: whatever this
  /// thread wrote before is visible to the peer's wait that sees it. The peer must be reached.
  void bump(int peer, int ctx);
  /// Adds one to this rank's own counter of (ctx, from), with release order: a signal from a
  /// rank that cannot address this board (another host), applied by the proxy thread after
  /// the put's data has landed (transport/net/one_sided_links.h).
  void arrive(int from, int ctx) { counters_[slot(ctx, from)].fetch_add(1, std::memory_order_release); }
  /// A wait for opCnt more signals of (ctx, peer): the count that satisfies it.
  uint64_t expect(int peer, int ctx, int opCnt);
  /// Whether this rank's counter of (ctx, peer) has reached `target` (acquire order).
  bool arrived(int peer, int ctx, uint64_t target) const {
    return counters_[slot(ctx, peer)].load(std::memory_order_acquire) >= target;
  }
  /// Signals of (ctx, peer) arrived so far, and consumed by waits so far (messages, tests).
  uint64_t arrivedCount(int peer, int ctx) const {
    return counters_[slot(ctx, peer)].load(std::memory_order_acquire);
  }
  uint64_t consumed(int peer, int ctx) const;
  /// The CUDA backend's view (kernels/one_sided.h): the words of `rank`'s board as this process
  /// addresses them (this rank's own, or a reached peer's), the board's size, and where the
  /// counter of (ctx, source) lies in a board.
  uint64_t* wordsOf(int rank) const {
    std::atomic<uint64_t>* words = rank == rank_ ? counters_ : peers_[rank].load(std::memory_order_acquire);
    return reinterpret_cast<uint64_t*>(words);
  }
  size_t bytes() const { return bytes_; }
  size_t indexOf(int ctx, int source) const { return slot(ctx, source); }

 private:
  size_t slot(int ctx, int rank) const { return static_cast<size_t>(ctx) * nRanks_ + rank; }

  const int rank_, nRanks_;
  const size_t bytes_;
  std::atomic<uint64_t>* counters_;  // (ctx, source) -> signals arrived; in a memory file
  std::vector<std::unique_ptr<memfiles::Mapping>> mapped_;  // other processes' boards (guarded by mutex_)
  std::unique_ptr<std::atomic<std::atomic<uint64_t>*>[]> peers_;  // by rank: its counters, or null
  mutable std::mutex mutex_;                                      // guards consumed_
  std::vector<uint64_t> consumed_;                                // (ctx, source) -> signals waited for
};

}  // namespace braid::comm
