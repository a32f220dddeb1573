// What the CUDA backend's files share: CUDA errors as Braid's, the current device while a call
// needs it, and pinned host memory the GPU maps at the same address.
#pragma once

#include <cuda_runtime.h>

#include <cstring>

#include "core/status.h"
#include "runtime/cuda/cumem.h"

namespace braid::runtime::cuda {

/// A driver function looked up through the runtime, or null.
template <typename F>
F driverFunction(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
  const cudaError_t err = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found);
#else
  const cudaError_t err = cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &found);
#endif
  if (err != cudaSuccess || found != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<F>(fn);
}

/// Throws ncclUnhandledCudaError naming the call and CUDA's error.
inline void check(cudaError_t err, const char* call) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // (a launch error is also the thread's last error: clear it)
  fail(ncclUnhandledCudaError, "%s failed: %s (%s)", call, cudaGetErrorName(err), cudaGetErrorString(err));
}
#define BRAID_CUDA_CHECK(call) check((call), #call)

/// Makes `device` current on this thread while it lives, then restores the caller's (a thread
/// that had no CUDA context keeps `device`: see threadHasContext).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : device_(device), hadContext_(threadHasContext()) {
    BRAID_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device_ || !hadContext_) BRAID_CUDA_CHECK(cudaSetDevice(device_));
  }
  ~DeviceGuard() {
    if (hadContext_ && previous_ != device_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int device_;
  bool hadContext_;
  int previous_ = -1;
};

/// Runs release() with `device` current, then the caller's device again; never throws (for
/// releasing memory, where an error has nowhere to go).
template <typename Release>
void quietlyOn(int device, Release release) {
  const bool hadContext = threadHasContext();
  int previous = -1;
  cudaGetDevice(&previous);
  if (previous != device || !hadContext) cudaSetDevice(device);
  release();
  if (hadContext && previous != device) cudaSetDevice(previous);
}

/// Throws unless the GPU reaches host memory p at the same address (unified addressing).
inline void requireSameAddress(void* p, const char* what) {
  void* d = nullptr;
  BRAID_CUDA_CHECK(cudaHostGetDevicePointer(&d, p, 0));
  if (d != p) {
    fail(ncclSystemError, "CUDA maps %s %p at device address %p; Braid needs the same address on both sides "
                          "(unified addressing)", what, p, d);
  }
}

/// Zeroed pinned host memory the GPU maps at the same address.
inline void* allocateMapped(size_t bytes, const char* what) {
  void* p = nullptr;
  BRAID_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
  std::memset(p, 0, bytes);
  try {
    requireSameAddress(p, what);
  } catch (...) {
    cudaFreeHost(p);
    throw;
  }
  return p;
}

}  // namespace braid::runtime::cuda
