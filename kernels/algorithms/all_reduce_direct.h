// Direct AllReduce: one-shot for the smallest messages, two exchanges beyond them.
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
//
// Beyond one LL step, or with another protocol (NCCL_ALGO=allreduce:direct at any size), the
// two-exchange form: the channel's range is cut into n chunks (512-byte runs), chunk q owned by
// rank q. A reduce-scatter of n-1 exchanges: in exchange j each rank sends chunk me+j of its
// input (pre step applied) to rank me+j and receives its own chunk from rank me-j, folding it
// into its output (the received value first, then every later one after the partial result,
// the post step with the last); then an all-gather of n-1 exchanges: the owner's final chunk to
// rank me+j, chunk me-j from rank me-j. Each chunk crosses one link to its owner and one back
// (the ring's bytes in 2(n-1) exchanges of direct connections); each exchange interleaves its
// send and its receive slice by slice (peerSwap). The owner alone reduces its chunk and every
// rank copies it, so the bits are the same everywhere.
#pragma once

#include "kernels/algorithms/peer_transfer.h"
#include "kernels/algorithms/ring_steps.h"

namespace braid::kernels {

/// All threads of the group: the two-exchange form (above) on this channel's range.
template <typename T, typename Red, typename Group>
BRAID_OUTLINE bool allReduceDirectExchanges(Group& g, const CollWork& w, const RingHandle& ring,
                                            const uint32_t* abortFlag) {
  const int n = ring.nRanks;
  const int me = ring.index;
  const T* in = advance(static_cast<const T*>(w.sendbuff), w.channelOffset);
  T* out = advance(static_cast<T*>(w.recvbuff), w.channelOffset);
  const uint64_t total = w.channelCount;
  if (n == 1) return localStep<T, Red, Group>(g, w, abortFlag, kInput | kPost, in, out, total);
  uint64_t per = (total + n - 1) / n;
  per = (per + kChunkRun<T> - 1) / kChunkRun<T> * kChunkRun<T>;
  auto begin = [&](int q) { return q * per < total ? q * per : total; };  // (begin(n) is total)
  auto count = [&](int q) { return begin(q + 1) - begin(q); };
  const uint64_t mine = begin(me);
  for (int j = 1; j < n; ++j) {  // reduce-scatter: chunk me+j out, chunk me in, folded
    const int to = (me + j) % n, from = (me + n - j) % n;
    const uint32_t fold = (j == 1 ? uint32_t(kInput) : uint32_t(kPartial | kMineFirst)) | (j == n - 1 ? uint32_t(kPost) : 0u);
    const T* partial = j == 1 ? advance(in, mine) : advance(out, mine);
    if (!peerSwap<T, Red, Group>(g, w, abortFlag, to, kInput, advance(in, begin(to)), count(to), from, fold, partial,
                                 advance(out, mine), count(me)))
      return false;
  }
  for (int j = 1; j < n; ++j) {  // all-gather: chunk me out, chunk me-j in
    const int to = (me + j) % n, from = (me + n - j) % n;
    if (!peerSwap<T, Red, Group>(g, w, abortFlag, to, kPartial, advance(out, mine), count(me), from, 0, nullptr,
                                 advance(out, begin(from)), count(from)))
      return false;
  }
  return true;
}

/// All threads of the group (the data is at most one LL step), on this channel's slice of it:
/// thread 0 waits for every send connection's credits and writes the signatures, the group
/// writes the lines (each thread its share of every peer's), thread 0 publishes the steps and
/// checks the peers' signatures, then each thread folds its share of the lines, waiting on
/// their flags itself, and thread 0 frees the receive slots. Returns false when aborted.
template <typename T, typename Red, typename Group>
BRAID_OUTLINE bool allReduceDirectOneShot(Group& g, const CollWork& w, const RingHandle& ring, const uint32_t* abortFlag) {
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
  // Fold every rank's contribution in rank order, each thread its lines, kFoldLines of them a
  // pass: a peer's step (host memory on a GPU) is read once a pass, not once a line.
  constexpr int kFoldLines = 4;
  for (uint64_t first = share.begin; first < share.end && !aborted; first += kFoldLines * share.stride) {
    T acc[kFoldLines][kPerLine] = {};
    for (int r = 0; r < n && !aborted; ++r) {
      const ConnHandle& c = w.peerRecv[r];  // (unused for r == me)
      const uint64_t step = r == me ? 0 : *c.step;
      const uint32_t flag = static_cast<uint32_t>(step + 1);
      for (int k = 0; k < kFoldLines && !aborted; ++k) {
        const uint64_t l = first + k * share.stride;
        if (l >= share.end) break;
        T vals[kPerLine] = {};
        if (r == me) {
          mine(l, vals);
        } else {
          const LLLine* line = c.ll + (step % kSteps) * c.llStepLines + l;
          uint32_t payload[2];
          aborted = waitReporting(g.rank() == 0 ? w.status : nullptr, kWaitData, &c, step,
                                  [&] { return readLLLine(line, flag, payload); }, abortFlag) == WaitResult::kAborted;
          memcpy(vals, payload, sizeof(payload));
        }
        for (uint64_t j = 0; j < kPerLine; ++j) acc[k][j] = r == 0 ? vals[j] : red.reduce(acc[k][j], vals[j]);
      }
    }
    for (int k = 0; k < kFoldLines && !aborted; ++k) {
      const uint64_t l = first + k * share.stride;
      if (l >= share.end) break;
      for (uint64_t j = 0; j < kPerLine && l * kPerLine + j < count; ++j) {
        out[l * kPerLine + j] = Red::kHasPost ? red.post(acc[k][j]) : acc[k][j];
      }
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

/// All threads of the group: the one-shot form where this channel's slice fits one LL step
/// of the peer connections, else the two exchanges.
template <typename T, typename Red, typename Group>
BRAID_OUTLINE bool allReduceDirect(Group& g, const CollWork& w, const RingHandle& ring, const uint32_t* abortFlag) {
  constexpr uint64_t kPerLine = 8 / sizeof(T);
  const uint64_t lines = (w.channelCount + kPerLine - 1) / kPerLine;
  const int other = ring.index == 0 ? 1 : 0;  // (every peer connection has the same sizes)
  const bool oneShot = w.proto == Proto::kLL && (ring.nRanks == 1 || lines <= w.peerSend[other].llStepLines);
  return oneShot ? allReduceDirectOneShot<T, Red, Group>(g, w, ring, abortFlag)
                 : allReduceDirectExchanges<T, Red, Group>(g, w, ring, abortFlag);
}

}  // namespace braid::kernels
