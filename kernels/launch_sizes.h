// What a CUDA launch of the kernels in kernels/cuda_entry.cuh needs beyond its arguments:
// dynamic shared memory. Shared by the launcher (host) and the kernels (device).
#pragma once

#include "kernels/algorithms/send_recv.h"
#include "kernels/work.h"

namespace braid::kernels {

/// Most threads a block of the collective kernels runs (NCCL_NTHREADS is at most 512): the
/// kernels are compiled for it (__launch_bounds__), which caps their registers at 128 a thread.
constexpr int kMaxBlockThreads = 512;

/// Most ranks whose connection handles a block copies into shared memory (2 x 96 bytes each);
/// beyond it the kernels read them where the launch put them.
constexpr int kSharedPeerRanks = 128;

/// Dynamic shared memory of a collective launch over nRanks whose work uses peer connections.
BRAID_HOST_DEVICE inline size_t collectiveSharedBytes(int nRanks) {
  return nRanks <= kSharedPeerRanks ? 2 * static_cast<size_t>(nRanks) * sizeof(ConnHandle) : 0;
}

/// Dynamic shared memory of a point-to-point launch of nOps operations in nQueues queues (the
/// operations, then the queues' starts).
BRAID_HOST_DEVICE inline size_t peerSharedBytes(int nOps, int nQueues) {
  return static_cast<size_t>(nOps) * sizeof(PeerOp) + (static_cast<size_t>(nQueues) + 1) * sizeof(int);
}

}  // namespace braid::kernels
