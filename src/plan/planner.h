// From a collective task to per-channel work: the tuner (topology/tuner.h) picks the
// algorithm, protocol and channel count among those NCCL_ALGO/NCCL_PROTO allow; the planner
// partitions the data over the channels.
#pragma once

#include <array>

#include "plan/algo_proto.h"
#include "plan/plugin_choice.h"
#include "plan/setup_ledger.h"
#include "plan/task.h"
#include "topology/tuner.h"

namespace braid::plugin {
class TunerSession;
}

namespace braid::plan {

/// What bounds the planner's choices for one communicator.
struct PlanLimits {
  int minChannels = 1;
  int maxChannels = 2;
  AlgoProtoMask mask = AlgoProtoMask::all();
  const topo::CostTable* table = &topo::kHostCostTable;
  topo::CostShape shape;  ///< nRanks and the channel bounds are filled in from the above by the planner
  /// The communicator's tuner plugin (NCCL_TUNER_PLUGIN), asked about every collective after
  /// NCCL_ALGO/NCCL_PROTO filtered (plan/plugin_choice.h); null when there is none.
  plugin::TunerSession* tunerPlugin = nullptr;
};

struct CollPlan {
  kernels::Proto proto;
  int nChannels;
  bool copy;  ///< moves bytes (Broadcast, AllGather, AlltoAll): the byte-copy instantiation runs it
  topo::Choice choice;  ///< what runs and its predicted time
  topo::Choice tuned;   ///< the tuner's (or its plugin's) choice before the ledger's setup charge: what a caller may cache
  uint64_t scratchBytes = 0;  ///< scratch memory the kernels need (CollWork::scratch)
  std::array<kernels::CollWork, 64> works;  ///< one per channel (the first nChannels are used)
};

/// NCCL_ALGO's bits (EnvAlgo) as the tuner's (kernels::Algo); names without a kernel drop out.
uint32_t tunerAlgos(uint32_t envAlgos);

/// The tuner for a communicator of nRanks under these limits.
topo::Tuner tunerFor(int nRanks, const PlanLimits& limits);

/// The tuner's choice for a task; throws ncclInvalidUsage naming the collective when
/// NCCL_ALGO/NCCL_PROTO leave no candidate Braid implements. `inputs`: what the tuner plugin,
/// if any, is told beside the collective's function and size; `log`: say it at INFO (COLL).
topo::Choice chooseFor(const Task& task, int nRanks, const PlanLimits& limits, const PluginInputs& inputs = {},
                       bool log = true);

/// Plans one collective of a communicator of nRanks (chooseFor, then the channels' work).
/// `known`: the choice chooseFor made for the same collective, size and limits before (the
/// caller's cache), logged as chooseFor logs it. `inputs`: what a tuner plugin is told
/// besides the collective (plan/plugin_choice.h). `ledger`: the communicator's connection
/// setup account (plan/setup_ledger.h), which may defer an algorithm whose connections are not
/// made yet; not with a tuner plugin, whose answer stands. Null: every connection counts as made.
CollPlan planCollective(const Task& task, int nRanks, const PlanLimits& limits, const topo::Choice* known = nullptr,
                        const PluginInputs& inputs = {}, SetupLedger* ledger = nullptr);

/// The protocol of a send/recv of `bytes` under these limits (both sides compute the same).
kernels::Proto peerProtocol(uint64_t bytes, const PlanLimits& limits);

}  // namespace braid::plan
