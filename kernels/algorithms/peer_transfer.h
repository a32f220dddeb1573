// The data movement of the schedules over point-to-point connections (HalvingDoubling,
// Binomial): whole transfers to or from one peer, and local steps, each ending with a group
// barrier so that the step counters are written back before the next transfer reads them.
#pragma once

#include "kernels/primitives.h"

namespace braid::kernels {

/// Where a transfer's elements lie: pieces of `piece` elements, `stride` apart. A collective
/// of rank blocks split over channels moves this channel's piece of each block
/// (blockPieces); everything else is contiguous (one piece without end).
struct Layout {
  uint64_t piece, stride;
  /// The address offset of the transfer's element `at`.
  BRAID_INLINE uint64_t place(uint64_t at) const { return at / piece * stride + at % piece; }
  /// Elements from `at` to the end of its piece.
  BRAID_INLINE uint64_t rest(uint64_t at) const { return piece - at % piece; }
};
BRAID_INLINE Layout contiguous() { return Layout{~0ull, 0}; }

/// This channel's pieces of the rank blocks (contiguous when it has the whole blocks).
BRAID_INLINE Layout blockPieces(const CollWork& w) {
  return w.channelCount == w.blockCount || w.channelCount == 0 ? contiguous() : Layout{w.channelCount, w.blockCount};
}

/// All threads of the group: sends `sendCount` elements from `sendFrom` (sendFlags | kSend) to
/// `sendPeer` (over w.peerSend) and receives `recvCount` into `recvInto` (recvFlags | kRecv |
/// kOutput, reduced with `recvMine` where the flags say so) from `recvPeer` (w.peerRecv),
/// slice by slice, the two directions interleaved so that neither side waits for the other's
/// whole message. Either count may be 0 (that direction is not used). The elements lie as
/// `layout` says from each pointer (which is where a piece begins), and no step crosses the
/// end of a piece, so a peer moving the same count in the same layout steps alike. False when
/// aborted. Out of line: called once per transfer, it is compiled once per type and op
/// rather than at each of the schedules' call sites (which had doubled the kernel units'
/// build time).
template <typename T, typename Red, typename Group>
BRAID_OUTLINE bool peerSwap(Group& g, const CollWork& w, const uint32_t* abortFlag, Layout layout, int sendPeer,
                            uint32_t sendFlags, const T* sendFrom, uint64_t sendCount, int recvPeer, uint32_t recvFlags,
                            const T* recvMine, T* recvInto, uint64_t recvCount) {
  Primitives<T, Red, Group> x(g, sendCount > 0 ? &w.peerSend[sendPeer] : nullptr,
                              recvCount > 0 ? &w.peerRecv[recvPeer] : nullptr, w.proto, Red(w.opArgs), abortFlag, &w);
  const uint64_t slice = x.sliceElements();
  auto stepSize = [&](uint64_t at, uint64_t count) {
    uint64_t cnt = count - at < slice ? count - at : slice;
    return cnt < layout.rest(at) ? cnt : layout.rest(at);
  };
  bool ok = true;
  for (uint64_t sent = 0, got = 0; ok && (sent < sendCount || got < recvCount);) {
    if (sent < sendCount) {
      const uint64_t cnt = stepSize(sent, sendCount);
      ok = x.step(sendFlags | kSend, advance(sendFrom, layout.place(sent)), nullptr, cnt);
      sent += cnt;
    }
    if (ok && got < recvCount) {
      const uint64_t cnt = stepSize(got, recvCount);
      const uint64_t at = layout.place(got);
      ok = x.step(recvFlags | kRecv | kOutput, advance(recvMine, at), advance(recvInto, at), cnt);
      got += cnt;
    }
  }
  x.finish();
  g.sync();
  return ok;
}

/// peerSwap of contiguous elements.
template <typename T, typename Red, typename Group>
BRAID_INLINE bool peerSwap(Group& g, const CollWork& w, const uint32_t* abortFlag, int sendPeer, uint32_t sendFlags,
                           const T* sendFrom, uint64_t sendCount, int recvPeer, uint32_t recvFlags, const T* recvMine,
                           T* recvInto, uint64_t recvCount) {
  return peerSwap<T, Red, Group>(g, w, abortFlag, contiguous(), sendPeer, sendFlags, sendFrom, sendCount, recvPeer,
                                 recvFlags, recvMine, recvInto, recvCount);
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
