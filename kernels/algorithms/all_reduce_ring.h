// Ring AllReduce.
//
// The channel's range is cut into loops of nRanks chunks. In each loop the ranks first run a
// reduce-scatter around the ring: rank i sends chunk i-1 to the right; for nRanks-2 steps
// each rank receives a partial sum from the left, adds its own input for that chunk and
// passes it on; at step nRanks-1 rank i receives chunk i with every rank's contribution but
// its own, adds its input, applies the op's post step and now holds chunk i's final value.
// Then an all-gather: it writes that chunk to its output and sends it right; for nRanks-2
// steps every rank copies what it receives to its output and forwards it; the last chunk to
// arrive (chunk i+1) is only written. 2(nRanks-1) steps per loop, every byte crossing each
// link twice. Each chunk is reduced in the same ring order on every rank and then copied,
// so all ranks end with bit-identical results. The FIFO's 8 slots let consecutive steps
// overlap: a rank never waits for the whole ring, only for its left neighbour's slot and a
// free slot on its right.
#pragma once

#include "kernels/algorithms/ring_steps.h"

namespace braid::kernels {

template <typename T, typename Red, typename Group>
BRAID_OUTLINE bool allReduceRing(Group& g, const CollWork& w, const RingHandle& ring, const uint32_t* abortFlag) {
  const T* in = advance(static_cast<const T*>(w.sendbuff), w.channelOffset);
  T* out = advance(static_cast<T*>(w.recvbuff), w.channelOffset);
  const uint64_t total = w.channelCount;
  const int n = ring.nRanks;
  const int me = ring.index;
  bool ok = true;
  if (n == 1) {
    Primitives<T, Red, Group> local(g, nullptr, nullptr, w.proto, Red(w.opArgs), abortFlag);
    return total == 0 || local.step(kInput | kPost | kOutput, in, out, total);
  }
  Primitives<T, Red, Group> prims(g, &ring.send, &ring.recv, w.proto, Red(w.opArgs), abortFlag, &w);
  const uint64_t chunk = prims.sliceElements();
  for (uint64_t base = 0; base < total && ok;) {
    const RingChunks at{base, ringChunk<T>(chunk, total - base, n), total};
    ok = ringReduceSteps(prims, n, me, kInput, in, out, kPost | kOutput | kSend, at) &&
         ringGatherSteps(prims, n, me, out, at);
    base += n * at.per;
  }
  prims.finish();
  return ok;
}

}  // namespace braid::kernels
