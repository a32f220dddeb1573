#include "plan/plugin_choice.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/log.h"
#include "kernels/work.h"
#include "plugin/tuner_plugin.h"

namespace braid::plan {

namespace {

constexpr kernels::Algo kNcclAlgos[] = {kernels::Algo::kTree, kernels::Algo::kRing};  // NCCL ids 0 and 1
/// NCCL's hardware links (NCCL_HW_NVLINK, _PCI, _NET) as Braid's link classes.
constexpr topo::LinkClass kNcclLinks[] = {topo::LinkClass::kNvlink, topo::LinkClass::kPcie,
                                          topo::LinkClass::kNetwork};
constexpr int kMostChannels = 64;  // beyond any communicator's bound: an answer this large is nonsense

enum Warning { kNotFinite = 1, kNoEntry, kChannels, kChannelsUnfit };

}  // namespace

topo::Choice pluginChoice(plugin::TunerSession& session, const topo::Tuner& tuner, kernels::Func f, uint64_t bytes,
                          uint32_t algos, uint32_t protos, uint32_t forced, const topo::Choice& own,
                          const PluginInputs& inputs) {
  if (static_cast<int>(f) >= static_cast<int>(kernels::Func::kAlltoAll)) return own;  // NCCL tunes five
  plugin::CostTable table, given;
  topo::Choice best[2][plugin::kNcclProtocols];
  for (auto& row : table) std::fill(std::begin(row), std::end(row), plugin::kIgnore);
  for (int a = 0; a < 2; ++a) {
    const uint32_t algoBit = 1u << static_cast<int>(kNcclAlgos[a]);
    for (int p = 0; p < plugin::kNcclProtocols; ++p) {
      const uint32_t protoBit = 1u << p;
      if ((algos & algoBit) == 0 || (protos & protoBit) == 0) continue;
      if (tuner.choose(f, bytes, algoBit, protoBit, forced & protoBit, &best[a][p])) {
        table[a][p] = static_cast<float>(best[a][p].timeUs);
      }
    }
  }
  std::memcpy(given, table, sizeof table);
  int nChannels = 0;
  if (!session.getCollInfo(f, bytes, inputs.numPipeOps, inputs.regBuff, table, &nChannels)) return own;
  const bool decided = std::memcmp(given, table, sizeof table) != 0 || nChannels != 0;
  if (!decided) return own;

  int pickA = -1, pickP = -1;
  for (int a = 0; a < plugin::kNcclAlgorithms; ++a) {
    for (int p = 0; p < plugin::kNcclProtocols; ++p) {
      const float v = table[a][p];
      if (!std::isfinite(v)) {
        session.warnOnce(kNotFinite, "TUNER/Plugin: tuner %s set cost [%d][%d] to %f for %s of %llu bytes: not a "
                         "time, ignored (said once)", session.name().c_str(), a, p, static_cast<double>(v),
                         topo::funcName(f), static_cast<unsigned long long>(bytes));
        continue;
      }
      if (a >= 2 || given[a][p] == plugin::kIgnore || v < 0) continue;  // not available to Braid
      if (pickA < 0 || v < table[pickA][pickP]) {
        pickA = a;
        pickP = p;
      }
    }
  }
  if (pickA < 0) {
    session.warnOnce(kNoEntry, "TUNER/Plugin: tuner %s left no available algorithm and protocol for %s of %llu bytes; "
                     "Braid's choice %s/%s stands (said once)", session.name().c_str(), topo::funcName(f),
                     static_cast<unsigned long long>(bytes), topo::algoName(own.algo), topo::protoName(own.proto));
    return own;
  }
  topo::Choice choice = best[pickA][pickP];
  const topo::CostShape& shape = tuner.shape();
  if (nChannels < 0 || nChannels > kMostChannels) {
    session.warnOnce(kChannels, "TUNER/Plugin: tuner %s asked for %d channels for %s of %llu bytes; ignored, %d used "
                     "(said once)", session.name().c_str(), nChannels, topo::funcName(f),
                     static_cast<unsigned long long>(bytes), choice.nChannels);
  } else if (nChannels > 0) {
    const int n = std::clamp(nChannels, shape.minChannels, shape.maxChannels);
    const double t = tuner.predict(f, choice.algo, choice.proto, n, bytes);
    if (t >= 0) {
      choice.nChannels = n;
      choice.timeUs = t;
    } else {
      session.warnOnce(kChannelsUnfit, "TUNER/Plugin: %s/%s cannot run %s of %llu bytes on %d channels (tuner %s "
                       "asked for %d); %d used (said once)", topo::algoName(choice.algo), topo::protoName(choice.proto),
                       topo::funcName(f), static_cast<unsigned long long>(bytes), n, session.name().c_str(), nChannels,
                       choice.nChannels);
    }
  }
  BRAID_INFO(log::kTuning, "TUNER/Plugin: tuner %s chose %s/%s, %d channel(s) for %s of %llu bytes (Braid's own: %s/%s, "
             "%d channel(s))", session.name().c_str(), topo::algoName(choice.algo), topo::protoName(choice.proto),
             choice.nChannels, topo::funcName(f), static_cast<unsigned long long>(bytes), topo::algoName(own.algo),
             topo::protoName(own.proto), own.nChannels);
  return choice;
}

void fillConstants(const topo::CostTable& table, plugin::TunerCommInfo* info) {
  for (int a = 0; a < 2; ++a) {
    for (int p = 0; p < plugin::kNcclProtocols; ++p) {
      info->baseLatency[a][p] = table.baseLatency[static_cast<int>(kNcclAlgos[a])][p];
      for (int l = 0; l < 3; ++l) {
        const int link = static_cast<int>(kNcclLinks[l]);
        info->hwLatency[l][a][p] = table.hopLatency[link][p] + table.hopShift[a][link][p];
      }
    }
  }
}

bool applyConstants(const topo::CostTable& table, const plugin::TunerCommInfo& given,
                    const plugin::TunerCommInfo& returned, int rank, topo::CostTable* tuned) {
  *tuned = table;
  bool changed = false;
  for (int a = 0; a < 2; ++a) {
    const char* algo = topo::algoName(kNcclAlgos[a]);
    for (int p = 0; p < plugin::kNcclProtocols; ++p) {
      const char* proto = topo::protoName(static_cast<kernels::Proto>(p));
      if (returned.baseLatency[a][p] != given.baseLatency[a][p]) {
        tuned->baseLatency[static_cast<int>(kNcclAlgos[a])][p] = returned.baseLatency[a][p];
        changed = true;
        BRAID_INFO(log::kTuning, "TUNER/Plugin: rank %d: %s/%s base latency %g us, the tuner plugin's (Braid's: %g)",
                   rank, algo, proto, returned.baseLatency[a][p], given.baseLatency[a][p]);
      }
      for (int l = 0; l < 3; ++l) {
        const double shift = returned.hwLatency[l][a][p] - given.hwLatency[l][a][p];
        if (shift == 0) continue;
        tuned->hopShift[a][static_cast<int>(kNcclLinks[l])][p] += shift;
        changed = true;
        BRAID_INFO(log::kTuning, "TUNER/Plugin: rank %d: %s/%s step latency over %s %g us, the tuner plugin's "
                   "(Braid's: %g)", rank, algo, proto, topo::linkClassName(kNcclLinks[l]), returned.hwLatency[l][a][p],
                   given.hwLatency[l][a][p]);
      }
    }
  }
  return changed;
}

}  // namespace braid::plan
