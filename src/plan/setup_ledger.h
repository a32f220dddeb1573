// Connection setup in the choice of an algorithm. A communicator makes an algorithm's
// connections the first time a collective runs it, so the first call of an algorithm costs its
// setup as well (on the host, thread ranks: a few hundred µs per connection; forced Direct on
// 256 ranks, seconds). The tuner's predictions are for calls whose connections exist; the
// ledger adds what an algorithm still owes for its connections and decides as a ski rental
// does: an algorithm whose connections are not made is chosen once the time it would have
// saved over the calls that ran something else reaches its setup (then it pays it). Never more
// than twice the better of "always the connected algorithm" and "set up at once", whatever the
// calls to come; a communicator that calls an algorithm's sizes many times pays its setup once
// and then runs the tuner's choice, one that calls it a few times never pays it.
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
  SetupLedger();

  /// The choice for a collective of `bytes` among the allowed algorithms and protocols (bits
  /// of kernels::Algo and kernels::Proto; forcedProtos as Tuner::choose), given `best`, the
  /// tuner's choice when every connection exists: `best` itself where its connections are
  /// made (no other work), else the least of each algorithm's prediction plus the setup it
  /// still owes. Records the call: the chosen algorithm's channels are made, and each
  /// algorithm that would have been faster adds the time it would have saved to its credit.
  topo::Choice settle(const topo::Tuner& tuner, kernels::Func f, uint64_t bytes, uint32_t algos, uint32_t protos,
                      uint32_t forcedProtos, const topo::Choice& best);

  /// Channels of the algorithm's connections (for `f`) that collectives have made so far.
  int channelsMade(kernels::Func f, kernels::Algo a) const { return made_[slot(f, a)]; }

  /// The µs of setup `a` still owes for `nChannels` channels (its setup less its credit).
  double owed(const topo::Tuner& tuner, kernels::Func f, kernels::Algo a, int nChannels) const;

 private:
  /// AlltoAll's Direct runs as sends and receives: the send/receive connections, not Direct's
  /// collective ones.
  static constexpr int kSendRecvSlot = topo::kTunerAlgos;
  static int slot(kernels::Func f, kernels::Algo a) {
    return f == kernels::Func::kAlltoAll && a == kernels::Algo::kDirect ? kSendRecvSlot : static_cast<int>(a);
  }

  std::array<int, topo::kTunerAlgos + 1> made_{};
  std::array<double, topo::kTunerAlgos + 1> credit_{};  ///< µs the algorithm would have saved so far
};

}  // namespace braid::plan
