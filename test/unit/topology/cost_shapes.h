// Shapes the tuner tests build their tuners from (tuner_test.cc, setup_ledger_test.cc).
#pragma once

#include "topology/tuner.h"

namespace braid::test {

/// One node of `ranks` ranks sharing `cpus` CPUs, the host backend's 2 channels at most.
inline topo::CostShape hostShape(int ranks, int cpus = 2) {
  topo::CostShape s;
  s.nRanks = ranks;
  s.ranksPerNode = ranks;
  s.cpusPerNode = cpus;
  s.maxChannels = 2;
  return s;
}

}  // namespace braid::test
