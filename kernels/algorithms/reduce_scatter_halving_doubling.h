// Halving-doubling ReduceScatter: the recursive-halving half of Rabenseifner's algorithm on
// its own (the schedule in halving_doubling.h), the data cut at the ranks' blocks.
//
// The n blocks of the input are the parts: virtual rank v owns the blocks of the ranks it
// stands for. After log2(p) halving rounds (p = the largest power of two up to n) each
// virtual rank holds its blocks reduced over every rank; a rank that took a sitting-out
// neighbour's input (rank 2i+1 for 2i < 2(n - p), the neighbour's input reduced into its own
// first) then hands that neighbour its block. Each rank sends (p-1)/p of the data in log2(p)
// steps instead of the ring's n-1. The partial sums live in the communicator's scratch
// buffer (w.scratch, the whole input's size): the output holds one block and the input may
// not be written. Determinism: each block is reduced by one rank in a fixed order (the lower
// half first in every round).
#pragma once

#include "kernels/algorithms/halving_doubling.h"

namespace braid::kernels {

/// All threads of the group, on this channel's piece of every block. Returns false when the
/// communicator was aborted.
template <typename T, typename Red, typename Group>
BRAID_OUTLINE bool reduceScatterHalvingDoubling(Group& g, const CollWork& w, const RingHandle& ring,
                                               const uint32_t* abortFlag) {
  HalvingDoubling<T, Red, Group> hd(g, w, ring, abortFlag, blockPieces(w));
  const T* in = advance(static_cast<const T*>(w.sendbuff), w.channelOffset);
  T* out = advance(static_cast<T*>(w.recvbuff), w.channelOffset);
  T* work = advance(static_cast<T*>(w.scratch), w.channelOffset);  // laid out as the input
  const uint64_t piece = w.channelCount;
  const int n = hd.nRanks(), me = hd.me();
  const uint64_t total = piece * static_cast<uint64_t>(n);
  if (n == 1) return hd.local(kInput | kPost, in, out, piece);
  if (hd.sitsOut()) {  // the whole input to me+1, this rank's piece back from it
    return hd.swap(me + 1, kInput, in, total, 0, nullptr, nullptr, 0) &&
           hd.swap(me + 1, 0, nullptr, 0, 0, nullptr, out, piece);
  }
  auto boundary = [&](int v) { return piece * static_cast<uint64_t>(hd.firstRank(v)); };
  bool partial = false;
  if (hd.absorbs()) {
    if (!hd.swap(me - 1, 0, nullptr, 0, kInput, in, work, total)) return false;
    partial = true;
  }
  if (!hd.reduceScatter(in, work, partial, boundary)) return false;
  if (hd.absorbs() && !hd.swap(me - 1, kPartial, hd.at(work, (me - 1) * piece), piece, 0, nullptr, nullptr, 0)) {
    return false;
  }
  return hd.local(kPartial, hd.at(work, me * piece), out, piece);
}

}  // namespace braid::kernels
