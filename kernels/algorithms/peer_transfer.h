// The data movement of the schedules over point-to-point connections (HalvingDoubling,
// Binomial): whole transfers to or from one peer, and local steps, each ending with a group
// barrier so that the step counters are written back before the next transfer reads them.
#pragma once

#include "kernels/primitives.h"

namespace braid::kernels {

/// All threads of the group: sends `sendCount` elements from `sendFrom` (sendFlags | kSend) to
/// `sendPeer` (over w.peerSend) and receives `recvCount` into `recvInto` (recvFlags | kRecv |
/// kOutput, reduced with `recvMine` where the flags say so) from `recvPeer` (w.peerRecv),
/// slice by slice, the two directions interleaved so that neither side waits for the other's
/// whole message. Either count may be 0 (that direction is not used). False when aborted.
/// Out of line: called once per transfer, it is compiled once per type and op rather than at
/// each of the schedules' call sites (which had doubled the kernel units' build time).
template <typename T, typename Red, typename Group>
BRAID_OUTLINE bool peerSwap(Group& g, const CollWork& w, const uint32_t* abortFlag, int sendPeer, uint32_t sendFlags,
                           const T* sendFrom, uint64_t sendCount, int recvPeer, uint32_t recvFlags, const T* recvMine,
                           T* recvInto, uint64_t recvCount) {
  Primitives<T, Red, Group> x(g, sendCount > 0 ? &w.peerSend[sendPeer] : nullptr,
                              recvCount > 0 ? &w.peerRecv[recvPeer] : nullptr, w.proto, Red(w.opArgs), abortFlag, &w);
  const uint64_t slice = x.sliceElements();
  bool ok = true;
  for (uint64_t at = 0; ok && (at < sendCount || at < recvCount); at += slice) {
    if (at < sendCount) {
      const uint64_t cnt = sendCount - at < slice ? sendCount - at : slice;
      ok = x.step(sendFlags | kSend, advance(sendFrom, at), nullptr, cnt);
    }
    if (ok && at < recvCount) {
      const uint64_t cnt = recvCount - at < slice ? recvCount - at : slice;
      ok = x.step(recvFlags | kRecv | kOutput, advance(recvMine, at), advance(recvInto, at), cnt);
    }
  }
  x.finish();
  g.sync();
  return ok;
}

/// All threads of the group: one local step (no connection), `flags` applied to `count`
/// elements of `from` into `to`; nothing when that would copy a buffer onto itself.
template <typename T, typename Red, typename Group>
BRAID_INLINE bool localStep(Group& g, const CollWork& w, const uint32_t* abortFlag, uint32_t flags, const T* from,
                            T* to, uint64_t count) {
  if (count == 0 || (from == to && !(flags & (kInput | kPost)))) return true;
  Primitives<T, Red, Group> x(g, nullptr, nullptr, w.proto, Red(w.opArgs), abortFlag);
  const bool ok = x.step(flags | kOutput, from, to, count);
  g.sync();
  return ok;
}

}  // namespace braid::kernels
