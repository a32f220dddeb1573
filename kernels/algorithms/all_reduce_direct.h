// Direct (one-shot) AllReduce, for the smallest messages.
//
// Every rank applies the op's pre step to its input and sends the whole result to every
// other rank as one LL step on their point-to-point connection; then each rank folds the
// nRanks contributions line by line in rank order (0, 1, ..., n-1) and applies the post step.
// One hop instead of the ring's 2(n-1) steps: the latency of a single message, at the price
// of n-1 copies of the data leaving each rank. Every rank folds the same values in the same
// order, so the results are bit-identical everywhere. The message must fit one LL step.
#pragma once

#include "kernels/primitives.h"

namespace braid::kernels {

/// Thread 0 only (the data is at most one LL step), on this channel's slice of it. Returns
/// false when aborted.
template <typename T, typename Red, typename Group>
BRAID_OUTLINE bool allReduceDirect(Group& g, const CollWork& w, const RingHandle& ring, const uint32_t* abortFlag) {
  if (g.rank() != 0) return true;
  const Red red(w.opArgs);
  const int n = ring.nRanks;
  const int me = ring.index;
  const T* in = advance(static_cast<const T*>(w.sendbuff), w.channelOffset);
  T* out = advance(static_cast<T*>(w.recvbuff), w.channelOffset);
  const uint64_t count = w.channelCount;
  constexpr uint64_t kPerLine = 8 / sizeof(T);
  const uint64_t lines = (count + kPerLine - 1) / kPerLine;

  // Send pre(input) to every peer, as LL lines carrying the peer connection's step flag.
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    const ConnHandle& c = w.peerSend[p];
    const uint64_t step = *c.step;
    if (waitReporting(w.status, kWaitCredits, &c, step, [&] { return loadAcquire(c.head) + kSteps > step; }, abortFlag) ==
        WaitResult::kAborted)
      return false;
    writeSignature(c, step, w.sig);
    LLLine* slot = c.ll + (step % kSteps) * c.llStepLines;
    const uint32_t flag = static_cast<uint32_t>(step + 1);
    for (uint64_t l = 0; l < lines; ++l) {
      T vals[kPerLine] = {};
      for (uint64_t j = 0; j < kPerLine && l * kPerLine + j < count; ++j) vals[j] = red.pre(in[l * kPerLine + j]);
      uint32_t payload[2];
      memcpy(payload, vals, sizeof(payload));
      writeLLLine(slot + l, payload, flag);
    }
    publishStep(c, step, stepInfo(lines * sizeof(LLLine), true));
    *c.step = step + 1;
  }
  // Every peer called the same collective? (Its signature arrives with its data.)
  for (int p = 0; p < n && w.checkSig != 0; ++p) {
    if (p == me) continue;
    const ConnHandle& c = w.peerRecv[p];
    if (checkSignature(c, *c.step, w.sig, w.status, abortFlag) != WaitResult::kReady) return false;
  }
  // Fold every rank's contribution in rank order.
  for (uint64_t l = 0; l < lines; ++l) {
    T acc[kPerLine] = {};
    for (int r = 0; r < n; ++r) {
      T vals[kPerLine] = {};
      if (r == me) {
        for (uint64_t j = 0; j < kPerLine && l * kPerLine + j < count; ++j) vals[j] = red.pre(in[l * kPerLine + j]);
      } else {
        const ConnHandle& c = w.peerRecv[r];
        const uint64_t step = *c.step;
        const LLLine* line = c.ll + (step % kSteps) * c.llStepLines + l;
        const uint32_t flag = static_cast<uint32_t>(step + 1);
        uint32_t payload[2];
        if (waitReporting(w.status, kWaitData, &c, step, [&] { return readLLLine(line, flag, payload); }, abortFlag) ==
            WaitResult::kAborted) {
          return false;
        }
        memcpy(vals, payload, sizeof(payload));
      }
      for (uint64_t j = 0; j < kPerLine; ++j) acc[j] = r == 0 ? vals[j] : red.reduce(acc[j], vals[j]);
    }
    for (uint64_t j = 0; j < kPerLine && l * kPerLine + j < count; ++j) {
      out[l * kPerLine + j] = Red::kHasPost ? red.post(acc[j]) : acc[j];
    }
  }
  // Free the slots we read.
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    const ConnHandle& c = w.peerRecv[p];
    *c.step += 1;
    storeRelease(c.head, *c.step);
  }
  return true;
}

}  // namespace braid::kernels
