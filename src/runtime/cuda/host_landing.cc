#include "runtime/cuda/host_landing.h"

#include <cuda_runtime.h>

#include <mutex>

#include "runtime/cuda/cuda_support.h"

namespace braid::runtime::cuda {

std::shared_ptr<char> allocatePinnedHost(size_t bytes) {
  void* p = nullptr;
  check(cudaHostAlloc(&p, bytes, cudaHostAllocPortable), "cudaHostAlloc (one-sided staging across hosts)");
  return std::shared_ptr<char>(static_cast<char*>(p), [](char* q) {
    cudaFreeHost(q);
    cudaGetLastError();  // (the process may be exiting: nothing to do about an error here)
  });
}

namespace {

/// Copies on a stream made with cudaStreamNonBlocking: neither the legacy default stream nor a
/// user's blocking stream (whose wait kernel may be waiting for this very copy's signal) orders
/// it. One copy at a time: the proxy thread is its only caller, a lock keeps others safe.
class StreamCopier final : public Device::HostCopier {
 public:
  explicit StreamCopier(int ordinal) : ordinal_(ordinal) {
    DeviceGuard guard(ordinal_);
    BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~StreamCopier() override {
    quietlyOn(ordinal_, [this] { cudaStreamDestroy(stream_); });
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceGuard guard(ordinal_);
    // (relaxed: a user capturing a graph in the global mode elsewhere must not see these calls
    // invalidate the capture; they touch no captured stream)
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_);
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream_);
    cudaThreadExchangeStreamCaptureMode(&mode);
    check(err, "cudaMemcpyAsync into a window (a put from another host)");
  }

 private:
  int ordinal_;
  cudaStream_t stream_ = nullptr;
  std::mutex mutex_;
};

}  // namespace

std::unique_ptr<Device::HostCopier> makeHostCopier(int ordinal) { return std::make_unique<StreamCopier>(ordinal); }

}  // namespace braid::runtime::cuda
