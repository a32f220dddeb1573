// The CUDA entry of the one-sided operations (kernels/one_sided.h): one thread each, launched
// by src/runtime/cuda/one_sided_launch.h's functions.
#include "kernels/one_sided.h"
#include "runtime/cuda/one_sided_launch.h"

namespace braid::kernels {

/// Thread 0 of a one-thread launch: the signal of a put (after its copy on the stream) or of
/// ncclSignal.
__global__ void signalKernel(uint64_t* counter) { signalArrive(counter); }

/// Thread 0 of a one-thread launch: the stream's wait of ncclWaitSignal. (One thread: the
/// counters are host memory, and each look is a read across the bus.) __grid_constant__: the
/// waits are read where the launch's parameters lie, not copied to the thread's stack first.
__global__ void waitSignalsKernel(const __grid_constant__ SignalWaits waits, const uint32_t* abortFlag) {
  waitSignals(waits.waits, waits.count, abortFlag);
}

}  // namespace braid::kernels

namespace braid::runtime::cuda {

cudaError_t launchSignal(uint64_t* counter, cudaStream_t stream) {
  cudaGetLastError();  // (the launch's own error only)
  kernels::signalKernel<<<1, 1, 0, stream>>>(counter);
  return cudaGetLastError();
}

cudaError_t launchWaitSignals(const kernels::SignalWaits& waits, const uint32_t* abortFlag, cudaStream_t stream) {
  cudaGetLastError();
  kernels::waitSignalsKernel<<<1, 1, 0, stream>>>(waits, abortFlag);
  return cudaGetLastError();
}

cudaError_t preloadOneSided(size_t* maxLocalBytes) {
  for (const void* kernel : {reinterpret_cast<const void*>(&kernels::signalKernel),
                             reinterpret_cast<const void*>(&kernels::waitSignalsKernel)}) {
    cudaFuncAttributes a{};
    const cudaError_t err = cudaFuncGetAttributes(&a, kernel);
    if (err != cudaSuccess) return err;
    if (a.localSizeBytes > *maxLocalBytes) *maxLocalBytes = a.localSizeBytes;
  }
  return cudaSuccess;
}

}  // namespace braid::runtime::cuda
