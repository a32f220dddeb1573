// What communicators cost in memory as ranks grow (issue 26): N thread ranks of this process
// touch their buffers first, then create their communicators and run every collective once at
// 8 bytes and once at SIZE; the growth of the process's resident memory (VmRSS) over the
// touched buffers, divided by N, is what a communicator costs a rank after that warm-up: its
// FIFOs where touched, its threads, its tables. Public API only; the host backend.
//
// Usage: comm_memory RANKS SIZE     SIZE in bytes (K, M suffixes), each rank's send and receive
// buffer; AllGather, ReduceScatter and AlltoAll move SIZE / RANKS per rank block, AllReduce,
// Broadcast, Reduce and Send/Recv (a ring: to rank + 1, from rank - 1) move SIZE.
// Prints one line: ranks, size, RSS after the buffers, after init, after the warm-up, and the
// growth per rank. NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ALLOC adds each rank's FIFO totals.
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

long residentKiB() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return -1;
}

size_t parseSize(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end != nullptr && (*end == 'K' || *end == 'k')) v *= 1024;
  if (end != nullptr && (*end == 'M' || *end == 'm')) v *= 1024 * 1024;
  if (end != nullptr && (*end == 'G' || *end == 'g')) v *= 1024.0 * 1024 * 1024;
  return static_cast<size_t>(v);
}

/// Every thread waits here until all have arrived; the sampler waits for the others, samples
/// while they are parked, then arrives and lets them go on.
class Phase {
 public:
  explicit Phase(int n) : n_(n) {}
  void waitForOthers() const {
    while (arrived_.load() != n_ - 1) std::this_thread::yield();
  }
  void arrive() {
    const int generation = generation_.load();
    if (arrived_.fetch_add(1) + 1 == n_) {
      arrived_.store(0);
      generation_.fetch_add(1);
    } else {
      while (generation_.load() == generation) std::this_thread::yield();
    }
  }

 private:
  int n_;
  std::atomic<int> arrived_{0};
  std::atomic<int> generation_{0};
};

#define CHECK(call)                                                                          \
  do {                                                                                       \
    const ncclResult_t r_ = (call);                                                          \
    if (r_ != ncclSuccess) {                                                                 \
      std::fprintf(stderr, "%s failed: %s (%s)\n", #call, ncclGetErrorString(r_), ncclGetLastError(nullptr)); \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s RANKS SIZE\n", argv[0]);
    return 2;
  }
  const int n = std::atoi(argv[1]);
  const size_t size = parseSize(argv[2]) / sizeof(float) * sizeof(float);
  if (n < 1 || size < sizeof(float) * static_cast<size_t>(n)) {
    std::fprintf(stderr, "RANKS must be >= 1 and SIZE at least 4 bytes a rank\n");
    return 2;
  }
  ncclUniqueId id;
  CHECK(ncclGetUniqueId(&id));
  std::vector<std::vector<float>> send(n), recv(n);
  for (int r = 0; r < n; ++r) {  // (touched: the baseline holds them)
    send[r].assign(size / sizeof(float), 1.0f);
    recv[r].assign(size / sizeof(float), 0.0f);
  }
  Phase phase(n + 1);
  std::vector<ncclComm_t> comms(n);
  std::vector<std::thread> threads;
  std::atomic<long> wrong{0};
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      phase.arrive();  // baseline sampled
      CHECK(ncclCommInitRank(&comms[r], n, id, r));
      phase.arrive();  // after init
      float* s = send[r].data();
      float* d = recv[r].data();
      for (size_t bytes : {size_t(8), size}) {
        const size_t count = bytes / sizeof(float), block = std::max<size_t>(count / n, 1);
        CHECK(ncclAllReduce(s, d, count, ncclFloat, ncclSum, comms[r], nullptr));
        if (d[0] != static_cast<float>(n)) wrong.fetch_add(1);
        CHECK(ncclAllGather(s, d, block, ncclFloat, comms[r], nullptr));
        CHECK(ncclReduceScatter(s, d, block, ncclFloat, ncclSum, comms[r], nullptr));
        CHECK(ncclBroadcast(s, d, count, ncclFloat, 0, comms[r], nullptr));
        CHECK(ncclReduce(s, d, count, ncclFloat, ncclSum, 0, comms[r], nullptr));
        CHECK(ncclAlltoAll(s, d, block, ncclFloat, comms[r], nullptr));
        CHECK(ncclGroupStart());
        CHECK(ncclSend(s, count, ncclFloat, (r + 1) % n, comms[r], nullptr));
        CHECK(ncclRecv(d, count, ncclFloat, (r + n - 1) % n, comms[r], nullptr));
        CHECK(ncclGroupEnd());
        if (d[0] != 1.0f) wrong.fetch_add(1);
      }
      phase.arrive();  // after the warm-up
      CHECK(ncclCommDestroy(comms[r]));
    });
  }
  auto sample = [&phase] {
    phase.waitForOthers();
    const long kib = residentKiB();
    phase.arrive();
    return kib;
  };
  const long base = sample();
  const long inited = sample();
  const long warm = sample();
  for (auto& t : threads) t.join();
  std::printf("ranks %d size %zu rss_buffers_kib %ld rss_init_kib %ld rss_warm_kib %ld init_per_rank_kib %.0f "
              "warm_per_rank_kib %.0f wrong %ld\n",
              n, size, base, inited, warm, double(inited - base) / n, double(warm - base) / n, wrong.load());
  return wrong.load() == 0 ? 0 : 1;
}
