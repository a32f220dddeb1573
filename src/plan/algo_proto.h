// NCCL_ALGO and NCCL_PROTO, with NCCL's full syntax:
//   elems[;func:elems]*     elems = comma list of names, a leading '^' meaning "all but these"
// The first entry may omit "func:" and then applies to NCCL's five functions; names are
// case-insensitive; an unknown name is ncclInvalidUsage naming it. Braid adds the function
// AlltoAll, which NCCL does not tune (it runs sends and receives): only an "AlltoAll:" entry
// filters it, so NCCL_ALGO=Ring or NCCL_PROTO=LL leave it as NCCL would.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/work.h"

namespace braid::plan {

/// Functions NCCL_ALGO/NCCL_PROTO can name, in NCCL's order, then Braid's AlltoAll.
enum class EnvFunc : int { kBroadcast = 0, kReduce, kAllGather, kReduceScatter, kAllReduce, kAlltoAll, kCount };
/// The functions an entry without "func:" applies to (NCCL's).
constexpr int kNcclEnvFuncs = static_cast<int>(EnvFunc::kAlltoAll);
/// Algorithms NCCL_ALGO can name (bit positions): NCCL's, then Braid's own.
/// Every name is accepted; the planner chooses only among those Braid implements.
enum class EnvAlgo : int {
  kTree = 0, kRing, kCollNetDirect, kCollNetChain, kNvls, kNvlsTree, kPat,
  kDirect, kRecDoubling, kHalvingDoubling, kBinomial, kHier2D, kPairwise, kBruck, kCount
};

struct AlgoProtoMask {
  uint32_t algos[static_cast<int>(EnvFunc::kCount)];   ///< bit EnvAlgo allowed
  uint32_t protos[static_cast<int>(EnvFunc::kCount)];  ///< bit kernels::Proto allowed
  /// bit EnvAlgo named in a list of what to use (not in a '^' list of what to leave out)
  uint32_t namedAlgos[static_cast<int>(EnvFunc::kCount)];
  static AlgoProtoMask all();
};

/// Parses both variables (empty text allows everything). Throws ncclInvalidUsage.
AlgoProtoMask parseAlgoProto(const std::string& algo, const std::string& proto);

/// The EnvFunc a collective is filtered by (AllReduce for AllReduce, ...).
EnvFunc envFuncOf(kernels::Func f);
const char* envFuncName(EnvFunc f);

}  // namespace braid::plan
