// The CUDA entry: binds the single-source kernels to a thread block. Compiled only by nvcc
// (through the generated cuda_*.cu units, which also hold the host functions that launch them:
// see src/runtime/cuda/kernel_table.h).
//
// Launch arguments (the channels' work, their ring handles, the point-to-point operations) sit
// in host memory the GPU maps: each block first copies its share into shared memory, all
// threads together (one round trip over the bus instead of one per field), and runs from there.
#pragma once

#include "kernels/algorithms/send_recv.h"
#include "kernels/collectives.h"
#include "kernels/launch_sizes.h"

namespace braid::kernels {

/// The thread block as a Group: rank() is the thread, sync() the block barrier.
class BlockGroup {
 public:
  __device__ explicit BlockGroup(int* abortedShared) : aborted_(abortedShared) {}
  __device__ int rank() const { return threadIdx.x; }
  __device__ int size() const { return blockDim.x; }
  __device__ void sync() { __syncthreads(); }
  __device__ void setAborted() { *aborted_ = 1; }
  __device__ bool aborted() const { return *const_cast<volatile int*>(aborted_) != 0; }

 private:
  int* aborted_;
};

/// All threads of the block: copies `bytes` (a multiple of 8) from src to dst, a word a thread.
__device__ inline void copyWords(void* dst, const void* src, size_t bytes) {
  uint64_t* d = static_cast<uint64_t*>(dst);
  const uint64_t* s = static_cast<const uint64_t*>(src);
  for (size_t i = threadIdx.x; i < bytes / 8; i += blockDim.x) d[i] = s[i];
}
static_assert(sizeof(CollWork) % 8 == 0 && sizeof(RingHandle) % 8 == 0 && sizeof(ConnHandle) % 8 == 0 &&
              sizeof(PeerOp) % 8 == 0);

/// One block per channel, looping over that channel's work items (works[i * gridDim.x +
/// blockIdx.x]): through run(), either runReduction for element type T and op Red or runCopy.
template <typename Run>
__device__ void channelLoop(const CollWork* works, int nWorks, const RingHandle* rings, const uint32_t* abortFlag,
                            Run run) {
  __shared__ int aborted;
  __shared__ RingHandle ring;
  __shared__ CollWork work;
  extern __shared__ ConnHandle peers[];  // collectiveSharedBytes: peerSend then peerRecv
  if (threadIdx.x == 0) aborted = 0;
  copyWords(&ring, rings + blockIdx.x, sizeof(RingHandle));
  __syncthreads();
  const int nRanks = ring.nRanks;
  BlockGroup g(&aborted);
  for (int i = 0; i < nWorks; ++i) {
    const CollWork* given = works + i * gridDim.x + blockIdx.x;
    copyWords(&work, given, sizeof(CollWork));
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
    __syncthreads();  // (work is rewritten next)
    if (!ok) return;
  }
}

/// The reducing collectives (AllReduce, ReduceScatter, Reduce) for one type and op.
template <typename T, typename Red>
__global__ void __launch_bounds__(kMaxBlockThreads) collectiveKernel(const CollWork* works, int nWorks, const RingHandle* rings, const uint32_t* abortFlag) {
  channelLoop(works, nWorks, rings, abortFlag, [](BlockGroup& g, const CollWork& w, const RingHandle& r,
                                                  const uint32_t* a) { return runReduction<T, Red, BlockGroup>(g, w, r, a); });
}

/// The copying collectives (AllGather, Broadcast, AlltoAll), on bytes.
template <typename Unused = void>
__global__ void __launch_bounds__(kMaxBlockThreads) copyKernel(const CollWork* works, int nWorks, const RingHandle* rings, const uint32_t* abortFlag) {
  channelLoop(works, nWorks, rings, abortFlag, [](BlockGroup& g, const CollWork& w, const RingHandle& r,
                                                  const uint32_t* a) { return runCopy<BlockGroup>(g, w, r, a); });
}

/// One block. The operations of a group's sends and receives, grouped by connection: queue q is
/// ops[starts[q], starts[q + 1]), to run in that order, each op starting from the step the one
/// before it left on the connection (*conn.step). Thread t progresses queues t, t + blockDim.x,
/// ... together, until every queue is done or the communicator is aborted.
template <typename Unused = void>
__global__ void peerKernel(const PeerOp* given, const int* starts, int nQueues, const uint32_t* abortFlag) {
  extern __shared__ PeerOp ops[];
  copyWords(ops, given, static_cast<size_t>(starts[nQueues]) * sizeof(PeerOp));
  __syncthreads();
  for (uint32_t spins = 0;;) {
    bool all = true, moved = false;
    for (int q = threadIdx.x; q < nQueues; q += blockDim.x) {
      for (int i = starts[q]; i < starts[q + 1]; ++i) {
        PeerOp& op = ops[i];
        if (op.done >= op.bytes) continue;  // finished (or empty)
        if (!op.isStarted) {
          op.step = *op.conn.step;  // after the queue's previous operation
          op.isStarted = true;
        }
        moved = tryPeerStep(op) || moved;
        if (op.done >= op.bytes) {
          *op.conn.step = op.step;
          moved = true;
          continue;
        }
        all = false;
        break;  // this queue waits on op
      }
    }
    if (__syncthreads_and(all)) return;
    // Every thread leaves together (the next pass syncs again).
    if (__syncthreads_or(threadIdx.x == 0 && loadRelaxed(const_cast<uint32_t*>(abortFlag)) != 0)) return;
    spins = moved ? 0 : spins + 1;
    backOff(spins);
  }
}

}  // namespace braid::kernels
