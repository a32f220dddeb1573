// Bruck's AlltoAll (Bruck, Ho, Kipnis, Upfal and Weathersby, 1997): ceil(log2 n) steps
// instead of n-1, for small blocks on many ranks.
//
// Working array: slot i holds a block on its way i ranks onward. At the start rank me puts
// its input block (me + i) mod n in slot i. In the round of distance d (1, 2, 4, ... < n)
// every rank sends the slots i whose bit d is set to rank me + d and receives the same slots
// from rank me - d, replacing its own: a block moves forward by the bits of i, one round per
// bit, so after the last round slot i holds the block rank me - i sent to me. The working
// array is the output itself, slot i at block (me - i) mod n, which is where the block from
// me - i belongs: the final rotation costs nothing. The slots of a round are not contiguous:
// each rank packs them (in slot order) into the first half of the scratch memory, exchanges
// the packed blocks with one peerSwap (send to me + d, receive from me - d into the second
// half, in FIFO-slot slices, the two directions interleaved) and unpacks them into their
// slots. Each round moves about half of the data: (log2 n)/2 of it in all, against the
// pairwise exchange's (n-1)/n, plus the packing copies; so it wins where the per-step
// latency dominates. Connections: the point-to-point ones of the work's channel; on several
// channels each moves its piece of every block, packed in its own part of the scratch. A
// copy: it runs on bytes. Scratch: 2 x ceil(n/2) blocks (CollPlan::scratchBytes).
#pragma once

#include "kernels/algorithms/peer_transfer.h"

namespace braid::kernels {

/// All threads of the group, on this channel's piece of every block. Returns false when the
/// communicator was aborted.
template <typename T, typename Red, typename Group>
BRAID_OUTLINE bool allToAllBruck(Group& g, const CollWork& w, const RingHandle& ring, const uint32_t* abortFlag) {
  const T* in = advance(static_cast<const T*>(w.sendbuff), w.channelOffset);
  T* out = advance(static_cast<T*>(w.recvbuff), w.channelOffset);
  const uint64_t block = w.blockCount, piece = w.channelCount;
  const int n = ring.nRanks, me = ring.index;
  auto slot = [&](int i) { return out + static_cast<uint64_t>((me - i + n) % n) * block; };
  for (int i = 0; i < n; ++i)
    if (!localStep<T, Red, Group>(g, w, abortFlag, kPartial, in + ((me + i) % n) * block, slot(i), piece)) return false;
  const uint64_t half = static_cast<uint64_t>((n + 1) / 2);
  T* packed = static_cast<T*>(w.scratch) + 2 * half * w.channelOffset;  // this channel's part: 2 x half pieces
  T* arrived = packed + half * piece;
  for (int d = 1; d < n; d *= 2) {
    uint64_t m = 0;
    for (int i = d; i < n; ++i) {
      if (!(i & d)) continue;
      if (!localStep<T, Red, Group>(g, w, abortFlag, kPartial, slot(i), packed + m * piece, piece)) return false;
      ++m;
    }
    if (!peerSwap<T, Red, Group>(g, w, abortFlag, (me + d) % n, kPartial, packed, m * piece, (me - d + n) % n, 0,
                                 nullptr, arrived, m * piece)) {
      return false;
    }
    m = 0;
    for (int i = d; i < n; ++i) {
      if (!(i & d)) continue;
      if (!localStep<T, Red, Group>(g, w, abortFlag, kPartial, arrived + m * piece, slot(i), piece)) return false;
      ++m;
    }
  }
  return true;
}

}  // namespace braid::kernels
