// Halving-doubling (Rabenseifner) AllReduce: a reduce-scatter by recursive halving, then an
// all-gather by recursive doubling (the schedule in halving_doubling.h), over equal parts of
// the vector.
//
// With p = nRanks a power of two, after log2(p) halving rounds each rank holds 1/p of the
// vector fully reduced; the doubling rounds then swap parts until every rank holds the whole
// result. Each rank sends and receives 2(p-1)/p of the vector, as the ring does, in
// 2 log2(p) steps instead of 2(p-1): the ring's bandwidth with a log-step latency, which
// makes it a choice for medium and large messages on many ranks. Other rank counts fold the
// extra ranks in and out: each even rank 2i < 2(n - p) hands its input (pre step applied) to
// rank 2i+1 first, which reduces it into its own, and gets the whole result back at the end.
// Determinism: each part is reduced by one rank only, in a fixed order (the lower half first
// in every round), then copied: every rank ends with bit-identical results.
#pragma once

#include "kernels/algorithms/halving_doubling.h"

namespace braid::kernels {

/// All threads of the group. Returns false when the communicator was aborted.
template <typename T, typename Red, typename Group>
BRAID_OUTLINE bool allReduceHalvingDoubling(Group& g, const CollWork& w, const RingHandle& ring,
                                           const uint32_t* abortFlag) {
  HalvingDoubling<T, Red, Group> hd(g, w, ring, abortFlag);
  const T* in = advance(static_cast<const T*>(w.sendbuff), w.channelOffset);
  T* out = advance(static_cast<T*>(w.recvbuff), w.channelOffset);
  const uint64_t total = w.channelCount;
  if (hd.nRanks() == 1) return hd.local(kInput | kPost, in, out, total);
  const int me = hd.me();
  if (hd.sitsOut()) {  // input to me+1, the result back from it
    return hd.swap(me + 1, kInput, in, total, 0, nullptr, nullptr, 0) &&
           hd.swap(me + 1, 0, nullptr, 0, 0, nullptr, out, total);
  }
  const uint64_t p = static_cast<uint64_t>(hd.virtualRanks());
  auto boundary = [&](int v) { return total * static_cast<uint64_t>(v) / p; };
  bool partial = false;  // out holds this rank's partial result (pre applied)
  if (hd.absorbs()) {
    if (!hd.swap(me - 1, 0, nullptr, 0, kInput, in, out, total)) return false;
    partial = true;
  }
  if (!hd.reduceScatter(in, out, partial, boundary) || !hd.allGather(out, boundary)) return false;
  if (hd.absorbs()) return hd.swap(me - 1, kPartial, out, total, 0, nullptr, nullptr, 0);  // the result back
  return true;
}

}  // namespace braid::kernels
