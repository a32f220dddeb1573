// Halving-doubling (Rabenseifner) AllReduce: a reduce-scatter by recursive halving, then an
// all-gather by recursive doubling.
//
// With p = nRanks a power of two: in the first round every rank splits the vector in two
// halves, sends the half its partner keeps to the partner p/2 away and reduces the half it
// keeps with what the partner sends; the next round does the same on the kept half with the
// partner p/4 away, and so on: after log2(p) rounds each rank holds 1/p of the vector fully
// reduced (the op's post step applied in the last round). The all-gather retraces the rounds
// backwards: partners 1, 2, 4, ... away swap what they hold, doubling it each round, until
// every rank holds the whole result. Each rank sends and receives 2(p-1)/p of the vector, as
// the ring does, in 2 log2(p) steps instead of 2(p-1): the ring's bandwidth with a log-step
// latency, which makes it the choice for medium and large messages on many ranks.
//
// Other rank counts fold the extra ranks in and out as RecDoubling does (each even rank
// 2i < 2(n - p) hands its input to rank 2i+1 first and gets the result back at the end).
// Determinism: each block is reduced by one rank only, in a fixed order (the lower half first
// in every round), then copied: every rank ends with bit-identical results. Within a round the
// two directions move in FIFO-slot slices, interleaved, so neither partner waits for the
// other's whole half. Connections: the point-to-point ones (w.peerSend, w.peerRecv), one channel.
#pragma once

#include "kernels/primitives.h"

namespace braid::kernels {

/// All threads of the group. Returns false when the communicator was aborted.
template <typename T, typename Red, typename Group>
BRAID_INLINE bool allReduceHalvingDoubling(Group& g, const CollWork& w, const RingHandle& ring,
                                           const uint32_t* abortFlag) {
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
  const int folded = n - p;

  // Sends [sendLo, sendLo + sendCount) of `source` with `sendFlags` and receives into
  // [recvLo, recvLo + recvCount) with `recvFlags`, slice by slice, the two interleaved.
  auto swap = [&](int peer, uint32_t sendFlags, uint64_t sendLo, uint64_t sendCount, uint32_t recvFlags,
                  uint64_t recvLo, uint64_t recvCount, const T* source) {
    Prims x(g, sendCount > 0 ? &w.peerSend[peer] : nullptr, recvCount > 0 ? &w.peerRecv[peer] : nullptr, w.proto,
            red, abortFlag, &w);
    const uint64_t slice = x.sliceElements();
    bool ok = true;
    for (uint64_t at = 0; ok && (at < sendCount || at < recvCount); at += slice) {
      if (at < sendCount) {
        const uint64_t cnt = sendCount - at < slice ? sendCount - at : slice;
        ok = x.step(sendFlags | kSend, advance(source, sendLo + at), nullptr, cnt);
      }
      if (ok && at < recvCount) {
        const uint64_t cnt = recvCount - at < slice ? recvCount - at : slice;
        ok = x.step(recvFlags | kRecv | kOutput, advance(source, recvLo + at), advance(out, recvLo + at), cnt);
      }
    }
    x.finish();
    g.sync();  // the step counters are written back before a later round reads them
    return ok;
  };

  if (me < 2 * folded && me % 2 == 0) {  // sits out: input to me+1, the result back from it
    return swap(me + 1, kInput, 0, total, 0, 0, 0, in) && swap(me + 1, 0, 0, 0, 0, 0, total, nullptr);
  }
  bool partial = false;  // out holds this rank's partial result (pre applied)
  if (me < 2 * folded) {
    if (!swap(me - 1, 0, 0, 0, kInput, 0, total, in)) return false;
    partial = true;
  }
  const int virt = me < 2 * folded ? me / 2 : me - folded;
  auto rankOf = [&](int v) { return v < folded ? 2 * v + 1 : v + folded; };

  // Reduce-scatter by recursive halving; ranges[k] is what this rank held before round k.
  uint64_t lo = 0, hi = total;
  uint64_t ranges[2 * 32];
  int rounds = 0;
  for (int dist = p / 2; dist >= 1; dist /= 2) {
    const int other = virt ^ dist;
    const bool lower = (virt & dist) == 0;
    const uint64_t mid = lo + (hi - lo) / 2;
    const uint64_t keepLo = lower ? lo : mid, keepHi = lower ? mid : hi;
    const uint64_t sendLo = lower ? mid : lo, sendHi = lower ? hi : mid;
    const uint32_t mine = partial ? kPartial : kInput;
    const uint32_t recvFlags = mine | (virt < other ? kMineFirst : 0u) | (dist == 1 ? kPost : 0u);
    if (!swap(rankOf(other), mine, sendLo, sendHi - sendLo, recvFlags, keepLo, keepHi - keepLo, partial ? out : in)) {
      return false;
    }
    partial = true;
    ranges[2 * rounds] = lo;
    ranges[2 * rounds + 1] = hi;
    ++rounds;
    lo = keepLo;
    hi = keepHi;
  }
  // All-gather by recursive doubling: the rounds backwards.
  for (int dist = 1; dist < p; dist *= 2) {
    --rounds;
    const uint64_t wholeLo = ranges[2 * rounds], wholeHi = ranges[2 * rounds + 1];
    const uint64_t theirLo = lo == wholeLo ? hi : wholeLo, theirHi = lo == wholeLo ? wholeHi : lo;
    if (!swap(rankOf(virt ^ dist), kPartial, lo, hi - lo, 0, theirLo, theirHi - theirLo, out)) return false;
    lo = wholeLo;
    hi = wholeHi;
  }
  if (me < 2 * folded) return swap(me - 1, kPartial, 0, total, 0, 0, 0, out);  // the result back
  return true;
}

}  // namespace braid::kernels
