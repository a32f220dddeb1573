// The kernel body: one collective's work on one channel, dispatched to its algorithm.
// (Ring; Tree, Direct, RecDoubling, HalvingDoubling, Binomial and Hier2D for AllReduce; HalvingDoubling for
// ReduceScatter and AllGather; Binomial for Broadcast and Reduce; Pairwise and Bruck for AlltoAll,
// whose Direct the host runs as sends and receives.)
#pragma once

#include "kernels/algorithms/all_gather_halving_doubling.h"
#include "kernels/algorithms/all_reduce_binomial.h"
#include "kernels/algorithms/all_gather_ring.h"
#include "kernels/algorithms/all_reduce_direct.h"
#include "kernels/algorithms/all_reduce_halving_doubling.h"
#include "kernels/algorithms/all_reduce_hier2d.h"
#include "kernels/algorithms/all_reduce_rec_doubling.h"
#include "kernels/algorithms/all_reduce_ring.h"
#include "kernels/algorithms/all_reduce_tree.h"
#include "kernels/algorithms/all_to_all_bruck.h"
#include "kernels/algorithms/all_to_all_pairwise.h"
#include "kernels/algorithms/broadcast_binomial.h"
#include "kernels/algorithms/broadcast_ring.h"
#include "kernels/algorithms/reduce_binomial.h"
#include "kernels/algorithms/reduce_ring.h"
#include "kernels/algorithms/reduce_scatter_halving_doubling.h"
#include "kernels/algorithms/reduce_scatter_ring.h"

namespace braid::kernels {

/// All threads of the group: a collective that reduces (AllReduce, ReduceScatter, Reduce)
/// over elements T with op Red. Returns false when the communicator was aborted (or, which
/// the planner never sends, for a collective that only copies: see runCopy).
template <typename T, typename Red, typename Group>
BRAID_INLINE bool runReduction(Group& g, const CollWork& w, const RingHandle& ring, const uint32_t* abortFlag) {
  switch (w.func) {
    case Func::kAllReduce:
      if (w.algo == Algo::kTree) return allReduceTree<T, Red, Group>(g, w, ring, abortFlag);
      if (w.algo == Algo::kDirect) return allReduceDirect<T, Red, Group>(g, w, ring, abortFlag);
      if (w.algo == Algo::kRecDoubling) return allReduceRecDoubling<T, Red, Group>(g, w, ring, abortFlag);
      if (w.algo == Algo::kHalvingDoubling) return allReduceHalvingDoubling<T, Red, Group>(g, w, ring, abortFlag);
      if (w.algo == Algo::kBinomial) return allReduceBinomial<T, Red, Group>(g, w, ring, abortFlag);
      if (w.algo == Algo::kHier2D) return allReduceHier2D<T, Red, Group>(g, w, ring, abortFlag);
      return allReduceRing<T, Red, Group>(g, w, ring, abortFlag);
    case Func::kReduceScatter:
      if (w.algo == Algo::kHalvingDoubling) return reduceScatterHalvingDoubling<T, Red, Group>(g, w, ring, abortFlag);
      return reduceScatterRing<T, Red, Group>(g, w, ring, abortFlag);
    case Func::kReduce:
      if (w.algo == Algo::kBinomial) return reduceBinomial<T, Red, Group>(g, w, ring, abortFlag);
      return reduceRing<T, Red, Group>(g, w, ring, abortFlag);
    default: return false;
  }
}

/// All threads of the group: a collective that only moves data (AllGather, Broadcast, AlltoAll), on
/// bytes whatever the element type, so compiled once rather than for every type and op.
template <typename Group>
BRAID_INLINE bool runCopy(Group& g, const CollWork& w, const RingHandle& ring, const uint32_t* abortFlag) {
  using T = uint8_t;
  using Red = FuncSum<uint8_t>;  // never combines: the copy steps carry no kRecv with kInput
  switch (w.func) {
    case Func::kAllGather:
      if (w.algo == Algo::kHalvingDoubling) return allGatherHalvingDoubling<T, Red, Group>(g, w, ring, abortFlag);
      return allGatherRing<T, Red, Group>(g, w, ring, abortFlag);
    case Func::kBroadcast:
      if (w.algo == Algo::kBinomial) return broadcastBinomial<T, Red, Group>(g, w, ring, abortFlag);
      return broadcastRing<T, Red, Group>(g, w, ring, abortFlag);
    case Func::kAlltoAll:
      if (w.algo == Algo::kBruck) return allToAllBruck<T, Red, Group>(g, w, ring, abortFlag);
      if (w.algo == Algo::kPairwise) return allToAllPairwise<T, Red, Group>(g, w, ring, abortFlag);
      return false;  // Direct: sends and receives (DataPath::runCollective)
    default: return false;
  }
}

/// The function every instantiation has, for dispatch tables.
template <typename Group>
using CollectiveFn = bool (*)(Group&, const CollWork&, const RingHandle&, const uint32_t*);

}  // namespace braid::kernels
