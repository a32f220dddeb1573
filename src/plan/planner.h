// From a collective task to per-channel work: algorithm, protocol, channel count, partition.
// (Ring; for AllReduce Direct for the smallest messages, and RecDoubling or HalvingDoubling when
// NCCL_ALGO asks for them without Ring; the algorithms issue adds a cost-model tuner.)
#pragma once

#include <array>

#include "plan/algo_proto.h"
#include "plan/task.h"

namespace braid::plan {

/// What bounds the planner's choices for one communicator.
struct PlanLimits {
  int minChannels = 1;
  int maxChannels = 2;
  uint64_t llThresholdBytes = 16384;   ///< LL below this many bytes per rank, Simple above
  uint64_t directMaxBytes = 4096;      ///< AllReduce up to this size goes Direct (one hop) when allowed
  uint64_t bytesPerChannel = 1 << 20;  ///< one more channel per this many bytes (up to max)
  AlgoProtoMask mask = AlgoProtoMask::all();
};

struct CollPlan {
  kernels::Proto proto;
  int nChannels;
  bool copy;  ///< moves bytes (Broadcast, AllGather): the byte-copy instantiation runs it
  std::array<kernels::CollWork, 64> works;  ///< one per channel (the first nChannels are used)
};

/// Plans one collective of a communicator of nRanks. Throws ncclInvalidUsage when
/// NCCL_ALGO/NCCL_PROTO leave nothing Braid implements.
CollPlan planCollective(const Task& task, int nRanks, const PlanLimits& limits);

/// The protocol of a send/recv of `bytes` (both sides compute the same).
kernels::Proto peerProtocol(uint64_t bytes);

}  // namespace braid::plan
