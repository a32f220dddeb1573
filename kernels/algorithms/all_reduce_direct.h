// Direct AllReduce: one-shot for the smallest messages, two exchanges beyond them.
//
// Every rank applies the op's pre step to its input and sends the whole result to every
// other rank as one LL step on their point-to-point connection; then each rank folds the
// nRanks contributions line by line in rank order (0, 1, ..., n-1) and applies the post step.
// One hop instead of the ring's 2(n-1) steps: the latency of a single message, at the price
// of n-1 copies of the data leaving each rank. Every rank folds the same values in the same
// order, so the results are bit-identical everywhere. The message must fit one LL step. The
// whole group moves the lines (on a GPU neighbouring threads take neighbouring lines of a peer,
// so a warp writes and polls 512 contiguous bytes, and a message of a few lines still has a
// lane for each peer); each peer's credits, step and signature have a thread of their own.
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

/// All threads of the group (the data is at most one LL step), on this channel's slice of it.
/// The work of each peer has threads of its own, so that the round trips to the peers overlap
/// (on a GPU a lane a peer, not thread 0 peer after peer): thread k waits for the credits of
/// the k-th rank after me and writes the signature in its slot; the group writes the lines,
/// taking the (peer, line) pairs peer by peer; thread k publishes the step it sent and checks
/// the signature that came with that rank's data; then each thread folds its share of the
/// lines, loading each line from up to kFoldPeers ranks before it waits on any of their flags,
/// and thread 0 frees the receive slots. Returns false when aborted.
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
  // pre(input) of line l (zeros past the end).
  auto mine = [&](uint64_t l, T* vals) {
    for (uint64_t j = 0; j < kPerLine; ++j) vals[j] = l * kPerLine + j < count ? red.pre(in[l * kPerLine + j]) : T{};
  };

  // Thread k serves the k-th rank after me (the round trips to the peers overlap): a free slot
  // on its send connection and the signature in it. Thread 0's waits are the ones reported.
  bool aborted = false;
  for (int k = g.rank(); k < n - 1 && !aborted; k += g.size()) {
    const ConnHandle& c = w.peerSend[(me + 1 + k) % n];
    const uint64_t step = *c.step;
    aborted = waitReporting(g.rank() == 0 ? w.status : nullptr, kWaitCredits, &c, step,
                            [&] { return loadAcquire(c.head) + kSteps > step; }, abortFlag) == WaitResult::kAborted;
    if (!aborted) writeSignature(c, step, w.sig);
  }
  if (g.syncAny(aborted)) return false;
  // Send pre(input) to every peer, as LL lines carrying the peer connection's step flag: pair
  // i is line i % lines for the (i / lines + 1)-th rank after me.
  // (No division a pair: pair i's (k, l) is carried along from the first, a stride at a time.)
  const Share pairs = shareOf(uint64_t(n - 1) * lines, g.size(), g.rank(), 1);
  if (pairs.begin < pairs.end) {
    uint64_t k = pairs.begin / lines, l = pairs.begin % lines;
    const uint64_t strideK = pairs.stride / lines, strideL = pairs.stride % lines;
    uint64_t slotK = ~uint64_t(0);
    LLLine* slot = nullptr;
    uint32_t sendFlag = 0;
    for (uint64_t i = pairs.begin; i < pairs.end; i += pairs.stride) {
      if (k != slotK) {  // (a peer's step read once a run of its lines)
        slotK = k;
        const ConnHandle& c = w.peerSend[(me + 1 + static_cast<int>(k)) % n];
        const uint64_t step = *c.step;
        slot = c.ll + (step % kSteps) * c.llStepLines;
        sendFlag = static_cast<uint32_t>(step + 1);
      }
      alignas(8) T vals[kPerLine];
      mine(l, vals);
      uint32_t payload[2];
      memcpy(payload, vals, sizeof(payload));
      writeLLLine(slot + l, payload, sendFlag);
      k += strideK;
      l += strideL;
      if (l >= lines) {
        l -= lines;
        ++k;
      }
    }
  }
  g.sync();  // (every line written before tail, which the network proxy forwards on)
  // Thread k again for the k-th rank after me: publishes the step sent to it (its size where a
  // proxy reads it, then one fence for the group's lines, then tail relaxed: the peers' tails
  // go out from their own threads together, not one release after another), then checks the
  // signature that came with its data (every peer called the same collective?), recording
  // nothing. Where any differs (or the communicator was aborted), thread 0 checks them again
  // in rank order, recording the first difference in the channel's status.
  const bool servesPeer = g.rank() < n - 1;
  for (int k = g.rank(); k < n - 1; k += g.size()) {
    const ConnHandle& c = w.peerSend[(me + 1 + k) % n];
    recordStepSize(c, *c.step, stepInfo(lines * sizeof(LLLine), true));
  }
  if (servesPeer) fenceRelease();
  for (int k = g.rank(); k < n - 1; k += g.size()) {
    const ConnHandle& c = w.peerSend[(me + 1 + k) % n];
    storeRelaxed(c.tail, *c.step + 1);
    *c.step += 1;
  }
  for (int k = g.rank(); k < n - 1 && w.checkSig != 0 && !aborted; k += g.size()) {
    const ConnHandle& c = w.peerRecv[(me + 1 + k) % n];
    aborted = checkSignature(c, *c.step, w.sig, nullptr, abortFlag) != WaitResult::kReady;
  }
  if (g.syncAny(aborted)) {
    if (g.rank() == 0) {
      for (int p = 0; p < n; ++p) {
        const ConnHandle& c = w.peerRecv[p];
        if (p != me && checkSignature(c, *c.step, w.sig, w.status, abortFlag) != WaitResult::kReady) break;
      }
    }
    g.sync();
    return false;
  }
  // Fold every rank's contribution in rank order (0, 1, ..., n-1), each thread its lines, the
  // ranks kFoldPeers at a time: their steps read together (once for all lines when the ranks
  // fit one batch), then their lines loaded together, then each line's flags checked (a line
  // not there yet is waited for), in order. 8 ranks at once on a GPU; one on the host, whose
  // CPU overlaps the loads by itself. The arrays are indexed by unrolled loops only, so they
  // stay in registers.
  constexpr int kFoldPeers = kStridedShares ? 8 : 1;
  const LLLine* base[kFoldPeers] = {};  // the peer's slot (null: this rank, or past the last)
  uint32_t recvFlag[kFoldPeers] = {};
  auto readSteps = [&](int r0) {
    BRAID_UNROLL
    for (int k = 0; k < kFoldPeers; ++k) {
      const int r = r0 + k;
      const bool peerHere = r < n && r != me;
      const uint64_t step = peerHere ? *w.peerRecv[r].step : 0;
      base[k] = peerHere ? w.peerRecv[r].ll + (step % kSteps) * w.peerRecv[r].llStepLines : nullptr;
      recvFlag[k] = static_cast<uint32_t>(step + 1);
    }
  };
  if (n <= kFoldPeers) readSteps(0);
  // A pass folds kFoldLines of the thread's lines: one on a GPU (a thread's loads are in flight
  // across the ranks), 4 on the host (a CPU pipelines the loads of a rank's neighbouring lines,
  // and the pass's bookkeeping is shared by them).
  constexpr int kFoldLines = kStridedShares ? 1 : 4;
  const Share share = shareOf(lines, g.size(), g.rank(), 1);
  for (uint64_t first = share.begin; first < share.end && !aborted; first += kFoldLines * share.stride) {
    int here = 0;  // (the pass's lines: first, first + stride, ...)
    BRAID_UNROLL
    for (int i = 0; i < kFoldLines; ++i) here += first + i * share.stride < share.end;
    alignas(8) T acc[kFoldLines][kPerLine] = {};
    for (int r0 = 0; r0 < n && !aborted; r0 += kFoldPeers) {
      if (n > kFoldPeers) readSteps(r0);
      const int batch = n - r0 < kFoldPeers ? n - r0 : kFoldPeers;  // (the ranks of this batch)
      uint64_t lo[kFoldLines][kFoldPeers] = {}, hi[kFoldLines][kFoldPeers] = {};
      BRAID_UNROLL
      for (int k = 0; k < kFoldPeers; ++k) {
        if (k >= batch) break;
        BRAID_UNROLL
        for (int i = 0; i < kFoldLines; ++i) {
          if (i < here && base[k] != nullptr) loadPair(base[k] + first + i * share.stride, &lo[i][k], &hi[i][k]);
        }
      }
      BRAID_UNROLL
      for (int k = 0; k < kFoldPeers; ++k) {
        const int r = r0 + k;
        if (k >= batch || aborted) break;
        BRAID_UNROLL
        for (int i = 0; i < kFoldLines; ++i) {
          if (i >= here || aborted) break;
          const uint64_t l = first + i * share.stride;
          alignas(8) T vals[kPerLine] = {};
          if (r == me) {
            mine(l, vals);
          } else {
            uint32_t payload[2];
            if (!unpackLLLine(lo[i][k], hi[i][k], recvFlag[k], payload)) {
              const ConnHandle& c = w.peerRecv[r];  // (not there yet: wait for it)
              aborted = readLLLineWaiting(base[k] + l, recvFlag[k], payload, g.rank() == 0 ? w.status : nullptr, &c,
                                          *c.step, abortFlag) == WaitResult::kAborted;
            }
            memcpy(vals, payload, sizeof(payload));
          }
          for (uint64_t j = 0; j < kPerLine; ++j) acc[i][j] = r == 0 ? vals[j] : red.reduce(acc[i][j], vals[j]);
        }
      }
    }
    for (int i = 0; i < here && !aborted; ++i) {
      const uint64_t l = first + i * share.stride;
      for (uint64_t j = 0; j < kPerLine && l * kPerLine + j < count; ++j) {
        out[l * kPerLine + j] = Red::kHasPost ? red.post(acc[i][j]) : acc[i][j];
      }
    }
  }
  if (g.syncAny(aborted)) return false;
  // Free the slots read, thread k the k-th rank after me's, all at once: a fence (the group's
  // reads of them before it, by the barrier above), then the head relaxed.
  if (servesPeer) fenceRelease();
  for (int k = g.rank(); k < n - 1; k += g.size()) {
    const ConnHandle& c = w.peerRecv[(me + 1 + k) % n];
    *c.step += 1;
    storeRelaxed(c.head, *c.step);
  }
  g.sync();  // (the steps as their threads left them, for whatever the group runs next)
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
