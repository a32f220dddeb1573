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

bool allows(uint32_t mask, EnvAlgo a) { return (mask & (1u << static_cast<int>(a))) != 0; }
bool allows(uint32_t mask, kernels::Proto p) { return (mask & (1u << static_cast<int>(p))) != 0; }

/// AllReduce over the point-to-point connections, until the tuner exists: only when NCCL_ALGO
/// asks for it without Ring; RecDoubling up to 64 KiB and HalvingDoubling above when both are
/// allowed. kRing: neither applies.
kernels::Algo peerAlgorithm(uint32_t algos, uint64_t bytes) {
  if (allows(algos, EnvAlgo::kRing)) return kernels::Algo::kRing;
  const bool rd = allows(algos, EnvAlgo::kRecDoubling), hd = allows(algos, EnvAlgo::kHalvingDoubling);
  if (rd && hd) return bytes <= 65536 ? kernels::Algo::kRecDoubling : kernels::Algo::kHalvingDoubling;
  return rd ? kernels::Algo::kRecDoubling : hd ? kernels::Algo::kHalvingDoubling : kernels::Algo::kRing;
}

}  // namespace

CollPlan planCollective(const Task& task, int nRanks, const PlanLimits& limits) {
  const EnvFunc f = envFuncOf(task.func);
  const uint32_t algos = limits.mask.algos[static_cast<int>(f)];
  CollPlan plan;
  const uint64_t taskBytes = task.count * typeSize(task.dtype);
  if (task.func == kernels::Func::kAllReduce && nRanks > 1 && taskBytes <= limits.directMaxBytes &&
      allows(algos, EnvAlgo::kDirect) && allows(limits.mask.protos[static_cast<int>(f)], kernels::Proto::kLL)) {
    plan.copy = false;
    plan.proto = kernels::Proto::kLL;
    plan.nChannels = 1;
    kernels::CollWork& w = plan.works[0];
    w = kernels::CollWork{};
    w.func = task.func;
    w.proto = plan.proto;
    w.algo = kernels::Algo::kDirect;
    w.red = task.red;
    w.elemSize = static_cast<uint32_t>(typeSize(task.dtype));
    w.sendbuff = task.sendbuff;
    w.recvbuff = task.recvbuff;
    w.blockCount = task.count;
    w.channelCount = task.count;
    w.opArgs = task.opArgs;
    w.opArgs.nRanks = nRanks;
    return plan;
  }
  const kernels::Algo algo = task.func == kernels::Func::kAllReduce ? peerAlgorithm(algos, taskBytes) : kernels::Algo::kRing;
  if (!allows(algos, EnvAlgo::kRing) && algo == kernels::Algo::kRing) {
    fail(ncclInvalidUsage, "NCCL_ALGO excludes Ring for %s; Braid implements Ring (and, for AllReduce, Direct for the "
                           "smallest messages, RecDoubling and HalvingDoubling) so far", envFuncName(f));
  }  // works beyond nChannels stay uninitialised: never read
  plan.copy = task.func == kernels::Func::kBroadcast || task.func == kernels::Func::kAllGather;
  const uint32_t elemSize = plan.copy ? 1 : static_cast<uint32_t>(typeSize(task.dtype));
  const uint64_t count = plan.copy ? task.count * typeSize(task.dtype) : task.count;
  const uint64_t bytes = count * elemSize;
  plan.proto = chooseProto(limits.mask.protos[static_cast<int>(f)], bytes, limits, f);
  const uint64_t wanted = 1 + bytes / std::max<uint64_t>(limits.bytesPerChannel, 1);
  plan.nChannels = static_cast<int>(std::clamp<uint64_t>(wanted, limits.minChannels, limits.maxChannels));
  if (algo != kernels::Algo::kRing) plan.nChannels = 1;  // over the point-to-point connections: one per peer
  const uint64_t align = std::max<uint64_t>(1, 64 / elemSize);
  for (int c = 0; c < plan.nChannels; ++c) {
    kernels::CollWork w{};
    w.func = task.func;
    w.proto = plan.proto;
    w.algo = algo;
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
