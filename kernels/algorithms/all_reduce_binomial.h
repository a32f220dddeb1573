// Binomial AllReduce: a binomial Reduce to rank 0 followed by a binomial Broadcast from it
// (binomial.h). 2 ceil(log2 n) hops of the whole vector; every rank ends with rank 0's
// bits. Ranks other than 0 accumulate in the scratch buffer (w.scratch) before the result
// arrives in their output.
#pragma once

#include "kernels/algorithms/binomial.h"

namespace braid::kernels {

/// All threads of the group, on this channel's slice of the data. Returns false when the
/// communicator was aborted.
template <typename T, typename Red, typename Group>
BRAID_OUTLINE bool allReduceBinomial(Group& g, const CollWork& w, const RingHandle& ring, const uint32_t* abortFlag) {
  const BinomialTree tree(ring.nRanks, ring.index, 0);
  const T* in = advance(static_cast<const T*>(w.sendbuff), w.channelOffset);
  T* out = advance(static_cast<T*>(w.recvbuff), w.channelOffset);
  T* acc = tree.parent < 0 ? out : advance(static_cast<T*>(w.scratch), w.channelOffset);
  return binomialReduce<T, Red, Group>(g, w, abortFlag, tree, in, acc, w.channelCount) &&
         binomialBroadcast<T, Red, Group>(g, w, abortFlag, tree, out, w.channelCount);
}

}  // namespace braid::kernels
