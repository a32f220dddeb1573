// The launches of the one-sided operations' kernels (kernels/one_sided.h), compiled by nvcc in
// kernels/cuda_one_sided.cu and called by the CUDA device (cuda_device.cc).
#pragma once

#include <cuda_runtime.h>

#include "kernels/one_sided.h"

namespace braid::runtime::cuda {

/// Enqueues on `stream` one thread adding one to *counter (mapped host memory) with release
/// order; returns the launch's result.
cudaError_t launchSignal(uint64_t* counter, cudaStream_t stream);
/// Enqueues on `stream` one thread waiting for waits' counters, or for *abortFlag; returns
/// the launch's result.
cudaError_t launchWaitSignals(const kernels::SignalWaits& waits, const uint32_t* abortFlag, cudaStream_t stream);
/// Loads both kernels now (as preloadKernels does the others) and adds their local memory to
/// facts->maxLocalBytes.
cudaError_t preloadOneSided(size_t* maxLocalBytes);

}  // namespace braid::runtime::cuda
