// ncclCommSuspend, ncclCommResume and ncclCommMemStats on the CUDA backend's path, on a GPU
// played by the CPU (emulated_device.h): the device memory MemStats counts is what a suspend
// gives back (the emulated device's count of live "physical" bytes drops by exactly that), the
// FIFOs and scratch come back at the same addresses, the FIFOs with their counters (a resume
// that lost them hangs the next operation), and collectives and sends after
// each of repeated cycles are exact, with LL and Simple. 1, 2 and 3 ranks, as threads (whose
// FIFOs are this process's own, all given back) and as processes (whose FIFO slots the peer
// process maps: they stay, as MemStats says).
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "datapath/data_path.h"
#include "harness/ranks.h"
#include "integration/emulated_device.h"
#include "integration/test_env.h"
#include "plan/algo_proto.h"

using namespace braid;
using braid::test::expect;

namespace {

/// A stream of the rank's own (the pointer only has to differ between ranks of one process).
cudaStream_t streamOf(int rank) { return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(0x1000 + 16 * rank)); }

float input(int rank, size_t i) { return static_cast<float>((rank * 7 + i) % 5); }  // exact sums in float

uint64_t stat(ncclComm_t comm, ncclCommMemStat_t which) {
  uint64_t value = ~uint64_t(0);
  EXPECT_OK(ncclCommMemStats(comm, which, &value));
  return value;
}

/// Waits until `ranks` ranks of this process have arrived (a process's ranks: every rank as
/// threads, one as processes), so that the device memory count is read while none of them
/// allocates or gives back. Reusable: each use waits on its own generation.
class LocalBarrier {
 public:
  void wait(int ranks) {
    const int generation = generation_.load();
    if (arrived_.fetch_add(1) + 1 == ranks) {
      arrived_ = 0;
      ++generation_;
      return;
    }
    while (generation_.load() == generation) std::this_thread::yield();
  }

 private:
  std::atomic<int> arrived_{0};
  std::atomic<int> generation_{0};
};

/// An AllReduce of count floats, enqueued and waited for; checks every element.
void allReduceExact(ncclComm_t comm, int rank, int n, size_t count, const char* when) {
  std::vector<float> in(count), out(count, -1.0f);
  for (size_t i = 0; i < count; ++i) in[i] = input(rank, i);
  EXPECT_OK(ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comm, streamOf(rank)));
  comm->dataPath().synchronize();
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int q = 0; q < n; ++q) want += input(q, i);
    if (out[i] != want) expect(false, std::string("AllReduce ") + when + ": element " + std::to_string(i));
  }
}

/// AlltoAll by Bruck's algorithm from now on (the other functions as they were).
void useBruck(ncclComm_t comm) {
  comm->dataPath().limits().mask.algos[static_cast<int>(plan::EnvFunc::kAlltoAll)] = 1u << static_cast<int>(plan::EnvAlgo::kBruck);
}

/// An AlltoAll of count floats a peer by Bruck's algorithm (which needs scratch); checks it.
void alltoAllExact(ncclComm_t comm, int rank, int n, size_t count, const char* when) {
  std::vector<float> in(count * n), out(count * n, -1.0f);
  for (size_t i = 0; i < in.size(); ++i) in[i] = input(rank, i);
  useBruck(comm);
  EXPECT_OK(ncclAlltoAll(in.data(), out.data(), count, ncclFloat, comm, streamOf(rank)));
  comm->dataPath().synchronize();
  for (size_t i = 0; i < count * n; ++i) {
    if (out[i] != input(static_cast<int>(i / count), rank * count + i % count)) {
      expect(false, std::string("AlltoAll ") + when + ": element " + std::to_string(i));
    }
  }
}

/// Each rank sends count ints to the next and receives from the previous; checks them.
void ringSendRecvExact(ncclComm_t comm, int rank, int n, size_t count, const char* when) {
  if (n == 1) return;
  std::vector<int32_t> in(count), out(count, -1);
  for (size_t i = 0; i < count; ++i) in[i] = rank * 1000003 + static_cast<int>(i);
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclSend(in.data(), count, ncclInt32, (rank + 1) % n, comm, streamOf(rank)));
  EXPECT_OK(ncclRecv(out.data(), count, ncclInt32, (rank + n - 1) % n, comm, streamOf(rank)));
  EXPECT_OK(ncclGroupEnd());
  comm->dataPath().synchronize();
  const int from = (rank + n - 1) % n;
  for (size_t i = 0; i < count; ++i) {
    if (out[i] != from * 1000003 + static_cast<int>(i)) {
      expect(false, std::string("received ") + when + ": element " + std::to_string(i));
    }
  }
}

constexpr size_t kLarge = size_t(1) << 20;  // 4 MiB of floats: Simple, every slot of the ring's FIFOs

/// Everything a cycle's checks run: Simple and LL AllReduces, Bruck's AlltoAll, sends.
void runExact(ncclComm_t comm, int rank, int n, const char* when) {
  allReduceExact(comm, rank, n, kLarge, when);
  allReduceExact(comm, rank, n, 1000, when);  // (a small one: LL)
  alltoAllExact(comm, rank, n, 1000, when);
  ringSendRecvExact(comm, rank, n, kLarge / 4 + 3, when);
  ringSendRecvExact(comm, rank, n, 100, when);
}

}  // namespace

TEST_CASE("emulated GPU: a suspend gives back the device memory MemStats says, resume maps it again, and 3 cycles "
          "run exact", "[integration][emulated][suspend]") {
  test::EmulatedDeviceScope emulated;
  for (int n : {1, 2, 3}) {
    INFO(n << " ranks");
    static LocalBarrier barrier;
    static std::atomic<int64_t> suspendableHere{0};
    CHECK(test::withCommunicators(n, [n](int rank, ncclComm_t comm, bool threads) {
      const int here = threads ? n : 1;  // this process's ranks
      runExact(comm, rank, n, "before any suspend");
      for (int cycle = 0; cycle < 3; ++cycle) {
        const uint64_t releasable = stat(comm, ncclStatGpuMemSuspend);
        const uint64_t persistent = stat(comm, ncclStatGpuMemPersist);
        expect(stat(comm, ncclStatGpuMemTotal) == releasable + persistent, "total = suspendable + persistent");
        expect(stat(comm, ncclStatGpuMemSuspended) == 0, "not suspended");
        // Threads' FIFOs are this process's own memory: all of it goes. Processes' slots are
        // mapped by the peer process: they stay, and only the scratch goes.
        if (n > 1 && threads) expect(persistent == 0, "threads keep nothing: " + std::to_string(persistent));
        if (n > 1 && !threads) expect(persistent > 0, "processes keep the FIFO slots the peer maps");
        expect(releasable > 0, "Bruck's scratch at least is suspendable");
        suspendableHere += static_cast<int64_t>(releasable);
        barrier.wait(here);
        const int64_t before = test::EmulatedDevice::physicalBytes.load();
        barrier.wait(here);
        EXPECT_OK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
        expect(stat(comm, ncclStatGpuMemSuspended) == 1, "suspended");
        // (As NCCL's: what was given back still counts as suspendable, to come back at resume.)
        expect(stat(comm, ncclStatGpuMemPersist) == persistent, "what stays is unchanged while suspended");
        expect(stat(comm, ncclStatGpuMemSuspend) == releasable, "the suspendable bytes are unchanged while suspended");
        barrier.wait(here);
        const int64_t after = test::EmulatedDevice::physicalBytes.load();
        barrier.wait(here);  // (a resume maps memory again)
        if (cycle == 0 && rank == 0) {
          std::fprintf(stderr, "emulated suspend, %d ranks as %s: %lld bytes of device memory given back (%.1f MiB); "
                       "%.1f MiB stay a rank\n", n, threads ? "threads" : "processes",
                       static_cast<long long>(before - after), (before - after) / 1048576.0, persistent / 1048576.0);
        }
        expect(before - after == suspendableHere.load(),
               "device memory given back: " + std::to_string(before - after) + " bytes; MemStats said " +
                   std::to_string(suspendableHere.load()));
        float x = 1, y = 0;
        expect(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, streamOf(rank)) == ncclInvalidUsage &&
                   std::string(ncclGetLastError(comm)).find("is suspended") != std::string::npos,
               std::string("AllReduce while suspended is refused: ") + ncclGetLastError(comm));
        expect(ncclSend(&x, 1, ncclFloat, (rank + 1) % n, comm, streamOf(rank)) == ncclInvalidUsage,
               "a send while suspended is refused");
        EXPECT_OK(ncclCommResume(comm));
        expect(stat(comm, ncclStatGpuMemSuspended) == 0, "resumed");
        // The FIFOs and the scratch are mapped again, at their addresses (a graph captured
        // before would find them).
        barrier.wait(here);
        const int64_t resumed = test::EmulatedDevice::physicalBytes.load();
        expect(resumed == before, "after resume " + std::to_string(resumed) + " bytes of device memory; before the "
                                  "suspend " + std::to_string(before));
        expect(stat(comm, ncclStatGpuMemSuspend) == releasable, "the suspendable bytes are unchanged after resume");
        expect(stat(comm, ncclStatGpuMemPersist) == persistent, "what stays is unchanged after resume");
        barrier.wait(here);
        if (rank == 0 || !threads) suspendableHere = 0;
        barrier.wait(here);
        runExact(comm, rank, n, ("after resume " + std::to_string(cycle + 1)).c_str());
      }
    }) == "");
  }
}

TEST_CASE("emulated GPU: suspend waits for enqueued work before giving anything back", "[integration][emulated][suspend]") {
  test::EmulatedDeviceScope emulated;
  const int n = 3;
  CHECK(test::withCommunicators(n, [n](int rank, ncclComm_t comm, bool) {
    const size_t count = 1000;
    std::vector<float> in(count * n), out(count * n, -1.0f);
    for (size_t i = 0; i < in.size(); ++i) in[i] = input(rank, i);
    useBruck(comm);
    // Enqueued, not waited for: the suspend must wait for it (its FIFOs and scratch in use).
    EXPECT_OK(ncclAlltoAll(in.data(), out.data(), count, ncclFloat, comm, streamOf(rank)));
    EXPECT_OK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
    for (size_t i = 0; i < count * n; ++i) {
      if (out[i] != input(static_cast<int>(i / count), rank * count + i % count)) {
        expect(false, "AlltoAll enqueued before the suspend: element " + std::to_string(i));
      }
    }
    EXPECT_OK(ncclCommResume(comm));
    alltoAllExact(comm, rank, n, count, "after resume");
  }) == "");
}

TEST_CASE("emulated GPU: a communicator destroyed while suspended frees its device memory", "[integration][emulated][suspend]") {
  test::EmulatedDeviceScope emulated;
  const int64_t before = test::EmulatedDevice::physicalBytes.load();
  CHECK(test::runThreads(2, [id = [] {
          ncclUniqueId u;
          ncclGetUniqueId(&u);
          return u;
        }()](int rank) {
          ncclComm_t comm = nullptr;
          EXPECT_OK(ncclCommInitRank(&comm, 2, id, rank));
          runExact(comm, rank, 2, "before the suspend");
          EXPECT_OK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
          EXPECT_OK(ncclCommDestroy(comm));
        }) == "");
  CHECK(test::EmulatedDevice::physicalBytes.load() == before);
}
