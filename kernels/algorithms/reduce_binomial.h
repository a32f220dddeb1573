// Binomial-tree Reduce (the tree in binomial.h): every rank reduces what its children send
// into its own input, the nearest child first, and sends the sum to its parent; the root
// applies the post step into its output. ceil(log2 n) hops instead of the ring's n-1: for
// small messages on many ranks. A rank other than the root with children accumulates in the
// communicator's scratch buffer (w.scratch, the message's size): its output is not its to
// write. Determinism: a fixed tree and a fixed order of children.
#pragma once

#include "kernels/algorithms/binomial.h"

namespace braid::kernels {

/// All threads of the group, on this channel's slice of the data. Returns false when the
/// communicator was aborted.
template <typename T, typename Red, typename Group>
BRAID_OUTLINE bool reduceBinomial(Group& g, const CollWork& w, const RingHandle& ring, const uint32_t* abortFlag) {
  const BinomialTree tree(ring.nRanks, ring.index, w.rootIndex);
  T* acc = advance(tree.parent < 0 ? static_cast<T*>(w.recvbuff) : static_cast<T*>(w.scratch), w.channelOffset);
  return binomialReduce<T, Red, Group>(g, w, abortFlag, tree, advance(static_cast<const T*>(w.sendbuff), w.channelOffset),
                                       acc, w.channelCount);
}

}  // namespace braid::kernels
