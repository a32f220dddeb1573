#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "perf/perf_device.h"

namespace braid::perf::device {

namespace {
void check(cudaError_t err, const char* call) {
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "%s failed: %s (%s)\n", call, cudaGetErrorName(err), cudaGetErrorString(err));
  std::exit(1);
}
#define PERF_CUDA(call) check((call), #call)
}  // namespace

bool usable(const char** why) {
  const char* backend = std::getenv("BRAID_BACKEND");
  if (backend != nullptr && std::strcmp(backend, "host") == 0) {
    *why = "BRAID_BACKEND=host";
    return false;
  }
  // No CUDA call here: the tool forks its ranks after this, and CUDA does not survive a fork.
  if (access("/dev/nvidiactl", F_OK) != 0) {
    *why = "no NVIDIA driver (/dev/nvidiactl)";
    return false;
  }
  return true;
}

void select(int ordinal) { PERF_CUDA(cudaSetDevice(ordinal)); }

void* allocate(size_t bytes) {
  void* p = nullptr;
  PERF_CUDA(cudaMalloc(&p, bytes < 64 ? 64 : bytes));
  return p;
}

void release(void* p) { cudaFree(p); }
void toDevice(void* dst, const void* src, size_t bytes, void* stream) {
  PERF_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)));
  PERF_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}
void toHost(void* dst, const void* src, size_t bytes, void* stream) { toDevice(dst, src, bytes, stream); }

void* newStream() {
  cudaStream_t s = nullptr;
  PERF_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}
void deleteStream(void* stream) { cudaStreamDestroy(static_cast<cudaStream_t>(stream)); }
void synchronize(void* stream) { PERF_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(stream))); }

const char* name() {
  static cudaDeviceProp prop;
  int device = 0;
  cudaGetDevice(&device);
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "?";
  return prop.name;
}

double copyBandwidth(size_t bytes) {
  void* a = allocate(bytes);
  void* b = allocate(bytes);
  cudaEvent_t start, stop;
  PERF_CUDA(cudaEventCreate(&start));
  PERF_CUDA(cudaEventCreate(&stop));
  PERF_CUDA(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
  const int iters = 20;
  PERF_CUDA(cudaEventRecord(start));
  for (int i = 0; i < iters; ++i) PERF_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
  PERF_CUDA(cudaEventRecord(stop));
  PERF_CUDA(cudaEventSynchronize(stop));
  float ms = 0;
  PERF_CUDA(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  release(a);
  release(b);
  return ms > 0 ? static_cast<double>(bytes) * iters / (ms * 1e6) : 0;
}

}  // namespace braid::perf::device
