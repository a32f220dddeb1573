// Binomial-tree Broadcast (the tree in binomial.h): the root copies its input to its output
// (out of place) and sends it to its children, farthest first; every other rank receives the
// whole message from its parent and forwards it to its own children. ceil(log2 n) hops instead
// of the ring's n-1: for small messages on many ranks. A copy: it runs on bytes.
#pragma once

#include "kernels/algorithms/binomial.h"

namespace braid::kernels {

/// All threads of the group, on this channel's slice of the data. Returns false when the
/// communicator was aborted.
template <typename T, typename Red, typename Group>
BRAID_OUTLINE bool broadcastBinomial(Group& g, const CollWork& w, const RingHandle& ring, const uint32_t* abortFlag) {
  const BinomialTree tree(ring.nRanks, ring.index, w.rootIndex);
  const T* in = advance(static_cast<const T*>(w.sendbuff), w.channelOffset);
  T* out = advance(static_cast<T*>(w.recvbuff), w.channelOffset);
  const uint64_t count = w.channelCount;
  if (tree.parent < 0 && !localStep<T, Red, Group>(g, w, abortFlag, kPartial, in, out, count)) return false;
  return binomialBroadcast<T, Red, Group>(g, w, abortFlag, tree, out, count);
}

}  // namespace braid::kernels
