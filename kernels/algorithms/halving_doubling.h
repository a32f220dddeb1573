// The schedule shared by the halving-doubling collectives (AllReduce, ReduceScatter and
// AllGather): exchanges between partners of p = 2^k virtual ranks, p the largest power of two
// not above nRanks.
//
// Folding: with r = nRanks - p, each even rank 2i < 2r sits out; its odd neighbour 2i+1 takes
// its part first and hands it the result at the end. The p remaining ranks are the virtual
// ranks 0..p-1 in rank order: virtual rank v is rank 2v+1 for v < r, else rank v + r, and
// stands for ranks firstRank(v) .. firstRank(v+1)-1 (two for v < r, one otherwise).
//
// The data is cut at p+1 boundaries, boundary(0) = 0 ... boundary(p) = the whole, virtual
// rank v owning [boundary(v), boundary(v+1)): equal parts for AllReduce, the blocks of the
// ranks v stands for in ReduceScatter and AllGather. Recursive halving: in the round of
// distance d (p/2, p/4, ..., 1) a rank and its partner v^d split the range their group of 2d
// virtual ranks covers at the middle boundary; each sends the half the other keeps and
// reduces the half it keeps with what it receives (the lower-ranked value first, so both
// compute the same bits), the op's post step in the last round. Recursive doubling retraces
// the rounds backwards (d = 1, 2, ..., p/2): partners swap what they hold. Within a round the
// two directions move in FIFO-slot slices, interleaved, so neither partner waits for the
// other's whole half. Connections: the point-to-point ones of the work's channel (w.peerSend,
// w.peerRecv). On several channels each runs the schedule on its share: AllReduce on its
// slice of the vector, ReduceScatter and AllGather on its piece of every rank block (the
// Layout of peer_transfer.h).
#pragma once

#include "kernels/algorithms/peer_transfer.h"

namespace braid::kernels {

/// One rank's view of the schedule. Every member that moves data is called by all threads of
/// the group with the same arguments and ends with a group barrier (the step counters are
/// written back before the next exchange reads them).
template <typename T, typename Red, typename Group>
class HalvingDoubling {
 public:
  /// `layout`: how the elements the schedule counts lie in memory (this channel's pieces of
  /// the rank blocks for ReduceScatter and AllGather; offsets and counts are in elements of
  /// the pieces, each transfer starting where a piece does).
  BRAID_INLINE HalvingDoubling(Group& g, const CollWork& w, const RingHandle& ring, const uint32_t* abortFlag,
                               Layout layout = contiguous())
      : g_(g), w_(w), abortFlag_(abortFlag), layout_(layout), n_(ring.nRanks), me_(ring.index) {
    p_ = 1;
    while (p_ * 2 <= n_) p_ *= 2;
    folded_ = n_ - p_;
    virt_ = me_ < 2 * folded_ ? me_ / 2 : me_ - folded_;
  }

  BRAID_INLINE int nRanks() const { return n_; }
  BRAID_INLINE int virtualRanks() const { return p_; }
  /// This rank sits out (hands its part to me+1 first, gets the result back at the end).
  BRAID_INLINE bool sitsOut() const { return me_ < 2 * folded_ && me_ % 2 == 0; }
  /// This rank takes a sitting-out neighbour's part (me-1).
  BRAID_INLINE bool absorbs() const { return me_ < 2 * folded_ && me_ % 2 == 1; }
  BRAID_INLINE int me() const { return me_; }
  BRAID_INLINE int virt() const { return virt_; }
  BRAID_INLINE int rankOf(int v) const { return v < folded_ ? 2 * v + 1 : v + folded_; }
  /// The first of the ranks virtual rank v stands for (v = p: nRanks).
  BRAID_INLINE int firstRank(int v) const { return v < folded_ ? 2 * v : v + folded_; }

  /// peerSwap (peer_transfer.h) with this collective's connections and layout.
  BRAID_INLINE bool swap(int peer, uint32_t sendFlags, const T* sendFrom, uint64_t sendCount, uint32_t recvFlags,
                         const T* recvMine, T* recvInto, uint64_t recvCount) {
    return peerSwap<T, Red, Group>(g_, w_, abortFlag_, layout_, peer, sendFlags, sendFrom, sendCount, peer, recvFlags,
                                   recvMine, recvInto, recvCount);
  }

  /// The address of element `at` (in the layout) of `base`.
  template <typename P>
  BRAID_INLINE P* at(P* base, uint64_t element) const {
    return advance(base, layout_.place(element));
  }

  /// localStep (peer_transfer.h).
  BRAID_INLINE bool local(uint32_t flags, const T* from, T* to, uint64_t count) {
    return localStep<T, Red, Group>(g_, w_, abortFlag_, flags, from, to, count);
  }

  /// Recursive halving over `work` (the whole data; `in` is read instead while `partial` is
  /// false, with the op's pre step). On return this rank's own part, [boundary(virt),
  /// boundary(virt+1)), is in `work`, reduced over every rank, post step applied.
  template <typename Boundary>
  BRAID_INLINE bool reduceScatter(const T* in, T* work, bool partial, Boundary boundary) {
    int vlo = 0, vhi = p_;
    for (int dist = p_ / 2; dist >= 1; dist /= 2) {
      const int other = virt_ ^ dist;
      const bool lower = (virt_ & dist) == 0;
      const int vmid = vlo + dist;
      const uint64_t lo = boundary(vlo), mid = boundary(vmid), hi = boundary(vhi);
      const uint64_t keepLo = lower ? lo : mid, keepHi = lower ? mid : hi;
      const uint64_t sendLo = lower ? mid : lo, sendHi = lower ? hi : mid;
      const uint32_t mine = partial ? kPartial : kInput;
      const uint32_t recvFlags = mine | (virt_ < other ? kMineFirst : 0u) | (dist == 1 ? kPost : 0u);
      const T* source = partial ? work : in;
      if (!swap(rankOf(other), mine, at(source, sendLo), sendHi - sendLo, recvFlags, at(source, keepLo),
                at(work, keepLo), keepHi - keepLo)) {
        return false;
      }
      partial = true;
      if (lower) vhi = vmid;
      else vlo = vmid;
    }
    return true;
  }

  /// Recursive doubling over `work`: this rank holds its own part [boundary(virt),
  /// boundary(virt+1)); on return it holds all of [boundary(0), boundary(p)).
  template <typename Boundary>
  BRAID_INLINE bool allGather(T* work, Boundary boundary) {
    for (int dist = 1; dist < p_; dist *= 2) {
      const int groupLo = virt_ & ~(2 * dist - 1);
      const bool lower = (virt_ & dist) == 0;
      const int mineLo = lower ? groupLo : groupLo + dist, theirLo = lower ? groupLo + dist : groupLo;
      const uint64_t sendLo = boundary(mineLo), sendHi = boundary(mineLo + dist);
      const uint64_t recvLo = boundary(theirLo), recvHi = boundary(theirLo + dist);
      if (!swap(rankOf(virt_ ^ dist), kPartial, at(work, sendLo), sendHi - sendLo, 0, nullptr, at(work, recvLo),
                recvHi - recvLo)) {
        return false;
      }
    }
    return true;
  }

 private:
  Group& g_;
  const CollWork& w_;
  const uint32_t* abortFlag_;
  Layout layout_;
  int n_, me_, p_, folded_, virt_;
};

}  // namespace braid::kernels
