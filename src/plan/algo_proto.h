// NCCL_ALGO and NCCL_PROTO, with NCCL's full syntax:
//   elems[;func:elems]*     elems = comma list of names, a leading '^' meaning "all but these"
// The first entry may omit "func:" and then applies to every function; names are
// case-insensitive; an unknown name is ncclInvalidUsage naming it.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/work.h"

namespace braid::plan {

/// Functions NCCL_ALGO/NCCL_PROTO can name, in NCCL's order.
enum class EnvFunc : int { kBroadcast = 0, kReduce, kAllGather, kReduceScatter, kAllReduce, kCount };
/// Algorithms NCCL_ALGO can name (bit positions): NCCL's, then Braid's own.
/// Every name is accepted; the planner chooses only among those Braid implements.
enum class EnvAlgo : int {
  kTree = 0, kRing, kCollNetDirect, kCollNetChain, kNvls, kNvlsTree, kPat,
  kDirect, kRecDoubling, kHalvingDoubling, kBinomial, kHier2D, kCount
};

struct AlgoProtoMask {
  uint32_t algos[static_cast<int>(EnvFunc::kCount)];   ///< bit EnvAlgo allowed
  uint32_t protos[static_cast<int>(EnvFunc::kCount)];  ///< bit kernels::Proto allowed
  static AlgoProtoMask all();
};

/// Parses both variables (empty text allows everything). Throws ncclInvalidUsage.
AlgoProtoMask parseAlgoProto(const std::string& algo, const std::string& proto);

/// The EnvFunc a collective is filtered by (AllReduce for AllReduce, ...).
EnvFunc envFuncOf(kernels::Func f);
const char* envFuncName(EnvFunc f);

}  // namespace braid::plan
