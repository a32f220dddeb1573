// What the gpu suite's programs (gpu_test.cc, gpu_one_sided.cc) check with: plain C++, no
// Catch2. EXPECT counts a failure and goes on; CUDA_OK and NCCL_OK end the program on an error,
// naming the call and the error's text.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>

namespace {

int failures = 0;

#define EXPECT(cond, ...)                                        \
  do {                                                           \
    if (!(cond)) {                                               \
      std::fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                         \
      std::fprintf(stderr, "\n");                                \
      ++failures;                                                \
    }                                                            \
  } while (0)

#define CUDA_OK(call)                                                                            \
  do {                                                                                           \
    const cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

#define NCCL_OK(call)                                                                                          \
  do {                                                                                                         \
    const ncclResult_t r_ = (call);                                                                            \
    if (r_ != ncclSuccess) {                                                                                   \
      std::fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #call, ncclGetErrorString(r_),   \
                   ncclGetLastError(nullptr));                                                                 \
      std::exit(1);                                                                                            \
    }                                                                                                          \
  } while (0)

}  // namespace
