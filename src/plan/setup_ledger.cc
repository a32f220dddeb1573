#include "plan/setup_ledger.h"

#include <algorithm>

#include "core/log.h"

namespace braid::plan {

SetupLedger::SetupLedger() {
  // Every collective first announces itself on ring channel 0: its connections are made by
  // whichever algorithm runs, never an algorithm's own cost.
  made_[static_cast<int>(kernels::Algo::kRing)] = 1;
}

double SetupLedger::owed(const topo::Tuner& tuner, kernels::Func f, kernels::Algo a, int nChannels) const {
  const int s = slot(f, a);
  const int more = nChannels - made_[s];
  if (more <= 0) return 0;
  return std::max(0.0, tuner.setupUs(a, more) - credit_[s]);
}

topo::Choice SetupLedger::settle(const topo::Tuner& tuner, kernels::Func f, uint64_t bytes, uint32_t algos,
                                 uint32_t protos, uint32_t forcedProtos, const topo::Choice& best) {
  if (made_[slot(f, best.algo)] >= best.nChannels) return best;  // the fastest is connected: nothing is owed
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
               "connection(s) a rank): %s/%s (%.2f us) runs until what %s would have saved reaches it",
               topo::funcName(f), static_cast<unsigned long long>(bytes), topo::algoName(best.algo),
               topo::protoName(best.proto), best.timeUs, owed(tuner, f, best.algo, best.nChannels),
               tuner.peersPerChannel(best.algo) * (best.nChannels - made_[slot(f, best.algo)]),
               topo::algoName(chosen.algo), topo::protoName(chosen.proto), chosen.timeUs, topo::algoName(best.algo));
  }
  const int s = slot(f, chosen.algo);
  if (made_[s] < chosen.nChannels) {  // its setup is paid; channels beyond these start a new account
    made_[s] = chosen.nChannels;
    credit_[s] = 0;
  }
  return chosen;
}

}  // namespace braid::plan
