// Ring ReduceScatter.
//
// The first half of ring AllReduce. Rank i owns output block i. For every slice of the
// channel's range: rank i sends its input for block i-1 to the right; for nRanks-2 steps
// each rank receives a partial sum from the left, adds its own input for the same block and
// passes it on; at step nRanks-1 rank i receives block i with all other contributions, adds
// its own, applies the op's post step and writes the result to its output. nRanks-1 steps,
// each rank sending (nRanks-1)/nRanks of the data once.
#pragma once

#include "kernels/primitives.h"

namespace braid::kernels {

template <typename T, typename Red, typename Group>
BRAID_OUTLINE bool reduceScatterRing(Group& g, const CollWork& w, const RingHandle& ring, const uint32_t* abortFlag) {
  const int n = ring.nRanks;
  const int me = ring.index;
  const T* in = static_cast<const T*>(w.sendbuff);
  T* out = advance(static_cast<T*>(w.recvbuff), w.channelOffset);
  const uint64_t block = w.blockCount;
  const uint64_t total = w.channelCount;
  if (n == 1) {
    Primitives<T, Red, Group> local(g, nullptr, nullptr, w.proto, Red(w.opArgs), abortFlag);
    return total == 0 || local.step(kInput | kPost | kOutput, advance(in, w.channelOffset), out, total);
  }
  Primitives<T, Red, Group> prims(g, &ring.send, &ring.recv, w.proto, Red(w.opArgs), abortFlag, &w);
  const uint64_t slice = prims.sliceElements();
  bool ok = true;
  for (uint64_t base = 0; base < total && ok; base += slice) {
    const uint64_t cnt = total - base < slice ? total - base : slice;
    const uint64_t off = w.channelOffset + base;
    ok = prims.step(kInput | kSend, advance(in, ((me + n - 1) % n) * block + off), nullptr, cnt);
    for (int k = 2; k < n && ok; ++k) {
      ok = prims.step(kRecv | kInput | kSend, advance(in, ((me + n - k) % n) * block + off), nullptr, cnt);
    }
    ok = ok && prims.step(kRecv | kInput | kPost | kOutput, advance(in, me * block + off), advance(out, base), cnt);
  }
  prims.finish();
  return ok;
}

}  // namespace braid::kernels
