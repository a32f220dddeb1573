// Tree AllReduce: NCCL's double binary tree across nodes, a chain within each node
// (topology/trees.h builds them; channel c runs tree c mod 2 over its share of the data, so
// two channels use both trees, each carrying half).
//
// The channel's range is cut into slices (one FIFO step each) that flow up the tree, then
// down it. Up: for every slice a rank receives its children's partial sums one after the
// other, adding the first to its own input and each later one to the running sum (kept in
// its output buffer), and sends the total to its parent; a leaf sends its input. The root
// adds the last child's sum, applies the op's post step and has the slice's final value.
// Down: every rank receives the final slice from its parent, writes it to its output and
// sends it to its first child, then copies it to each other child. Slices pipeline through
// the FIFOs' 8 slots, so a rank waits only for its neighbours' slots, never for the whole
// tree: 2 x depth hops of latency, and each rank sends and receives every byte about twice.
// Every rank's result is the root's bits, so all ranks agree exactly.
#pragma once

#include "kernels/primitives.h"

namespace braid::kernels {

/// All threads of the group. Returns false when the communicator was aborted.
template <typename T, typename Red, typename Group>
BRAID_OUTLINE bool allReduceTree(Group& g, const CollWork& w, const RingHandle& ring, const uint32_t* abortFlag) {
  (void)ring;
  const T* in = advance(static_cast<const T*>(w.sendbuff), w.channelOffset);
  T* out = advance(static_cast<T*>(w.recvbuff), w.channelOffset);
  const uint64_t total = w.channelCount;
  const TreeHandle& t = w.tree;
  const int nd = t.nChildren;
  const bool root = t.parent < 0;
  if (root && nd == 0) {  // one rank
    Primitives<T, Red, Group> local(g, nullptr, nullptr, w.proto, Red(w.opArgs), abortFlag);
    return total == 0 || local.step(kInput | kPost | kOutput, in, out, total);
  }
  auto child = [&](int i, const ConnHandle* conns) { return i < nd ? &conns[t.children[i]] : nullptr; };
  auto minSlice = [total](Primitives<T, Red, Group>* const* p, int n) {
    uint64_t s = ~uint64_t(0);
    for (int i = 0; i < n; ++i) s = s < p[i]->sliceElements() ? s : p[i]->sliceElements();
    return pipelineSlice<T>(s, total);
  };

  // Up: stage i receives child i (none for a leaf's one stage); the last stage sends to the parent.
  const int upStages = nd > 0 ? nd : 1;
  auto upSend = [&](int i) { return i == upStages - 1 && !root ? &w.peerSend[t.parent] : nullptr; };
  Primitives<T, Red, Group> u0(g, upSend(0), child(0, w.peerRecv), w.proto, Red(w.opArgs), abortFlag, &w);
  Primitives<T, Red, Group> u1(g, upSend(1), child(1, w.peerRecv), w.proto, Red(w.opArgs), abortFlag, &w);
  Primitives<T, Red, Group> u2(g, upSend(2), child(2, w.peerRecv), w.proto, Red(w.opArgs), abortFlag, &w);
  Primitives<T, Red, Group>* const up[3] = {&u0, &u1, &u2};
  uint32_t upFlags[3];
  for (int i = 0; i < upStages; ++i) {
    upFlags[i] = (i == 0 ? kInput : kPartial) | (i < nd ? kRecv : 0u);
    upFlags[i] |= i < upStages - 1 ? kOutput : root ? kPost | kOutput : kSend;
  }
  bool ok = forEachSlice(total, minSlice(up, upStages), [&](uint64_t at, uint64_t n) {
    for (int i = 0; i < upStages; ++i)
      if (!up[i]->step(upFlags[i], i == 0 ? advance(in, at) : advance(out, at), advance(out, at), n)) return false;
    return true;
  });
  for (int i = 0; i < upStages; ++i) up[i]->finish();
  if (!ok) return false;

  // Down: a non-root receives from its parent, writes and passes on to child 0; every other
  // child gets a copy of the output.
  const int downStages = root ? nd : (nd > 0 ? nd : 1);
  auto downRecv = [&](int i) { return i == 0 && !root ? &w.peerRecv[t.parent] : nullptr; };
  Primitives<T, Red, Group> d0(g, child(0, w.peerSend), downRecv(0), w.proto, Red(w.opArgs), abortFlag, &w);
  Primitives<T, Red, Group> d1(g, child(1, w.peerSend), downRecv(1), w.proto, Red(w.opArgs), abortFlag, &w);
  Primitives<T, Red, Group> d2(g, child(2, w.peerSend), downRecv(2), w.proto, Red(w.opArgs), abortFlag, &w);
  Primitives<T, Red, Group>* const down[3] = {&d0, &d1, &d2};
  uint32_t downFlags[3];
  for (int i = 0; i < downStages; ++i) {
    downFlags[i] = (i == 0 && !root ? kRecv | kOutput : kPartial) | (i < nd ? kSend : 0u);
  }
  ok = forEachSlice(total, minSlice(down, downStages), [&](uint64_t at, uint64_t n) {
    for (int i = 0; i < downStages; ++i)
      if (!down[i]->step(downFlags[i], advance(out, at), advance(out, at), n)) return false;
    return true;
  });
  for (int i = 0; i < downStages; ++i) down[i]->finish();
  return ok;
}

}  // namespace braid::kernels
