// Hier2D AllReduce: the ranks as a grid (topology/grid.h: rows are the nodes when there are
// several of equal size), each row and each column a ring over point-to-point connections.
//
// The channel's range is cut into loops of C chunks (C ranks per row), one FIFO step or less
// each. In every loop: a reduce-scatter around the row leaves chunk j, summed over the row, in
// the output of the row's j-th rank (C-1 steps); that rank's column all-reduces it, a ring
// all-reduce of the chunk's R sub-chunks over the R rows (2(R-1) steps, the op's post step at
// the end of its reduce-scatter); an all-gather around the row then gives every rank every
// chunk (C-1 steps). 2(C-1) + 2(R-1) steps per loop instead of the ring's 2(RC-1), the ring's
// bytes, and only the column steps cross nodes. Each chunk's final value is computed by one
// rank and copied, so all ranks agree exactly.
#pragma once

#include "kernels/algorithms/ring_steps.h"

namespace braid::kernels {

/// All threads of the group, on this channel's slice of the data. Returns false when the
/// communicator was aborted.
template <typename T, typename Red, typename Group>
BRAID_INLINE bool allReduceHier2D(Group& g, const CollWork& w, const RingHandle& ring, const uint32_t* abortFlag) {
  (void)ring;
  const T* in = advance(static_cast<const T*>(w.sendbuff), w.channelOffset);
  T* out = advance(static_cast<T*>(w.recvbuff), w.channelOffset);
  const uint64_t total = w.channelCount;
  const GridHandle& grid = w.grid;
  const int cols = grid.rowSize, rows = grid.colSize;
  Primitives<T, Red, Group> local(g, nullptr, nullptr, w.proto, Red(w.opArgs), abortFlag);
  if (cols == 1 && rows == 1) return total == 0 || local.step(kInput | kPost | kOutput, in, out, total);
  Primitives<T, Red, Group> row(g, cols > 1 ? &w.peerSend[grid.rowNext] : nullptr,
                                cols > 1 ? &w.peerRecv[grid.rowPrev] : nullptr, w.proto, Red(w.opArgs), abortFlag, &w);
  Primitives<T, Red, Group> col(g, rows > 1 ? &w.peerSend[grid.colNext] : nullptr,
                                rows > 1 ? &w.peerRecv[grid.colPrev] : nullptr, w.proto, Red(w.opArgs), abortFlag, &w);
  const uint64_t rowSlice = row.sliceElements(), colSlice = col.sliceElements();
  // (whole 512-byte runs, so that the column's chunks below fit one step: ringChunk)
  const uint64_t chunk = wholeRuns<T>(rowSlice < colSlice ? rowSlice : colSlice);
  bool ok = true;
  for (uint64_t base = 0; base < total && ok;) {
    const RingChunks at{base, ringChunk<T>(chunk, total - base, cols), total};
    base += cols * at.per;
    uint64_t mineOff;
    const uint64_t mineCount = at(grid.rowIndex, &mineOff);
    // The row's reduce-scatter: chunk rowIndex, summed over the row, into the output.
    ok = cols > 1 ? ringReduceSteps(row, cols, grid.rowIndex, kInput, in, out, kOutput, at)
                  : local.step(kInput | kOutput, advance(in, mineOff), advance(out, mineOff), mineCount);
    // The column's all-reduce of that chunk, in place.
    T* mine = advance(out, mineOff);
    if (rows > 1) {
      const RingChunks sub{0, ringChunk<T>(chunk, mineCount, rows), mineCount};
      ok = ok && ringReduceSteps(col, rows, grid.colIndex, kPartial, mine, mine, kPost | kOutput | kSend, sub) &&
           ringGatherSteps(col, rows, grid.colIndex, mine, sub);
    } else {
      ok = ok && local.step(kPartial | kPost | kOutput, mine, mine, mineCount);
    }
    // The row's all-gather of the final chunks.
    if (cols > 1) ok = ok && row.step(kPartial | kSend, mine, nullptr, mineCount) && ringGatherSteps(row, cols, grid.rowIndex, out, at);
  }
  row.finish();
  col.finish();
  return ok;
}

}  // namespace braid::kernels
