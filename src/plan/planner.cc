#include "plan/planner.h"

#include <algorithm>

#include "core/status.h"

namespace braid::plan {

size_t typeSize(ncclDataType_t t) {
  static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return (t >= 0 && t < ncclNumTypes) ? sizes[t] : 0;
}

namespace {

kernels::Proto chooseProto(uint32_t allowed, uint64_t bytes, const PlanLimits& limits, EnvFunc f) {
  const bool ll = allowed & (1u << static_cast<int>(kernels::Proto::kLL));
  const bool simple = allowed & (1u << static_cast<int>(kernels::Proto::kSimple));
  if (ll && (bytes <= limits.llThresholdBytes || !simple)) return kernels::Proto::kLL;
  if (simple) return kernels::Proto::kSimple;
  fail(ncclInvalidUsage, "NCCL_PROTO allows no protocol Braid implements for %s (LL and Simple so far; LL128 comes "
                         "with the algorithms work)", envFuncName(f));
}

}  // namespace

CollPlan planCollective(const Task& task, int nRanks, const PlanLimits& limits) {
  const EnvFunc f = envFuncOf(task.func);
  if ((limits.mask.algos[static_cast<int>(f)] & (1u << static_cast<int>(EnvAlgo::kRing))) == 0) {
    fail(ncclInvalidUsage, "NCCL_ALGO excludes Ring for %s, and Ring is the only algorithm Braid has so far",
         envFuncName(f));
  }
  CollPlan plan;  // works beyond nChannels stay uninitialised: never read
  plan.copy = task.func == kernels::Func::kBroadcast || task.func == kernels::Func::kAllGather;
  const uint32_t elemSize = plan.copy ? 1 : static_cast<uint32_t>(typeSize(task.dtype));
  const uint64_t count = plan.copy ? task.count * typeSize(task.dtype) : task.count;
  const uint64_t bytes = count * elemSize;
  plan.proto = chooseProto(limits.mask.protos[static_cast<int>(f)], bytes, limits, f);
  const uint64_t wanted = 1 + bytes / std::max<uint64_t>(limits.bytesPerChannel, 1);
  plan.nChannels = static_cast<int>(std::clamp<uint64_t>(wanted, limits.minChannels, limits.maxChannels));
  const uint64_t align = std::max<uint64_t>(1, 64 / elemSize);
  for (int c = 0; c < plan.nChannels; ++c) {
    kernels::CollWork w{};
    w.func = task.func;
    w.proto = plan.proto;
    w.algo = kernels::Algo::kRing;
    w.red = task.red;
    w.rootIndex = task.root;
    w.elemSize = elemSize;
    w.sendbuff = task.sendbuff;
    w.recvbuff = task.recvbuff;
    w.blockCount = count;
    kernels::partition(count, plan.nChannels, c, align, &w.channelOffset, &w.channelCount);
    w.opArgs = task.opArgs;
    w.opArgs.nRanks = nRanks;
    plan.works[c] = w;
  }
  return plan;
}

kernels::Proto peerProtocol(uint64_t bytes) { return bytes <= 16384 ? kernels::Proto::kLL : kernels::Proto::kSimple; }

}  // namespace braid::plan
