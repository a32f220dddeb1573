// Recursive-doubling AllGather: the doubling half of Rabenseifner's algorithm on its own (the
// schedule in halving_doubling.h), the data cut at the ranks' blocks.
//
// Every rank starts with its own block in place; in the round of distance d (1, 2, ...,
// p/2, p the largest power of two up to n) partners swap everything they hold, doubling it,
// until every rank holds all n blocks. A sitting-out rank (2i for 2i < 2(n - p)) first hands
// its block to rank 2i+1 and at the end receives the whole output from it. Each rank
// receives (p-1)/p of the output in log2(p) steps instead of the ring's n-1. A copy: it runs
// on bytes, as the ring's AllGather does.
#pragma once

#include "kernels/algorithms/halving_doubling.h"

namespace braid::kernels {

/// All threads of the group, on this channel's piece of every block. Returns false when the
/// communicator was aborted.
template <typename T, typename Red, typename Group>
BRAID_OUTLINE bool allGatherHalvingDoubling(Group& g, const CollWork& w, const RingHandle& ring,
                                           const uint32_t* abortFlag) {
  HalvingDoubling<T, Red, Group> hd(g, w, ring, abortFlag, blockPieces(w));
  const T* in = advance(static_cast<const T*>(w.sendbuff), w.channelOffset);
  T* out = advance(static_cast<T*>(w.recvbuff), w.channelOffset);
  const uint64_t piece = w.channelCount;
  const int n = hd.nRanks(), me = hd.me();
  const uint64_t total = piece * static_cast<uint64_t>(n);
  if (n == 1) return hd.local(kPartial, in, out, piece);
  if (hd.sitsOut()) {  // this rank's piece to me+1, the whole output back from it
    return hd.swap(me + 1, kPartial, in, piece, 0, nullptr, nullptr, 0) &&
           hd.swap(me + 1, 0, nullptr, 0, 0, nullptr, out, total);
  }
  auto boundary = [&](int v) { return piece * static_cast<uint64_t>(hd.firstRank(v)); };
  if (!hd.local(kPartial, in, hd.at(out, me * piece), piece)) return false;
  if (hd.absorbs() && !hd.swap(me - 1, 0, nullptr, 0, 0, nullptr, hd.at(out, (me - 1) * piece), piece)) return false;
  if (!hd.allGather(out, boundary)) return false;
  if (hd.absorbs()) return hd.swap(me - 1, kPartial, out, total, 0, nullptr, nullptr, 0);  // the output back
  return true;
}

}  // namespace braid::kernels
