// Connection setup in the choice of an algorithm. A communicator makes an algorithm's
// connections the first time a collective runs it, so the first call of an algorithm costs its
// setup as well (on the host: from a few µs per connection between threads to a few hundred
// between processes; forced Direct on 256 ranks, seconds). The tuner's predictions are for
// calls whose connections exist.
//
// The ledger pays setup up front: the first call whose long-run choice (the tuner's) needs
// connections that are not made makes them and runs that choice, while the connections a rank
// holds stay within a budget (connectionBudget: every default choice's peers on every channel,
// several algorithms over). So a call's choice no longer changes after the first call of its
// size, and no later call pays setup: a benchmark's warm-up or a training loop's first step
// pays it, never a timed iteration or step 1000. The defaults connect O(log n) peers a channel
// (setup_ledger_test), so the budget is O(log n) a rank too: memory stays flat at 1024 ranks.
//
// Beyond the budget the ledger decides as a ski rental does: an algorithm whose connections are
// not made is chosen once the time it would have saved over the calls that ran something else
// reaches its setup (then it pays it). Never more than twice the better of "always the
// connected algorithm" and "set up at once", whatever the calls to come.
//
// Every rank must choose alike: the ledger holds only what the communicator's collectives (the
// same calls, in the same order, on every rank) made, never what one rank's sends and receives
// connected.
#pragma once

#include <array>
#include <cstdint>

#include "kernels/work.h"
#include "topology/tuner.h"

namespace braid::plan {

class SetupLedger {
 public:
  /// settle() takes the budget from the tuner it is given (connectionBudget).
  static constexpr int kBudgetFromTuner = -1;

  /// `budget`: connections (peers x channels, a rank) first calls may make up front; 0 makes
  /// every unconnected algorithm wait for its credit (the ski rental alone).
  explicit SetupLedger(int budget = kBudgetFromTuner);

  /// The default budget: 8 algorithms' worth of the most peers a default choice connects on a
  /// channel (max(7, 2 ceil(log2 n))), on each of the shape's channels.
  static int connectionBudget(const topo::Tuner& tuner);

  /// The choice for a collective of `bytes` among the allowed algorithms and protocols (bits
  /// of kernels::Algo and kernels::Proto; forcedProtos as Tuner::choose), given `best`, the
  /// tuner's choice when every connection exists: `best` itself where its connections are
  /// made or fit the budget (then they are made on this call), else the least of each
  /// algorithm's prediction plus the setup it still owes. Records the call: the chosen
  /// algorithm's channels are made, and each algorithm that would have been faster adds the
  /// time it would have saved to its credit.
  topo::Choice settle(const topo::Tuner& tuner, kernels::Func f, uint64_t bytes, uint32_t algos, uint32_t protos,
                      uint32_t forcedProtos, const topo::Choice& best);

  /// Channels of the algorithm's connections (for `f`) that collectives have made so far.
  int channelsMade(kernels::Func f, kernels::Algo a) const { return made_[slot(f, a)]; }

  /// Connections (peers x channels) the collectives' algorithms made so far, ring channel 0's
  /// aside (the ledger counts each algorithm's own; the transport shares a peer's connection
  /// between algorithms, so a rank holds at most this many).
  int connectionsMade() const { return connections_; }

  /// The µs of setup `a` still owes for `nChannels` channels (its setup less its credit).
  double owed(const topo::Tuner& tuner, kernels::Func f, kernels::Algo a, int nChannels) const;

 private:
  /// AlltoAll's Direct runs as sends and receives: the send/receive connections, not Direct's
  /// collective ones.
  static constexpr int kSendRecvSlot = topo::kTunerAlgos;
  static int slot(kernels::Func f, kernels::Algo a) {
    return f == kernels::Func::kAlltoAll && a == kernels::Algo::kDirect ? kSendRecvSlot : static_cast<int>(a);
  }
  /// Records `chosen`'s channels as made: its setup is paid.
  void made(const topo::Tuner& tuner, kernels::Func f, const topo::Choice& chosen);

  int budget_;
  int connections_ = 0;
  std::array<int, topo::kTunerAlgos + 1> made_{};
  std::array<double, topo::kTunerAlgos + 1> credit_{};  ///< µs the algorithm would have saved so far
};

}  // namespace braid::plan
