// The CUDA entry: binds the single-source kernels to a thread block. Compiled only by nvcc
// (through the generated cuda_*.cu units, which also hold the host functions that launch them:
// see src/runtime/cuda/kernel_table.h).
//
// Launch arguments (the channels' work, their ring handles, the point-to-point operations)
// come in the kernel's parameters where they fit (kernels/launch_args.h: the launcher passes a
// null works or ops pointer then), else in host memory the GPU maps. Either way each block
// first copies its share into shared memory, all threads together (from mapped memory: one
// round trip over the bus instead of one per field), and runs from there.
#pragma once

#include "kernels/algorithms/send_recv.h"
#include "kernels/collectives.h"
#include "kernels/launch_args.h"
#include "kernels/launch_sizes.h"

namespace braid::kernels {

/// The thread block as a Group: rank() is the thread, sync() the block barrier.
class BlockGroup {
 public:
  __device__ int rank() const { return threadIdx.x; }
  __device__ int size() const { return blockDim.x; }
  __device__ void sync() { __syncthreads(); }
  /// The block barrier, returning to every thread whether any passed true (the block agrees
  /// that the operation stops).
  __device__ bool syncAny(bool flag) { return __syncthreads_or(flag) != 0; }
  /// LL128 (primitives.h, stepLL128): the threads that share a 128-byte line, 16 bytes each,
  /// eight consecutive lanes of one warp.
  static constexpr int kLineLanes = 8;
  /// The line's lanes: a barrier that orders their memory accesses.
  __device__ void lineSync() { __syncwarp(lineMask()); }
  /// The line's lanes: whether any of them passed true.
  __device__ bool lineAny(bool flag) { return __any_sync(lineMask(), flag) != 0; }

 private:
  __device__ static unsigned lineMask() { return 0xffu << (threadIdx.x & 24u); }
};

/// All threads of the block: copies `bytes` (a multiple of 8) from src to dst, a word a thread.
__device__ inline void copyWords(void* dst, const void* src, size_t bytes) {
  uint64_t* d = static_cast<uint64_t*>(dst);
  const uint64_t* s = static_cast<const uint64_t*>(src);
  for (size_t i = threadIdx.x; i < bytes / 8; i += blockDim.x) d[i] = s[i];
}
static_assert(sizeof(CollWork) % 8 == 0 && sizeof(RingHandle) % 8 == 0 && sizeof(ConnHandle) % 8 == 0 &&
              sizeof(PeerOp) % 8 == 0);

/// Thread 0 of the block marks its channel's status as running launch `seq` (the watchdog's
/// view of kernels in flight: src/runtime/cuda, CudaDevice::busy), with the time, in one
/// 16-byte store with no fence: the status is host memory, and nothing the host reads depends
/// on the mark's order against the kernel's other stores (busy() only keeps the watchdog's
/// clocks going; the times are read once the launch is done). It also clears the block's
/// AbortWatch (the barrier before the block's first wait follows).
__device__ inline void markStarted(ChannelStatus* status, uint64_t seq) {
  if (threadIdx.x == 0) {
    resetAbortWatch();
    storePair(&status->startedSeq, seq, globalTimer());
  }
}
/// All threads: the block has ended launch `seq` on its channel (called on every way out), the
/// same way: one 16-byte store, no fence.
__device__ inline void markDone(ChannelStatus* status, uint64_t seq) {
  __syncthreads();
  if (threadIdx.x == 0) storePair(&status->doneSeq, seq, globalTimer());
}

/// One block per channel, looping over that channel's work items (works[i * gridDim.x +
/// blockIdx.x]): through run(), either runReduction for element type T and op Red or runCopy.
/// packed: the launch's arguments when they came in its parameters (launch_args.h), else null.
template <typename Run>
__device__ void channelLoop(const CollWork* works, int nWorks, const RingHandle* rings, const uint32_t* abortFlag,
                            const unsigned char* packed, Run run) {
  __shared__ RingHandle ring;
  __shared__ CollWork work;
  extern __shared__ ConnHandle peers[];  // collectiveSharedBytes: peerSend then peerRecv
  copyWords(&ring, rings + blockIdx.x, sizeof(RingHandle));
  __syncthreads();
  const int nRanks = ring.nRanks;
  BlockGroup g;
  for (int i = 0; i < nWorks; ++i) {
    const CollWork* given = works + i * gridDim.x + blockIdx.x;
    copyWords(&work, given, sizeof(CollWork));
    __syncthreads();
    if (packed != nullptr && threadIdx.x == 0) {  // (offsets into the parameters: pointers)
      work.peerSend = inlinePeers(packed, work.peerSend);
      work.peerRecv = inlinePeers(packed, work.peerRecv);
    }
    __syncthreads();
    if (work.peerSend != nullptr && nRanks <= kSharedPeerRanks) {
      copyWords(peers, work.peerSend, nRanks * sizeof(ConnHandle));
      copyWords(peers + nRanks, work.peerRecv, nRanks * sizeof(ConnHandle));
      __syncthreads();
      if (threadIdx.x == 0) {
        work.peerSend = peers;
        work.peerRecv = peers + nRanks;
      }
      __syncthreads();
    }
    const bool ok = run(g, work, ring, abortFlag);
    // (work is rewritten next; and some algorithms end in thread 0 alone: the block leaves together)
    if (__syncthreads_or(!ok)) return;
  }
}

/// The reducing collectives (AllReduce, ReduceScatter, Reduce) for one type and op.
template <typename T, typename Red>
__global__ void __launch_bounds__(kMaxBlockThreads) collectiveKernel(const CollWork* works, int nWorks, const RingHandle* rings, const uint32_t* abortFlag,
                                                                     ChannelStatus* statuses, uint64_t seq,
                                                                     const __grid_constant__ InlineArgs args) {
  markStarted(statuses + blockIdx.x, seq);
  const unsigned char* packed = works == nullptr ? args.bytes : nullptr;
  if (packed != nullptr) {
    works = inlineWorks(packed);
    rings = inlineRings(packed, nWorks * static_cast<int>(gridDim.x));
  }
  channelLoop(works, nWorks, rings, abortFlag, packed, [](BlockGroup& g, const CollWork& w, const RingHandle& r,
                                                          const uint32_t* a) { return runReduction<T, Red, BlockGroup>(g, w, r, a); });
  markDone(statuses + blockIdx.x, seq);
}

/// The copying collectives (AllGather, Broadcast, AlltoAll), on bytes.
template <typename Unused = void>
__global__ void __launch_bounds__(kMaxBlockThreads) copyKernel(const CollWork* works, int nWorks, const RingHandle* rings, const uint32_t* abortFlag,
                                                               ChannelStatus* statuses, uint64_t seq,
                                                               const __grid_constant__ InlineArgs args) {
  markStarted(statuses + blockIdx.x, seq);
  const unsigned char* packed = works == nullptr ? args.bytes : nullptr;
  if (packed != nullptr) {
    works = inlineWorks(packed);
    rings = inlineRings(packed, nWorks * static_cast<int>(gridDim.x));
  }
  channelLoop(works, nWorks, rings, abortFlag, packed, [](BlockGroup& g, const CollWork& w, const RingHandle& r,
                                                          const uint32_t* a) { return runCopy<BlockGroup>(g, w, r, a); });
  markDone(statuses + blockIdx.x, seq);
}

/// All threads of the block: a direct operation's next move, or an offering one's until the
/// offer is settled (send_recv.h), as tryPeerStep's: a receiver posts its offer (then waits for
/// tail if direct); a direct sender waits for the offer, then the block copies the whole
/// message into the receiver's buffer; an offering sender waits for the offer, looks its key up
/// among the buffers it maps (a thread an entry: they are host memory) and copies the message
/// there when it can. Returns, to every thread, whether anything happened. op changes only
/// after the block's first barrier here: every thread has chosen this path by then.
__device__ inline bool blockDirectStep(PeerOp& op) {
  __shared__ char* target;
  __shared__ uint64_t bytes;
  __shared__ uint64_t key;
  __shared__ int found;
  __shared__ int state;  // 0: nothing yet; 1: the message moves; 2: the offer went out, or was read in vain; 3: look key up
  if (threadIdx.x == 0) {
    state = 0;
    if (!op.isSend && !op.offered) {
      postOffer(op);
      state = 2;
    } else if (!op.isSend) {
      state = loadAcquire(op.conn.tail) > op.step ? 1 : 0;
    } else if (op.direct) {
      target = directTarget(op, &bytes);
      state = target != nullptr ? 1 : 0;
    } else if (loadAcquire(op.conn.offer + kOfferTag) == op.step + 1) {
      key = loadRelaxed(op.conn.offer + kOfferKey);
      found = -1;
      state = 3;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0 && state == 2) op.offered = true;
  if (state == 3) {
    const uint64_t k = key;
    for (uint32_t i = threadIdx.x; i < op.nMapped && k != 0; i += blockDim.x)
      if (op.mapped[i].key == k) found = static_cast<int>(i);  // (keys are unique: one writer at most)
    __syncthreads();
    if (threadIdx.x == 0) {
      target = offeredTarget(op, found >= 0 ? &op.mapped[found] : nullptr);
      bytes = op.bytes;
      op.offered = true;
      state = target != nullptr ? 1 : 2;
    }
    __syncthreads();
  }
  const int s = state;
  char* const to = target;
  const uint64_t n = bytes;
  __syncthreads();  // (the shared words are rewritten by the next call)
  if (s != 1) return s == 2;
  if (op.isSend) copyStrided(op.buffer, to, nullptr, n, threadIdx.x, blockDim.x);
  __syncthreads();  // the whole message, before tail says so
  if (threadIdx.x == 0) finishDirect(op);
  __syncthreads();
  return true;
}

/// All threads of the block: moves the next slice of `op` (in shared memory) when its
/// connection allows, as tryPeerStep does with one thread; returns, to every thread, whether it
/// moved. Simple slices move as 16-byte words by stride, LL lines a thread each. A Simple step of
/// the wrong size (checkStepBytes, network connections) is never taken: `status` records it.
__device__ inline bool blockPeerStep(PeerOp& op, ChannelStatus* status) {
  if (op.direct || (op.offers && !op.offered && (!op.isSend || op.nMapped > 0))) return blockDirectStep(op);
  const uint64_t slice = peerSliceBytes(op);
  const uint64_t n = op.bytes - op.done < slice ? op.bytes - op.done : slice;
  const uint64_t slot = op.step % kSteps;
  const bool ll = op.proto == Proto::kLL;
  const uint64_t lines = (n + 7) / 8;
  LLLine* llLines = op.conn.ll + slot * op.conn.llStepLines;
  char* simple = simpleSlot(op.conn, op.step);
  const uint32_t flag = static_cast<uint32_t>(op.step + 1);
  char* user = op.buffer + op.done;
  bool ready = true;
  __shared__ bool whole;  // an offering receiver's first step: the sender wrote the whole message into the buffer
  if (op.isSend || !ll) {  // credits (sender) or a filled slot (Simple receiver): thread 0 asks
    if (threadIdx.x == 0) {
      ready = op.isSend ? loadAcquire(op.conn.head) + kSteps > op.step : loadAcquire(op.conn.tail) > op.step;
      whole = ready && !op.isSend && op.offers && arrivedDirect(op);
      if (ready && !op.isSend && !whole && checkStepBytes(op.conn, op.step, n, status) != WaitResult::kReady) ready = false;
    }
  } else {  // an LL receiver: every line of the slice has arrived (each thread checks its own)
    uint32_t payload[2];
    for (uint64_t l = threadIdx.x; l < lines && ready; l += blockDim.x) ready = readLLLine(llLines + l, flag, payload);
  }
  if (!__syncthreads_and(ready)) return false;
  if (!op.isSend && !ll) {
    const bool done = whole;
    __syncthreads();  // (whole is rewritten by the next call; op changes only after every thread read it)
    if (done) {
      if (threadIdx.x == 0) finishDirect(op);
      __syncthreads();
      return true;
    }
  }
  if (!ll) {
    copyStrided(op.isSend ? user : simple, op.isSend ? simple : user, nullptr, n, threadIdx.x, blockDim.x);
  } else {
    for (uint64_t l = threadIdx.x; l < lines; l += blockDim.x) {
      const uint64_t here = n - l * 8 < 8 ? n - l * 8 : 8;
      uint32_t payload[2] = {0, 0};
      if (op.isSend) {
        memcpy(payload, user + l * 8, here);
        writeLLLine(llLines + l, payload, flag);
      } else {
        readLLLine(llLines + l, flag, payload);
        memcpy(user + l * 8, payload, here);
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    if (op.isSend) {
      publishStep(op.conn, op.step, stepInfo(ll ? lines * sizeof(LLLine) : n, ll));
    } else {
      storeRelease(op.conn.head, op.step + 1);
    }
    op.done += n;
    ++op.step;
  }
  __syncthreads();
  return true;
}

/// One block of the launch's gridDim.x. The operations of a group's sends and receives, grouped
/// by connection: queue q is ops[starts[q], starts[q + 1]), to run in that order, each op
/// starting from the step the one before it left on the connection (*conn.step). Queue q is
/// block q mod gridDim.x's (a connection is in one queue, so no two blocks share one; the host
/// keeps the grid within the blocks that stay resident with the other ranks'). The block passes
/// over its queues in turn, moving one slice of each queue's current operation where its
/// connection allows, until each of them is done or the communicator is aborted.
/// status->progress counts the slices the block moved.
__device__ inline void peerLoop(const PeerOp* given, const int* givenStarts, int nQueues, const uint32_t* abortFlag,
                                ChannelStatus* status) {
  extern __shared__ uint64_t peerShared[];  // peerSharedBytes: the operations, then the starts
  __shared__ int current;
  __shared__ int nOps;
  if (threadIdx.x == 0) nOps = givenStarts[nQueues];
  __syncthreads();
  PeerOp* ops = reinterpret_cast<PeerOp*>(peerShared);
  int* starts = reinterpret_cast<int*>(ops + nOps);
  copyWords(ops, given, static_cast<size_t>(nOps) * sizeof(PeerOp));
  for (int q = threadIdx.x; q <= nQueues; q += blockDim.x) starts[q] = givenStarts[q];
  __syncthreads();
  for (uint32_t spins = 0;;) {
    bool all = true, moved = false;  // the same in every thread
    int firstPending = -1;           // the first unfinished operation of the pass (for the watchdog)
    for (int q = blockIdx.x; q < nQueues; q += gridDim.x) {
      if (threadIdx.x == 0) {  // the queue's first unfinished operation, started from the connection's step
        current = -1;
        for (int i = starts[q]; i < starts[q + 1] && current < 0; ++i) {
          PeerOp& op = ops[i];
          if (op.done >= op.bytes) continue;  // finished (or empty)
          if (!op.isStarted) {
            op.step = *op.conn.step;
            op.isStarted = true;
          }
          current = i;
        }
      }
      __syncthreads();
      const int i = current;
      __syncthreads();  // (current is rewritten for the next queue)
      if (i < 0) continue;
      all = false;
      if (firstPending < 0) firstPending = i;
      if (!blockPeerStep(ops[i], status)) continue;
      moved = true;
      if (threadIdx.x == 0 && ops[i].done >= ops[i].bytes) *ops[i].conn.step = ops[i].step;  // for the next one
    }
    if (all) return;
    spins = moved ? 0 : spins + 1;
    if (threadIdx.x == 0) reportPeerPass(status, moved, spins, firstPending >= 0 ? &ops[firstPending] : nullptr);
    // Every thread leaves together (the next pass syncs again).
    if (__syncthreads_or(threadIdx.x == 0 && abortRaised(abortFlag))) return;
    backOff(spins);
  }
}

/// The group's sends and receives (peerLoop), a block per queue up to the grid, each block
/// marking its channel's status (block b: statuses[b]).
template <typename Unused = void>
__global__ void __launch_bounds__(kMaxBlockThreads) peerKernel(const PeerOp* given, const int* givenStarts, int nQueues, const uint32_t* abortFlag,
                                                               ChannelStatus* statuses, uint64_t seq,
                                                               const __grid_constant__ InlineArgs args) {
  markStarted(statuses + blockIdx.x, seq);
  if (given == nullptr) {  // (in the parameters: launch_args.h)
    givenStarts = inlineStarts(args.bytes);
    given = inlineOps(args.bytes, nQueues);
  }
  peerLoop(given, givenStarts, nQueues, abortFlag, statuses + blockIdx.x);
  markDone(statuses + blockIdx.x, seq);
}

}  // namespace braid::kernels
