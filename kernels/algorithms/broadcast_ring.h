// Ring Broadcast.
//
// The root sends each slice to its right neighbour (copying it to its own output on the way
// when the call is out of place); every other rank writes what arrives into its output and
// forwards it, except the root's left neighbour, the end of the chain, which only writes.
// One step per slice per rank, pipelined through the FIFOs.
#pragma once

#include "kernels/primitives.h"

namespace braid::kernels {

template <typename T, typename Red, typename Group>
BRAID_OUTLINE bool broadcastRing(Group& g, const CollWork& w, const RingHandle& ring, const uint32_t* abortFlag) {
  const int n = ring.nRanks;
  const int fromRoot = (ring.index - w.rootIndex + n) % n;
  const T* in = advance(static_cast<const T*>(w.sendbuff), w.channelOffset);
  T* out = advance(static_cast<T*>(w.recvbuff), w.channelOffset);
  const uint64_t total = w.channelCount;
  const ConnHandle* send = (n > 1 && fromRoot != n - 1) ? &ring.send : nullptr;
  const ConnHandle* recv = (n > 1 && fromRoot != 0) ? &ring.recv : nullptr;
  Primitives<T, Red, Group> prims(g, send, recv, w.proto, Red(w.opArgs), abortFlag, &w);
  uint32_t flags;
  if (fromRoot == 0) {
    flags = kInput | kOutput | (n > 1 ? uint32_t(kSend) : 0u);
  } else {
    flags = kRecv | kOutput | (fromRoot != n - 1 ? uint32_t(kSend) : 0u);
  }
  const uint64_t slice = n > 1 ? pipelineSlice<T>(prims.sliceElements(), total) : (total > 0 ? total : 1);
  const bool ok = forEachSlice(total, slice, [&](uint64_t base, uint64_t cnt) {
    return prims.step(flags, advance(in, base), advance(out, base), cnt);
  });
  prims.finish();
  return ok;
}

}  // namespace braid::kernels
