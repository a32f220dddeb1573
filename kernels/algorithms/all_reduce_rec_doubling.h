// Recursive-doubling (butterfly) AllReduce.
//
// With p = nRanks a power of two: in round k (k = 0 .. log2(p)-1) every rank exchanges its
// whole current vector with the rank whose index differs in bit k, and both reduce what they
// received into what they hold; after log2(p) rounds every rank holds the full reduction.
// log2(p) steps of the whole vector, against the ring's 2(p-1) steps of 1/p of it: fewer
// hops, more bytes, so it wins for small messages on many ranks.
//
// Other rank counts fold the extra ranks in and out (Thakur, Rabenseifner and Gropp): with
// p the largest power of two below n and r = n - p, each even rank 2i < 2r first sends its
// input to rank 2i+1 and sits out; the p remaining ranks (virtual ranks 0..p-1, in rank order)
// run the rounds; then each rank 2i+1 sends the result back to rank 2i.
//
// Determinism: in every exchange both partners reduce the lower-ranked half first, so two
// partners compute the same bits, and every rank ends with bit-identical results (ranks that
// sat out receive a copy). The op's pre step is applied once, to each rank's own input; its
// post step once, in the last round. Each exchange moves the vector in FIFO-slot slices: a
// rank sends slice j, then receives its partner's slice j, so neither waits for the other's
// whole vector and the FIFO's 8 slots keep both directions busy. Connections: each rank's
// point-to-point connection to each partner on the work's channel (w.peerSend, w.peerRecv);
// on several channels each reduces its slice of the vector.
#pragma once

#include "kernels/primitives.h"

namespace braid::kernels {

/// All threads of the group. Returns false when the communicator was aborted.
template <typename T, typename Red, typename Group>
BRAID_OUTLINE bool allReduceRecDoubling(Group& g, const CollWork& w, const RingHandle& ring, const uint32_t* abortFlag) {
  using Prims = Primitives<T, Red, Group>;
  const T* in = advance(static_cast<const T*>(w.sendbuff), w.channelOffset);
  T* out = advance(static_cast<T*>(w.recvbuff), w.channelOffset);
  const uint64_t total = w.channelCount;
  const int n = ring.nRanks;
  const int me = ring.index;
  const Red red(w.opArgs);
  if (n == 1) {
    Prims local(g, nullptr, nullptr, w.proto, red, abortFlag);
    return total == 0 || local.step(kInput | kPost | kOutput, in, out, total);
  }
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int folded = n - p;  // ranks 2i < 2 * folded hand their input to 2i+1

  // Runs `flags` steps over [0, total) in slices through `prims`.
  auto sweep = [&](Prims& prims, uint32_t flags, const T* input, T* output) {
    const uint64_t slice = prims.sliceElements();
    bool ok = true;
    for (uint64_t base = 0; base < total && ok; base += slice) {
      const uint64_t cnt = total - base < slice ? total - base : slice;
      ok = prims.step(flags, advance(input, base), advance(output, base), cnt);
    }
    prims.finish();
    return ok;
  };

  if (me < 2 * folded && me % 2 == 0) {  // sits out: input to me+1, the result back from it
    Prims there(g, &w.peerSend[me + 1], nullptr, w.proto, red, abortFlag, &w);
    if (!sweep(there, kInput | kSend, in, nullptr)) return false;
    Prims back(g, nullptr, &w.peerRecv[me + 1], w.proto, red, abortFlag, &w);
    return sweep(back, kRecv | kOutput, nullptr, out);
  }
  bool partial = false;  // out holds this rank's partial result (pre applied)
  if (me < 2 * folded) {  // odd: takes in its left neighbour's input (the lower half first)
    Prims from(g, nullptr, &w.peerRecv[me - 1], w.proto, red, abortFlag, &w);
    if (!sweep(from, kRecv | kInput | kOutput, in, out)) return false;
    partial = true;
  }
  const int virt = me < 2 * folded ? me / 2 : me - folded;
  for (int bit = 1; bit < p; bit *= 2) {
    const int other = virt ^ bit;
    const int peer = other < folded ? 2 * other + 1 : other + folded;
    const uint32_t mine = partial ? kPartial : kInput;
    const T* source = partial ? out : in;
    const uint32_t order = virt < other ? kMineFirst : 0u;
    const uint32_t last = bit * 2 == p ? kPost : 0u;
    Prims x(g, &w.peerSend[peer], &w.peerRecv[peer], w.proto, red, abortFlag, &w);
    const uint64_t slice = x.sliceElements();
    bool ok = true;
    for (uint64_t base = 0; base < total && ok; base += slice) {
      const uint64_t cnt = total - base < slice ? total - base : slice;
      ok = x.step(mine | kSend, advance(source, base), nullptr, cnt) &&
           x.step(kRecv | mine | order | last | kOutput, advance(source, base), advance(out, base), cnt);
    }
    x.finish();
    if (!ok) return false;
    partial = true;
  }
  if (me < 2 * folded) {  // odd: the result back to the rank that sat out
    Prims back(g, &w.peerSend[me - 1], nullptr, w.proto, red, abortFlag, &w);
    return sweep(back, kPartial | kSend, out, nullptr);
  }
  return true;
}

}  // namespace braid::kernels
