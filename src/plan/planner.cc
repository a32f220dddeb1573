#include "plan/planner.h"

#include <algorithm>
#include <cstdio>

#include "core/log.h"
#include "core/status.h"
#include "plan/plugin_choice.h"

namespace braid::plan {

size_t typeSize(ncclDataType_t t) {
  static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return (t >= 0 && t < ncclNumTypes) ? sizes[t] : 0;
}

uint32_t tunerAlgos(uint32_t envAlgos) {
  static const std::pair<EnvAlgo, kernels::Algo> kinds[] = {
      {EnvAlgo::kTree, kernels::Algo::kTree},
      {EnvAlgo::kRing, kernels::Algo::kRing},
      {EnvAlgo::kDirect, kernels::Algo::kDirect},
      {EnvAlgo::kRecDoubling, kernels::Algo::kRecDoubling},
      {EnvAlgo::kHalvingDoubling, kernels::Algo::kHalvingDoubling},
      {EnvAlgo::kBinomial, kernels::Algo::kBinomial},
      {EnvAlgo::kHier2D, kernels::Algo::kHier2D},
      {EnvAlgo::kPairwise, kernels::Algo::kPairwise},
      {EnvAlgo::kBruck, kernels::Algo::kBruck},
  };
  uint32_t bits = 0;
  for (const auto& [env, algo] : kinds)
    if (envAlgos & (1u << static_cast<int>(env))) bits |= 1u << static_cast<int>(algo);
  return bits;
}

namespace {

/// The collective's size as the tuner counts it (the whole gathered, scattered or exchanged buffer).
uint64_t tunerBytes(const Task& task, int nRanks) {
  const uint64_t bytes = task.count * typeSize(task.dtype);
  const bool wholeBuffer = task.func == kernels::Func::kAllGather || task.func == kernels::Func::kReduceScatter ||
                           task.func == kernels::Func::kAlltoAll;
  return wholeBuffer ? bytes * static_cast<uint64_t>(nRanks) : bytes;
}

void logChoice(const Task& task, uint64_t bytes, int nRanks, const topo::Choice& choice, const char* suffix = "") {
  BRAID_INFO(log::kColl, "%s: %llu bytes on %d ranks -> %s/%s, %d channel(s), predicted %.2f us%s", task.name,
             static_cast<unsigned long long>(bytes), nRanks, topo::algoName(choice.algo), topo::protoName(choice.proto),
             choice.nChannels, choice.timeUs, suffix);
}

/// The algorithms and protocols NCCL_ALGO/NCCL_PROTO leave for a task, as the tuner's bits.
struct Allowed {
  uint32_t algos, protos, forced;
};
Allowed allowedFor(const Task& task, const PlanLimits& limits) {
  const EnvFunc f = envFuncOf(task.func);
  const uint32_t protos = limits.mask.protos[static_cast<int>(f)];
  const uint32_t allProtos = AlgoProtoMask::all().protos[static_cast<int>(f)];
  const uint32_t forced = protos == allProtos ? 0 : protos;  // NCCL_PROTO narrowed the list: what it left is forced
  return Allowed{tunerAlgos(limits.mask.algos[static_cast<int>(f)]), protos, forced};
}

}  // namespace

topo::Tuner tunerFor(int nRanks, const PlanLimits& limits) {
  topo::Tuner tuner(*limits.table, limits.shape);
  topo::CostShape& s = tuner.shape();
  s.nRanks = nRanks;
  s.nNodes = std::clamp(s.nNodes, 1, std::max(1, nRanks));
  s.minChannels = limits.minChannels;
  s.maxChannels = std::max(limits.minChannels, limits.maxChannels);
  // Direct's two exchanges (a connection to every rank) only where NCCL_ALGO names Direct for
  // AllReduce, or leaves nothing else (not for a '^' list that merely keeps it).
  const int allReduce = static_cast<int>(EnvFunc::kAllReduce);
  const uint32_t direct = 1u << static_cast<int>(EnvAlgo::kDirect);
  const uint32_t allowed = limits.mask.algos[allReduce];
  s.directExchanges = (allowed & direct) && ((limits.mask.namedAlgos[allReduce] & direct) || allowed == direct);
  // AlltoAll's Direct and Pairwise on many ranks likewise: where an 'AlltoAll:' entry names
  // either, or leaves no Bruck.
  const int allToAll = static_cast<int>(EnvFunc::kAlltoAll);
  const uint32_t everyPeer = direct | 1u << static_cast<int>(EnvAlgo::kPairwise);
  const uint32_t allowedToAll = limits.mask.algos[allToAll];
  const uint32_t bruck = 1u << static_cast<int>(EnvAlgo::kBruck);
  s.everyPeerAlltoAll = (allowedToAll & everyPeer) &&
                        ((limits.mask.namedAlgos[allToAll] & everyPeer) || (allowedToAll & bruck) == 0);
  return tuner;
}

topo::Choice chooseFor(const Task& task, int nRanks, const PlanLimits& limits, const PluginInputs& inputs, bool log) {
  const EnvFunc f = envFuncOf(task.func);
  const auto [algos, protos, forced] = allowedFor(task, limits);
  const uint64_t bytes = tunerBytes(task, nRanks);
  const topo::Tuner tuner = tunerFor(nRanks, limits);
  topo::Choice choice;
  if (!tuner.choose(task.func, bytes, algos, protos, forced, &choice)) {
    fail(ncclInvalidUsage,
         "NCCL_ALGO/NCCL_PROTO leave no algorithm and protocol Braid implements for %s of %llu bytes on %d ranks "
         "(Braid implements Ring with LL and Simple for every collective but AlltoAll; for AllReduce also Tree, Direct (LL up to %llu "
         "bytes a channel, beyond it and with Simple where NCCL_ALGO names Direct), RecDoubling and Hier2D; HalvingDoubling for AllReduce, ReduceScatter and AllGather; Binomial for "
         "AllReduce, Reduce and Broadcast; for AlltoAll Direct, Pairwise and Bruck, filtered only by an "
         "'AlltoAll:' entry)",
         envFuncName(f), static_cast<unsigned long long>(bytes), nRanks,
         static_cast<unsigned long long>(tuner.shape().directMaxBytes));
  }
  if (limits.tunerPlugin != nullptr) {
    choice = pluginChoice(*limits.tunerPlugin, tuner, task.func, bytes, algos, protos, forced, choice, inputs);
  }
  if (log) logChoice(task, bytes, nRanks, choice);
  return choice;
}

CollPlan planCollective(const Task& task, int nRanks, const PlanLimits& limits, const topo::Choice* known,
                        const PluginInputs& inputs, SetupLedger* ledger) {
  CollPlan plan;
  if (known != nullptr) logChoice(task, tunerBytes(task, nRanks), nRanks, *known);
  plan.tuned = known != nullptr ? *known : chooseFor(task, nRanks, limits, inputs);
  plan.choice = plan.tuned;
  if (ledger != nullptr && limits.tunerPlugin == nullptr &&
      ledger->channelsMade(task.func, plan.tuned.algo) < plan.tuned.nChannels) {
    const auto [algos, protos, forced] = allowedFor(task, limits);
    plan.choice = ledger->settle(tunerFor(nRanks, limits), task.func, tunerBytes(task, nRanks), algos, protos, forced,
                                 plan.tuned);
    if (plan.choice.algo != plan.tuned.algo || plan.choice.nChannels != plan.tuned.nChannels) {
      char instead[128];
      std::snprintf(instead, sizeof instead,
                    ", instead of %s/%s (whose connections are not paid for yet: TUNING says how far)",
                    topo::algoName(plan.tuned.algo), topo::protoName(plan.tuned.proto));
      logChoice(task, tunerBytes(task, nRanks), nRanks, plan.choice, instead);
    }
  }
  plan.proto = plan.choice.proto;
  plan.nChannels = plan.choice.nChannels;
  plan.copy = task.func == kernels::Func::kBroadcast || task.func == kernels::Func::kAllGather ||
              task.func == kernels::Func::kAlltoAll;
  const uint32_t elemSize = plan.copy ? 1 : static_cast<uint32_t>(typeSize(task.dtype));
  const uint64_t count = plan.copy ? task.count * typeSize(task.dtype) : task.count;
  const uint64_t align = std::max<uint64_t>(1, 64 / elemSize);
  if (task.func == kernels::Func::kReduceScatter && plan.choice.algo == kernels::Algo::kHalvingDoubling) {
    plan.scratchBytes = tunerBytes(task, nRanks);  // the partial sums of the whole input
  }
  if (task.func != kernels::Func::kBroadcast && plan.choice.algo == kernels::Algo::kBinomial) {
    plan.scratchBytes = tunerBytes(task, nRanks);  // a non-root rank's partial sums
  }
  if (plan.choice.algo == kernels::Algo::kBruck) {  // a round's blocks packed, and those that arrive
    plan.scratchBytes = 2 * static_cast<uint64_t>((nRanks + 1) / 2) * count;
  }
  for (int c = 0; c < plan.nChannels; ++c) {  // works beyond nChannels stay uninitialised: never read
    // Every field set by name, none left to a value-initialisation of the whole work: GCC zeroes
    // a work with a `rep stos`, which had been a quarter of this function's time in a 2-rank
    // 8-byte AllReduce. (The connections, scratch, signature and status are the data path's.)
    kernels::CollWork& w = plan.works[c];
    w.peerSend = nullptr;
    w.peerRecv = nullptr;
    w.tree = kernels::TreeHandle{};
    w.grid = kernels::GridHandle{};
    w.scratch = nullptr;
    w.sig = kernels::OpSignature{};
    w.checkSig = 0;
    w.status = nullptr;
    w.func = task.func;
    w.proto = plan.proto;
    w.algo = plan.choice.algo;
    w.red = task.red;
    w.rootIndex = task.root;
    w.elemSize = elemSize;
    w.sendbuff = task.sendbuff;
    w.recvbuff = task.recvbuff;
    w.blockCount = count;
    kernels::partition(count, plan.nChannels, c, align, &w.channelOffset, &w.channelCount);
    w.opArgs = task.opArgs;
    w.opArgs.nRanks = nRanks;
  }
  return plan;
}

kernels::Proto peerProtocol(uint64_t bytes, const PlanLimits& limits) {
  return topo::peerProtocolFor(bytes, *limits.table, limits.shape);
}

}  // namespace braid::plan
