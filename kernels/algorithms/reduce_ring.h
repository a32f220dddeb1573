// Ring Reduce.
//
// The chain starts at the root's right neighbour, which sends its input; each following rank
// receives a partial result from the left, adds its own input and passes it on; the root, the
// end of the chain, adds its input, applies the op's post step and writes the result. One
// step per slice per rank, pipelined through the FIFOs.
#pragma once

#include "kernels/primitives.h"

namespace braid::kernels {

/// The slices of one rank's part of the chain, with its step's flags known at compile time
/// (the element loop of a Simple step is vectorised only for constant flags: a runtime
/// choice had run the 2-rank Reduce at half the speed of the binomial tree's same transfer).
template <uint32_t Flags, typename T, typename Prims>
BRAID_INLINE bool reduceRingSlices(Prims& prims, const T* in, T* out, uint64_t total, uint64_t slice) {
  return forEachSlice(total, slice, [&](uint64_t base, uint64_t cnt) {
    return prims.step(Flags, advance(in, base), advance(out, base), cnt);
  });
}

template <typename T, typename Red, typename Group>
BRAID_OUTLINE bool reduceRing(Group& g, const CollWork& w, const RingHandle& ring, const uint32_t* abortFlag) {
  const int n = ring.nRanks;
  const int fromRoot = (ring.index - w.rootIndex + n) % n;
  const T* in = advance(static_cast<const T*>(w.sendbuff), w.channelOffset);
  T* out = advance(static_cast<T*>(w.recvbuff), w.channelOffset);
  const uint64_t total = w.channelCount;
  const ConnHandle* send = (n > 1 && fromRoot != 0) ? &ring.send : nullptr;
  const ConnHandle* recv = (n > 1 && fromRoot != 1 % n) ? &ring.recv : nullptr;
  Primitives<T, Red, Group> prims(g, send, recv, w.proto, Red(w.opArgs), abortFlag, &w);
  const uint64_t slice = n > 1 ? pipelineSlice<T>(prims.sliceElements(), total) : (total > 0 ? total : 1);
  bool ok;
  if (n == 1) {
    ok = reduceRingSlices<kInput | kPost | kOutput>(prims, in, out, total, slice);
  } else if (fromRoot == 0) {  // the end of the chain
    ok = reduceRingSlices<kRecv | kInput | kPost | kOutput>(prims, in, out, total, slice);
  } else if (fromRoot == 1) {  // its start
    ok = reduceRingSlices<kInput | kSend>(prims, in, out, total, slice);
  } else {
    ok = reduceRingSlices<kRecv | kInput | kSend>(prims, in, out, total, slice);
  }
  prims.finish();
  return ok;
}

}  // namespace braid::kernels
