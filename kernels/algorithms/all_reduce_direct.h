// Direct (one-shot) AllReduce, for the smallest messages.
//
// Every rank applies the op's pre step to its input and sends the whole result to every
// other rank as one LL step on their point-to-point connection; then each rank folds the
// nRanks contributions line by line in rank order (0, 1, ..., n-1) and applies the post step.
// One hop instead of the ring's 2(n-1) steps: the latency of a single message, at the price
// of n-1 copies of the data leaving each rank. Every rank folds the same values in the same
// order, so the results are bit-identical everywhere. The message must fit one LL step. The
// whole group moves the lines (on a GPU neighbouring threads take neighbouring lines, so a
// warp writes and polls 512 contiguous bytes); one thread only waits for credits, publishes
// steps and compares signatures, between barriers.
#pragma once

#include "kernels/primitives.h"

namespace braid::kernels {

/// All threads of the group (the data is at most one LL step), on this channel's slice of it:
/// thread 0 waits for every send connection's credits and writes the signatures, the group
/// writes the lines (each thread its share of every peer's), thread 0 publishes the steps and
/// checks the peers' signatures, then each thread folds its share of the lines, waiting on
/// their flags itself, and thread 0 frees the receive slots. Returns false when aborted.
template <typename T, typename Red, typename Group>
BRAID_OUTLINE bool allReduceDirect(Group& g, const CollWork& w, const RingHandle& ring, const uint32_t* abortFlag) {
  const Red red(w.opArgs);
  const int n = ring.nRanks;
  const int me = ring.index;
  const T* in = advance(static_cast<const T*>(w.sendbuff), w.channelOffset);
  T* out = advance(static_cast<T*>(w.recvbuff), w.channelOffset);
  const uint64_t count = w.channelCount;
  constexpr uint64_t kPerLine = 8 / sizeof(T);
  const uint64_t lines = (count + kPerLine - 1) / kPerLine;
  const Share share = shareOf(lines, g.size(), g.rank(), 1);
  // pre(input) of line l (zeros past the end).
  auto mine = [&](uint64_t l, T* vals) {
    for (uint64_t j = 0; j < kPerLine; ++j) vals[j] = l * kPerLine + j < count ? red.pre(in[l * kPerLine + j]) : T{};
  };

  bool aborted = false;
  if (g.rank() == 0) {  // a free slot on every send connection, and the signature in it
    for (int p = 0; p < n && !aborted; ++p) {
      if (p == me) continue;
      const ConnHandle& c = w.peerSend[p];
      const uint64_t step = *c.step;
      aborted = waitReporting(w.status, kWaitCredits, &c, step, [&] { return loadAcquire(c.head) + kSteps > step; },
                              abortFlag) == WaitResult::kAborted;
      if (!aborted) writeSignature(c, step, w.sig);
    }
  }
  if (g.syncAny(aborted)) return false;
  // Send pre(input) to every peer, as LL lines carrying the peer connection's step flag.
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    const ConnHandle& c = w.peerSend[p];
    const uint64_t step = *c.step;
    LLLine* slot = c.ll + (step % kSteps) * c.llStepLines;
    const uint32_t flag = static_cast<uint32_t>(step + 1);
    for (uint64_t l = share.begin; l < share.end; l += share.stride) {
      T vals[kPerLine];
      mine(l, vals);
      uint32_t payload[2];
      memcpy(payload, vals, sizeof(payload));
      writeLLLine(slot + l, payload, flag);
    }
  }
  g.sync();  // (every line written before tail, which the network proxy forwards on)
  if (g.rank() == 0) {
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      const ConnHandle& c = w.peerSend[p];
      publishStep(c, *c.step, stepInfo(lines * sizeof(LLLine), true));
      *c.step += 1;
    }
    // Every peer called the same collective? (Its signature arrives with its data.)
    for (int p = 0; p < n && w.checkSig != 0 && !aborted; ++p) {
      if (p == me) continue;
      const ConnHandle& c = w.peerRecv[p];
      aborted = checkSignature(c, *c.step, w.sig, w.status, abortFlag) != WaitResult::kReady;
    }
  }
  if (g.syncAny(aborted)) return false;
  // Fold every rank's contribution in rank order, each thread its lines.
  for (uint64_t l = share.begin; l < share.end && !aborted; l += share.stride) {
    T acc[kPerLine] = {};
    for (int r = 0; r < n && !aborted; ++r) {
      T vals[kPerLine] = {};
      if (r == me) {
        mine(l, vals);
      } else {
        const ConnHandle& c = w.peerRecv[r];
        const uint64_t step = *c.step;
        const LLLine* line = c.ll + (step % kSteps) * c.llStepLines + l;
        const uint32_t flag = static_cast<uint32_t>(step + 1);
        uint32_t payload[2];
        aborted = waitReporting(g.rank() == 0 ? w.status : nullptr, kWaitData, &c, step,
                                [&] { return readLLLine(line, flag, payload); }, abortFlag) == WaitResult::kAborted;
        memcpy(vals, payload, sizeof(payload));
      }
      for (uint64_t j = 0; j < kPerLine; ++j) acc[j] = r == 0 ? vals[j] : red.reduce(acc[j], vals[j]);
    }
    for (uint64_t j = 0; j < kPerLine && l * kPerLine + j < count && !aborted; ++j) {
      out[l * kPerLine + j] = Red::kHasPost ? red.post(acc[j]) : acc[j];
    }
  }
  if (g.syncAny(aborted)) return false;
  if (g.rank() == 0) {  // free the slots read
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      const ConnHandle& c = w.peerRecv[p];
      *c.step += 1;
      storeRelease(c.head, *c.step);
    }
  }
  g.sync();  // (the steps as thread 0 left them, for whatever the group runs next)
  return true;
}

}  // namespace braid::kernels
