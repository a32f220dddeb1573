// The gloo column of perf/compare_allreduce.sh: gloo's allreduce (float, sum, its default
// algorithm, the TCP transport over loopback, which is what PyTorch's gloo backend runs for CPU
// tensors on one machine), timed the way all_reduce_perf times Braid and mpi_allreduce.c times
// Open MPI: a warm-up, then the average of N calls, averaged over ranks. Rank 0 prints
// "size time_us busbw_GBps" lines. The script starts one process a rank; the ranks meet through
// files in STORE_DIR (gloo's FileStore).
//
//   gloo_allreduce RANK NRANKS STORE_DIR SIZE ITERS [SIZE ITERS ...]
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

namespace {

// One allreduce of `count` floats from `in` into `out` on `context`.
void allreduceOnce(const std::shared_ptr<gloo::Context>& context, float* in, float* out, size_t count) {
  gloo::AllreduceOptions options(context);
  options.setInput(in, count);
  options.setOutput(out, count);
  options.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
  gloo::allreduce(options);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6 || (argc - 4) % 2 != 0) {
    std::fprintf(stderr, "usage: %s RANK NRANKS STORE_DIR SIZE ITERS [SIZE ITERS ...]\n", argv[0]);
    return 2;
  }
  const int rank = std::atoi(argv[1]);
  const int nRanks = std::atoi(argv[2]);
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(argv[3]);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, nRanks);
  context->connectFullMesh(store, device);

  for (int a = 4; a + 1 < argc; a += 2) {
    const size_t bytes = std::strtoull(argv[a], nullptr, 10);
    const int iters = std::atoi(argv[a + 1]);
    const size_t count = bytes / sizeof(float);
    std::vector<float> in(count > 0 ? count : 1), out(count > 0 ? count : 1);
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(rank + i % 7);
    for (int i = 0; i < 5; ++i) allreduceOnce(context, in.data(), out.data(), count);
    gloo::BarrierOptions barrier(context);
    gloo::barrier(barrier);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) allreduceOnce(context, in.data(), out.data(), count);
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / iters;
    // Every rank's average, averaged (as the other two columns do).
    double sum = us;
    gloo::AllreduceOptions average(context);
    average.setInput(&sum, 1);
    average.setOutput(&sum, 1);
    average.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<double>));
    gloo::allreduce(average);
    us = sum / nRanks;
    // A result check: element i is the sum over ranks r of (r + i % 7).
    const float want1 = static_cast<float>(nRanks * (nRanks - 1) / 2 + nRanks * 1);
    if (count > 1 && out[1] != want1) {
      std::fprintf(stderr, "gloo_allreduce: rank %d got %g at element 1, want %g\n", rank, out[1], want1);
      return 1;
    }
    if (rank == 0) std::printf("%zu %.3f %.3f\n", bytes, us, bytes / us / 1000.0 * 2.0 * (nRanks - 1) / nRanks);
  }
  return 0;
}
