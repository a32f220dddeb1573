// The gpu suite's one-sided case: ncclPutSignal, ncclSignal and ncclWaitSignal on the CUDA
// backend, two ranks (threads) of device 0 with windows on ncclMemAlloc memory. Puts of 0, 1,
// odd and large sizes land exactly; a put carries what a cudaMemsetAsync before it on the
// stream wrote; ncclWaitSignal returns to the host before its signal is sent; an abort ends a
// stream's wait. With BRAID_ONE_SIDED_NET=1 (the gpu-one-sided-net test) every put and signal
// goes over TCP links as across hosts: staged on the stream, landed through a host mirror.
// Plain C++ as gpu_test.cc: exit 0 passed, 1 failed, 77 skipped (no device).
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "gpu_checks.h"

namespace {

unsigned char pattern(int from, size_t i) { return static_cast<unsigned char>(from * 37 + i * 7 + 1); }

void putsLandExactly() {
  const int n = 2;
  const size_t slot = (size_t(4) << 20) + 3;
  std::vector<ncclComm_t> comms(n);
  std::vector<int> devices(n, 0);
  NCCL_OK(ncclCommInitAll(comms.data(), n, devices.data()));
  std::vector<cudaStream_t> streams(n);
  std::vector<void*> windowMemory(n), source(n);
  std::vector<ncclWindow_t> windows(n);
  NCCL_OK(ncclGroupStart());  // (registration is collective: the ranks are threads of this one)
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
    NCCL_OK(ncclMemAlloc(&windowMemory[r], slot));
    NCCL_OK(ncclMemAlloc(&source[r], slot));
    std::vector<unsigned char> host(slot);
    for (size_t i = 0; i < slot; ++i) host[i] = pattern(r, i);
    CUDA_OK(cudaMemcpy(source[r], host.data(), slot, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(windowMemory[r], 0, slot));
    NCCL_OK(ncclCommWindowRegister(comms[r], windowMemory[r], slot, &windows[r], NCCL_WIN_DEFAULT));
  }
  NCCL_OK(ncclGroupEnd());
  CUDA_OK(cudaDeviceSynchronize());
  for (size_t bytes : {size_t(0), size_t(1), size_t(4093), slot}) {
    for (int r = 0; r < n; ++r) CUDA_OK(cudaMemsetAsync(windowMemory[r], 0, slot, streams[r]));
    for (int r = 0; r < n; ++r) CUDA_OK(cudaStreamSynchronize(streams[r]));
    for (int r = 0; r < n; ++r) {
      NCCL_OK(ncclPutSignal(source[r], bytes, ncclUint8, 1 - r, windows[r], 0, 0, 0, 0, comms[r], streams[r]));
      ncclWaitSignalDesc_t d = {1, 1 - r, 0, 0};
      NCCL_OK(ncclWaitSignal(1, &d, comms[r], streams[r]));
    }
    for (int r = 0; r < n; ++r) CUDA_OK(cudaStreamSynchronize(streams[r]));
    for (int r = 0; r < n; ++r) {
      std::vector<unsigned char> got(slot);
      CUDA_OK(cudaMemcpy(got.data(), windowMemory[r], slot, cudaMemcpyDeviceToHost));
      size_t wrong = 0;
      for (size_t i = 0; i < slot; ++i) wrong += got[i] != (i < bytes ? pattern(1 - r, i) : 0);
      EXPECT(wrong == 0, "a put of %zu bytes into rank %d: %zu bytes wrong", bytes, r, wrong);
    }
  }
  // A put after a cudaMemsetAsync on the same stream carries what the memset wrote.
  CUDA_OK(cudaMemsetAsync(source[0], 0x5a, 4096, streams[0]));
  NCCL_OK(ncclPutSignal(source[0], 4096, ncclUint8, 1, windows[0], 0, 0, 0, 0, comms[0], streams[0]));
  // Rank 1's wait returns before rank 0 signals; its stream waits (and the copy after it too).
  ncclWaitSignalDesc_t two = {2, 0, 0, 0};
  NCCL_OK(ncclWaitSignal(1, &two, comms[1], streams[1]));
  std::vector<unsigned char> after(4096, 0);
  CUDA_OK(cudaMemcpyAsync(after.data(), windowMemory[1], 4096, cudaMemcpyDeviceToHost, streams[1]));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT(cudaStreamQuery(streams[1]) == cudaErrorNotReady, "rank 1's stream ran past a wait for a signal not sent");
  NCCL_OK(ncclSignal(1, 0, 0, 0, comms[0], streams[0]));
  CUDA_OK(cudaStreamSynchronize(streams[1]));
  size_t wrong = 0;
  for (unsigned char b : after) wrong += b != 0x5a;
  EXPECT(wrong == 0, "the put after a memset on the stream: %zu bytes wrong", wrong);
  for (int r = 0; r < n; ++r) {
    NCCL_OK(ncclCommWindowDeregister(comms[r], windows[r]));
    NCCL_OK(ncclCommDestroy(comms[r]));
    NCCL_OK(ncclMemFree(windowMemory[r]));
    NCCL_OK(ncclMemFree(source[r]));
    CUDA_OK(cudaStreamDestroy(streams[r]));
  }
}

void abortEndsWait() {
  ncclComm_t comm = nullptr;
  int device = 0;
  NCCL_OK(ncclCommInitAll(&comm, 1, &device));
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  void* memory = nullptr;
  NCCL_OK(ncclMemAlloc(&memory, 4096));
  ncclWindow_t win = nullptr;
  NCCL_OK(ncclCommWindowRegister(comm, memory, 4096, &win, NCCL_WIN_DEFAULT));
  ncclWaitSignalDesc_t d = {1, 0, 0, 0};  // (a signal nobody sends)
  NCCL_OK(ncclWaitSignal(1, &d, comm, stream));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT(cudaStreamQuery(stream) == cudaErrorNotReady, "the stream ran past a wait for a signal not sent");
  const auto start = std::chrono::steady_clock::now();
  NCCL_OK(ncclCommAbort(comm));
  CUDA_OK(cudaStreamSynchronize(stream));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT(s < 10, "the abort and the stream's end took %.1f s", s);
  NCCL_OK(ncclMemFree(memory));
  CUDA_OK(cudaStreamDestroy(stream));
}

}  // namespace

int main() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("skipped: no CUDA device (or no driver) is visible to this process\n");
    return 77;
  }
  putsLandExactly();
  abortEndsWait();
  std::printf("one-sided: %s\n", failures == 0 ? "passed" : "FAILED");
  return failures == 0 ? 0 : 1;
}
