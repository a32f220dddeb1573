// The host functions that launch the CUDA kernels, written by kernels/generate.py into the
// build folder (one per element type, the copying and point-to-point kernels, the dispatch).
#pragma once

#include <cuda_runtime.h>

#include "kernels/algorithms/send_recv.h"
#include "kernels/launch_args.h"
#include "kernels/launch_sizes.h"
#include "kernels/work.h"

namespace braid::runtime::cuda {

/// One launch of a collective: a block per channel, the channels' work and ring handles
/// (host memory the GPU maps; both null: packed in params->args, kernels/launch_args.h), and the
/// dynamic shared memory collectiveSharedBytes says.
struct CollLaunch {
  dim3 grid, block;
  size_t sharedBytes;
  cudaStream_t stream;
  const kernels::CollWork* works;
  int nWorks;
  const kernels::RingHandle* rings;
  const uint32_t* abortFlag;
  kernels::ChannelStatus* statuses;  ///< block c marks statuses[c] started and done with seq
  uint64_t seq;                      ///< the launch's number (never 0)
  kernels::KernelParams* params;     ///< the parameter block the launch fills and passes (never null)
  size_t argBytes;                   ///< the bytes of params->args in use (0: none, works and rings given)
};

/// One launch of a group's sends and receives: queue q is ops[starts[q], starts[q + 1]), run
/// by block q mod grid.x (ops and starts null: packed in params->args).
struct PeerLaunch {
  dim3 grid;
  dim3 block;
  size_t sharedBytes;
  cudaStream_t stream;
  const kernels::PeerOp* ops;
  const int* starts;
  int nQueues;
  const uint32_t* abortFlag;
  kernels::ChannelStatus* statuses;  ///< block b marks statuses[b] started and done with seq; its progress counts the steps b moved
  uint64_t seq;                      ///< the launch's number (never 0)
  kernels::KernelParams* params;     ///< the parameter block the launch fills and passes (never null)
  size_t argBytes;                   ///< the bytes of params->args in use (0: none, ops and starts given)
};

/// Launches `kernel` (a collective or the point-to-point kernel) with l's parameters written
/// into l.params, passing only the bytes in use (kernel_launch.cc).
cudaError_t launchWithParams(const void* kernel, const CollLaunch& l);
cudaError_t launchWithParams(const void* kernel, const PeerLaunch& l);

/// The reduction kernel of (RedKind, ncclDataType_t); cudaErrorNotSupported where
/// -Dcuda-only-funcs left it out, else the launch's own result.
cudaError_t launchReduction(int red, int dtype, const CollLaunch& l);
/// The copying collectives' kernel (any element type).
cudaError_t launchCopy(const CollLaunch& l);
/// The point-to-point kernel.
cudaError_t launchPeers(const PeerLaunch& l);
/// How many blocks of the point-to-point kernel, `threads` threads and `sharedBytes` of dynamic
/// shared memory each, one multiprocessor holds at once.
cudaError_t peerBlocksPerSm(int threads, size_t sharedBytes, int* blocks);
/// What loading the kernels tells about them (preloadKernels).
struct KernelFacts {
  size_t maxLocalBytes = 0;  ///< the most local memory a thread of any kernel uses
  /// The fewest blocks of kMaxBlockThreads threads (with the most dynamic shared memory a
  /// collective launch asks) that any kernel fits on one multiprocessor at once; -1 if none
  /// was measured.
  int minBlocksPerSm = -1;
};

/// Loads every instantiated kernel now (cudaFuncGetAttributes; lazy loading would do it at a
/// kernel's first launch, which can wait for the whole device, other ranks' spinning kernels
/// included) and fills facts.
cudaError_t preloadKernels(KernelFacts* facts);

/// Used by the generated preload functions: loads one kernel, noting its local memory and how
/// many of its blocks one multiprocessor holds.
inline cudaError_t preloadOne(const void* kernel, KernelFacts* facts) {
  cudaFuncAttributes a{};
  cudaError_t err = cudaFuncGetAttributes(&a, kernel);
  if (err != cudaSuccess) return err;
  if (a.localSizeBytes > facts->maxLocalBytes) facts->maxLocalBytes = a.localSizeBytes;
  int blocks = 0;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kernels::kMaxBlockThreads,
                                                      kernels::collectiveSharedBytes(kernels::kSharedPeerRanks));
  if (err != cudaSuccess) return err;
  if (facts->minBlocksPerSm < 0 || blocks < facts->minBlocksPerSm) facts->minBlocksPerSm = blocks;
  return cudaSuccess;
}

/// The filter the CUDA units were generated with ("" for all).
extern const char* const kCudaOnlyFuncs;

}  // namespace braid::runtime::cuda
