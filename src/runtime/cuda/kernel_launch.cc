// The kernels' launches through the driver (cuLaunchKernel with the parameters as one buffer),
// as NCCL launches its own: the buffer passed is only as long as what the launch uses, so a
// launch of one channel copies its few hundred bytes of arguments, not the whole 32 KiB block
// the kernels declare (kernels/launch_args.h), and a driver older than 12.1 is never given more
// than 4 KiB (CudaDevice's limit).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "kernels/launch_args.h"
#include "runtime/cuda/cuda_support.h"
#include "runtime/cuda/kernel_table.h"

namespace braid::runtime::cuda {

namespace {

template <typename P>
uint64_t slotOf(P* p) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p));
}
uint64_t slotOf(int v) { return static_cast<uint32_t>(v); }  // (an int: the low half of its slot)

/// Launches `kernel` with the six first parameters `slots` written into params, then only the
/// bytes in use passed.
cudaError_t launch(const void* kernel, dim3 grid, dim3 block, size_t shared, cudaStream_t stream,
                   kernels::KernelParams* params, size_t argBytes, std::initializer_list<uint64_t> slots) {
  std::copy(slots.begin(), slots.end(), params->slot);
  using Launch = decltype(&cuLaunchKernel);
  static const Launch launchKernel = driverFunction<Launch>("cuLaunchKernel");
  if (launchKernel == nullptr) return cudaErrorSymbolNotFound;
  cudaFunction_t fn = nullptr;
  cudaError_t err = cudaGetFuncBySymbol(&fn, kernel);
  if (err != cudaSuccess) return err;
  size_t bytes = kernels::kParamPrefixBytes + kernels::roundUp16(argBytes);
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, params, CU_LAUNCH_PARAM_BUFFER_SIZE, &bytes, CU_LAUNCH_PARAM_END};
  const CUresult r = launchKernel(reinterpret_cast<CUfunction>(fn), grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                  static_cast<unsigned>(shared), reinterpret_cast<CUstream>(stream), nullptr, extra);
  // (the driver's result as the runtime's: the numbers of the two enums agree)
  return static_cast<cudaError_t>(r);
}

}  // namespace

cudaError_t launchWithParams(const void* kernel, const CollLaunch& l) {
  return launch(kernel, l.grid, l.block, l.sharedBytes, l.stream, l.params, l.argBytes,
                {slotOf(l.works), slotOf(l.nWorks), slotOf(l.rings), slotOf(l.abortFlag), slotOf(l.statuses), l.seq});
}

cudaError_t launchWithParams(const void* kernel, const PeerLaunch& l) {
  return launch(kernel, l.grid, l.block, l.sharedBytes, l.stream, l.params, l.argBytes,
                {slotOf(l.ops), slotOf(l.starts), slotOf(l.nQueues), slotOf(l.abortFlag), slotOf(l.statuses), l.seq});
}

}  // namespace braid::runtime::cuda
