// The CUDA entry: binds the single-source kernels to a thread block. Compiled only by nvcc
// (through the generated cuda_*.cu units); nothing launches these kernels until the CUDA
// backend exists, but every kernel translation unit is compiled for -Dcuda-arch so that work
// starts from code that compiles.
#pragma once

#include "kernels/algorithms/send_recv.h"
#include "kernels/collectives.h"

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

/// One block per channel, looping over that channel's work items: through run(), either
/// runReduction for element type T and op Red or runCopy.
template <typename Run>
__device__ void channelLoop(const CollWork* works, int nWorks, const RingHandle* rings, const uint32_t* abortFlag,
                            Run run) {
  __shared__ int aborted;
  if (threadIdx.x == 0) aborted = 0;
  __syncthreads();
  BlockGroup g(&aborted);
  for (int i = 0; i < nWorks; ++i) {
    if (!run(g, works[i * gridDim.x + blockIdx.x], rings[blockIdx.x], abortFlag)) return;
  }
}

/// The reducing collectives (AllReduce, ReduceScatter, Reduce) for one type and op.
template <typename T, typename Red>
__global__ void collectiveKernel(const CollWork* works, int nWorks, const RingHandle* rings, const uint32_t* abortFlag) {
  channelLoop(works, nWorks, rings, abortFlag, [](BlockGroup& g, const CollWork& w, const RingHandle& r,
                                                  const uint32_t* a) { return runReduction<T, Red, BlockGroup>(g, w, r, a); });
}

/// The copying collectives (AllGather, Broadcast), on bytes.
template <typename Unused = void>
__global__ void copyKernel(const CollWork* works, int nWorks, const RingHandle* rings, const uint32_t* abortFlag) {
  channelLoop(works, nWorks, rings, abortFlag, [](BlockGroup& g, const CollWork& w, const RingHandle& r,
                                                  const uint32_t* a) { return runCopy<BlockGroup>(g, w, r, a); });
}

/// Thread 0 of each block progresses one block's share of send/recv operations.
template <typename Unused = void>
__global__ void peerKernel(PeerOp* ops, int nOps, const uint32_t* abortFlag) {
  if (threadIdx.x != 0) return;
  for (uint32_t spins = 0;;) {
    bool all = true, moved = false;
    for (int i = blockIdx.x; i < nOps; i += gridDim.x) {
      moved = tryPeerStep(ops[i]) || moved;
      all = all && ops[i].done >= ops[i].bytes;
    }
    if (all || loadRelaxed(const_cast<uint32_t*>(abortFlag)) != 0) return;
    spins = moved ? 0 : spins + 1;
    backOff(spins);
  }
}

}  // namespace braid::kernels
