// Ring AllGather.
//
// The second half of ring AllReduce. Rank i's input is block i of everyone's output. For every
// slice of the channel's range: rank i copies its own slice into its output and sends it
// right; for nRanks-2 steps each rank writes what arrives from the left (the slice of block
// i-k) into its output and forwards it; the last block to arrive (i+1) is only written.
// nRanks-1 steps; the data moves as bytes, whatever the element type.
#pragma once

#include "kernels/primitives.h"

namespace braid::kernels {

template <typename T, typename Red, typename Group>
BRAID_OUTLINE bool allGatherRing(Group& g, const CollWork& w, const RingHandle& ring, const uint32_t* abortFlag) {
  const int n = ring.nRanks;
  const int me = ring.index;
  const T* in = advance(static_cast<const T*>(w.sendbuff), w.channelOffset);
  T* out = static_cast<T*>(w.recvbuff);
  const uint64_t block = w.blockCount;
  const uint64_t total = w.channelCount;
  const ConnHandle* send = n > 1 ? &ring.send : nullptr;
  const ConnHandle* recv = n > 1 ? &ring.recv : nullptr;
  Primitives<T, Red, Group> prims(g, send, recv, w.proto, Red(w.opArgs), abortFlag, &w);
  const uint64_t slice = n > 1 ? prims.sliceElements() : (total > 0 ? total : 1);
  bool ok = true;
  for (uint64_t base = 0; base < total && ok; base += slice) {
    const uint64_t cnt = total - base < slice ? total - base : slice;
    const uint64_t off = w.channelOffset + base;
    ok = prims.step(kInput | kOutput | (n > 1 ? uint32_t(kSend) : 0u), advance(in, base), advance(out, me * block + off), cnt);
    for (int k = 1; k < n - 1 && ok; ++k) {
      ok = prims.step(kRecv | kOutput | kSend, nullptr, advance(out, ((me + n - k) % n) * block + off), cnt);
    }
    if (n > 1) ok = ok && prims.step(kRecv | kOutput, nullptr, advance(out, ((me + 1) % n) * block + off), cnt);
  }
  prims.finish();
  return ok;
}

}  // namespace braid::kernels
