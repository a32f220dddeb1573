// Pairwise-exchange AlltoAll.
//
// Rank me's block p of the input goes to rank p, landing at block me of p's output. Each
// rank first copies its own block (me to me), then runs n-1 rounds: in round s it sends
// block `to` of its input to rank `to` and receives rank `from`'s block into block `from` of
// its output. With n a power of two the partners are me XOR s (to == from: the two ranks of
// a round swap with each other, each link used in both directions at once); otherwise the
// ranks shift by s (to = me + s, from = me - s, mod n), a ring shift in which every rank
// sends to one and receives from another. Within a round the two directions move in
// FIFO-slot slices, interleaved (peerSwap), so neither side waits for the other's whole
// block. n-1 steps of one block each: the same bytes as sending to every peer at once
// (Direct), but one peer at a time, so no rank is flooded by n-1 senders together and
// every connection carries one message per call. Connections: the point-to-point ones of
// the work's channel (w.peerSend, w.peerRecv); on several channels each moves its piece of
// every block. A copy: it runs on bytes, w.blockCount of them per block.
#pragma once

#include "kernels/algorithms/peer_transfer.h"

namespace braid::kernels {

/// All threads of the group, on this channel's piece of every block. Returns false when the
/// communicator was aborted.
template <typename T, typename Red, typename Group>
BRAID_OUTLINE bool allToAllPairwise(Group& g, const CollWork& w, const RingHandle& ring, const uint32_t* abortFlag) {
  const T* in = advance(static_cast<const T*>(w.sendbuff), w.channelOffset);
  T* out = advance(static_cast<T*>(w.recvbuff), w.channelOffset);
  const uint64_t block = w.blockCount, piece = w.channelCount;
  const int n = ring.nRanks, me = ring.index;
  const bool pow2 = (n & (n - 1)) == 0;
  if (!localStep<T, Red, Group>(g, w, abortFlag, kPartial, in + me * block, out + me * block, piece)) return false;
  for (int s = 1; s < n; ++s) {
    const int to = pow2 ? me ^ s : (me + s) % n;
    const int from = pow2 ? me ^ s : (me - s + n) % n;
    if (!peerSwap<T, Red, Group>(g, w, abortFlag, to, kPartial, in + to * block, piece, from, 0, nullptr,
                                 out + from * block, piece)) {
      return false;
    }
  }
  return true;
}

}  // namespace braid::kernels
