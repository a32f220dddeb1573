// The binomial tree the Binomial collectives share (Broadcast, Reduce, and AllReduce as their
// composition), and the whole-message transfer they move data with.
//
// Ranks are numbered relative to the root (v = (rank - root) mod n). The parent of v > 0 is v
// with its lowest set bit cleared; its children are v + m for every power of two m below that
// bit (below the smallest power of two >= n for the root) that is still a rank. So the root's
// children are at distance n/2-ish, n/4-ish, ..., 1, and every rank is ceil(log2 n) levels or
// fewer from the root. Each transfer moves a whole message over a rank's point-to-point
// connection to or from one tree neighbour, slice by slice through the FIFO; a rank forwards
// (or reduces) only after its own transfer finished: ceil(log2 n) hops of store-and-forward,
// the smallest latency of the tree collectives on few bytes, the root's ceil(log2 n) copies
// bounding the bandwidth.
#pragma once

#include "kernels/algorithms/peer_transfer.h"

namespace braid::kernels {

struct BinomialTree {
  int parent = -1;     ///< the parent's rank, -1 at the root
  int children[32];    ///< the children's ranks, farthest first
  int nChildren = 0;

  BRAID_INLINE BinomialTree(int n, int me, int root) {
    const int v = (me - root + n) % n;
    int top = 1;
    while (top < n) top *= 2;
    const int low = v == 0 ? top : (v & -v);
    if (v != 0) parent = (v - low + root) % n;
    for (int m = low / 2; m >= 1; m /= 2)
      if (v + m < n) children[nChildren++] = (v + m + root) % n;
  }
};

/// All threads of the group: sends `count` elements of `mine` to `peer` (flags | kSend), or
/// receives them from `peer` into `into` (flags | kRecv | kOutput, reduced with `mine` where
/// the flags say), whole, slice by slice; ends with a group barrier. False when aborted.
template <typename T, typename Red, typename Group>
BRAID_INLINE bool transferWhole(Group& g, const CollWork& w, const uint32_t* abortFlag, int peer, bool sending,
                                uint32_t flags, const T* mine, T* into, uint64_t count) {
  return sending ? peerSwap<T, Red, Group>(g, w, abortFlag, peer, flags, mine, count, peer, 0, nullptr, nullptr, 0)
                 : peerSwap<T, Red, Group>(g, w, abortFlag, peer, 0, nullptr, 0, peer, flags, mine, into, count);
}

/// All threads of the group: binomial broadcast of `count` elements; the root sends `data`
/// (already in place) to its children, every other rank receives into `data` and forwards it.
template <typename T, typename Red, typename Group>
BRAID_INLINE bool binomialBroadcast(Group& g, const CollWork& w, const uint32_t* abortFlag, const BinomialTree& tree,
                                    T* data, uint64_t count) {
  if (tree.parent >= 0 && !transferWhole<T, Red, Group>(g, w, abortFlag, tree.parent, false, 0, nullptr, data, count)) {
    return false;
  }
  for (int c = 0; c < tree.nChildren; ++c)
    if (!transferWhole<T, Red, Group>(g, w, abortFlag, tree.children[c], true, kPartial, data, nullptr, count)) return false;
  return true;
}

/// All threads of the group: binomial reduction of `count` elements of `in` (pre step
/// applied) into `acc`: the children
/// nearest first, then up to the parent; at the root the post step is applied and `acc` holds
/// the result. A leaf sends its input without touching `acc`.
template <typename T, typename Red, typename Group>
BRAID_INLINE bool binomialReduce(Group& g, const CollWork& w, const uint32_t* abortFlag, const BinomialTree& tree,
                                 const T* in, T* acc, uint64_t count) {
  const bool root = tree.parent < 0;
  if (tree.nChildren == 0) {
    return root ? localStep<T, Red, Group>(g, w, abortFlag, kInput | kPost, in, acc, count)
                : transferWhole<T, Red, Group>(g, w, abortFlag, tree.parent, true, kInput, in, nullptr, count);
  }
  for (int c = tree.nChildren - 1; c >= 0; --c) {
    const uint32_t mine = c == tree.nChildren - 1 ? kInput : kPartial;
    const uint32_t post = root && c == 0 ? kPost : 0u;
    if (!transferWhole<T, Red, Group>(g, w, abortFlag, tree.children[c], false, mine | post,
                                      mine == kInput ? in : acc, acc, count)) {
      return false;
    }
  }
  return root || transferWhole<T, Red, Group>(g, w, abortFlag, tree.parent, true, kPartial, acc, nullptr, count);
}

}  // namespace braid::kernels
