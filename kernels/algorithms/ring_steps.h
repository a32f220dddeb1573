// The two halves of a ring pass over n chunks, shared by the ring AllReduce and Hier2D (whose
// rows and columns are rings over point-to-point connections). chunk(c, &offset) gives chunk
// c's first element and returns its count (0 past the end); me is this rank's ring position.
#pragma once

#include "kernels/primitives.h"

namespace braid::kernels {

/// Reduce-scatter: n-1 steps; this rank sends chunk me-1 first, then for each later chunk
/// receives a partial sum, adds its own part and passes it on; the last step receives chunk
/// me's sum of every other rank, adds its part and applies `last` (kOutput, with kPost and
/// kSend when the gather follows at once). `mine` is kInput (the op's pre step applied) or
/// kPartial (the part is already a partial result), read from `in`; `out` receives chunk me.
template <typename T, typename Prims, typename Chunk>
BRAID_INLINE bool ringReduceSteps(Prims& p, int n, int me, uint32_t mine, const T* in, T* out, uint32_t last, Chunk chunk) {
  uint64_t off;
  uint64_t cnt = chunk((me + n - 1) % n, &off);
  bool ok = p.step(mine | kSend, advance(in, off), nullptr, cnt);
  for (int k = 2; k < n && ok; ++k) {
    cnt = chunk((me + n - k) % n, &off);
    ok = p.step(kRecv | mine | kSend, advance(in, off), nullptr, cnt);
  }
  cnt = chunk(me, &off);
  return ok && p.step(kRecv | mine | last, advance(in, off), advance(out, off), cnt);
}

/// All-gather, once this rank's chunk me has been sent: n-1 receives, each written to `out`
/// and forwarded but the last (chunk me+1).
template <typename T, typename Prims, typename Chunk>
BRAID_INLINE bool ringGatherSteps(Prims& p, int n, int me, T* out, Chunk chunk) {
  uint64_t off;
  bool ok = true;
  for (int k = 1; k < n - 1 && ok; ++k) {
    const uint64_t cnt = chunk((me + n - k) % n, &off);
    ok = p.step(kRecv | kOutput | kSend, nullptr, advance(out, off), cnt);
  }
  const uint64_t cnt = chunk((me + 1) % n, &off);
  return ok && p.step(kRecv | kOutput, nullptr, advance(out, off), cnt);
}

/// Elements of one ring chunk: a pass over `rest` elements on n ranks cuts it into n chunks of
/// rest/n rounded up to whole 512-byte runs, so that every chunk starts 512 bytes apart from
/// the channel's start (the GPU's 16-byte path then takes whole chunks: reduce_copy.h), and at
/// most `slice` (one FIFO step) cut down to whole runs. The last chunks may be shorter or
/// empty. Both ends compute it from the same numbers.
template <typename T>
constexpr uint64_t kChunkRun = 512 / sizeof(T);
template <typename T>
BRAID_INLINE uint64_t wholeRuns(uint64_t slice) {
  return slice >= kChunkRun<T> ? slice / kChunkRun<T> * kChunkRun<T> : slice;
}
template <typename T>
BRAID_INLINE uint64_t ringChunk(uint64_t slice, uint64_t rest, int n) {
  uint64_t per = (rest + n - 1) / n;
  per = (per + kChunkRun<T> - 1) / kChunkRun<T> * kChunkRun<T>;
  const uint64_t most = wholeRuns<T>(slice);
  return per < most ? per : most;
}

/// Cuts [base, total) into n chunks of `per` (the last ones shorter or empty): the chunk
/// function both halves take.
struct RingChunks {
  uint64_t base, per, total;
  BRAID_INLINE uint64_t operator()(int c, uint64_t* offset) const {
    const uint64_t begin = base + c * per;
    *offset = begin;
    if (begin >= total) return 0;
    return total - begin < per ? total - begin : per;
  }
};

}  // namespace braid::kernels
