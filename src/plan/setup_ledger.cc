#include "plan/setup_ledger.h"

#include <algorithm>

#include "core/log.h"

namespace braid::plan {

SetupLedger::SetupLedger(int budget) : budget_(budget) {
  // Every collective first announces itself on ring channel 0: its connections are made by
  // whichever algorithm runs, never an algorithm's own cost.
  made_[static_cast<int>(kernels::Algo::kRing)] = 1;
}

int SetupLedger::connectionBudget(const topo::Tuner& tuner) {
  constexpr int kAlgorithms = 8;  // (more than the defaults choose across one collective's sizes)
  int log2n = 0;
  while ((1 << log2n) < tuner.shape().nRanks && log2n < 30) ++log2n;
  return kAlgorithms * std::max(1, tuner.shape().maxChannels) * std::max(7, 2 * log2n);
}

double SetupLedger::owed(const topo::Tuner& tuner, kernels::Func f, kernels::Algo a, int nChannels) const {
  const int s = slot(f, a);
  const int more = nChannels - made_[s];
  if (more <= 0) return 0;
  return std::max(0.0, tuner.setupUs(a, more) - credit_[s]);
}

void SetupLedger::made(const topo::Tuner& tuner, kernels::Func f, const topo::Choice& chosen) {
  const int s = slot(f, chosen.algo);
  if (made_[s] >= chosen.nChannels) return;
  connections_ += tuner.peersPerChannel(chosen.algo) * (chosen.nChannels - made_[s]);
  made_[s] = chosen.nChannels;
  credit_[s] = 0;  // its setup is paid; channels beyond these start a new account
}

topo::Choice SetupLedger::settle(const topo::Tuner& tuner, kernels::Func f, uint64_t bytes, uint32_t algos,
                                 uint32_t protos, uint32_t forcedProtos, const topo::Choice& best) {
  const int bestSlot = slot(f, best.algo);
  if (made_[bestSlot] >= best.nChannels) return best;  // the fastest is connected: nothing is owed
  const int newConnections = tuner.peersPerChannel(best.algo) * (best.nChannels - made_[bestSlot]);
  const int budget = budget_ == kBudgetFromTuner ? connectionBudget(tuner) : budget_;
  if (connections_ + newConnections <= budget) {  // pay now: no later call of this size will
    BRAID_INFO(log::kTuning, "%s of %llu bytes: %s/%s makes its %d new connection(s) a rank on this call (%d of "
               "the %d the ledger makes up front)", topo::funcName(f), static_cast<unsigned long long>(bytes),
               topo::algoName(best.algo), topo::protoName(best.proto), newConnections, connections_ + newConnections,
               budget);
    made(tuner, f, best);
    return best;
  }
  struct Candidate {
    topo::Choice choice;
    double owed;
  };
  std::array<Candidate, topo::kTunerAlgos> candidates;
  int count = 0, pick = -1;
  for (int ai = 0; ai < topo::kTunerAlgos; ++ai) {
    if (!(algos & (1u << ai))) continue;
    topo::Choice c;
    if (!tuner.choose(f, bytes, 1u << ai, protos, forcedProtos, &c)) continue;
    candidates[count] = Candidate{c, owed(tuner, f, c.algo, c.nChannels)};
    const Candidate& k = candidates[count];
    if (pick < 0 || k.choice.timeUs + k.owed < candidates[pick].choice.timeUs + candidates[pick].owed) pick = count;
    ++count;
  }
  if (pick < 0) return best;  // (not reached: best came from these candidates)
  const topo::Choice chosen = candidates[pick].choice;
  for (int i = 0; i < count; ++i) {  // what the others would have saved on this call
    const Candidate& k = candidates[i];
    if (i != pick && k.owed > 0 && k.choice.timeUs < chosen.timeUs) {
      credit_[slot(f, k.choice.algo)] += chosen.timeUs - k.choice.timeUs;
    }
  }
  if (chosen.algo != best.algo || chosen.nChannels != best.nChannels) {
    BRAID_INFO(log::kTuning, "%s of %llu bytes: %s/%s (%.2f us) owes %.0f us of connection setup (%d new "
               "connection(s) a rank, beyond the %d the ledger makes up front): %s/%s (%.2f us) runs until what %s "
               "would have saved reaches it",
               topo::funcName(f), static_cast<unsigned long long>(bytes), topo::algoName(best.algo),
               topo::protoName(best.proto), best.timeUs, owed(tuner, f, best.algo, best.nChannels), newConnections,
               budget, topo::algoName(chosen.algo), topo::protoName(chosen.proto), chosen.timeUs,
               topo::algoName(best.algo));
  }
  made(tuner, f, chosen);
  return chosen;
}

}  // namespace braid::plan
