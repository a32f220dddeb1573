// ncclCommSuspend, ncclCommResume and ncclCommMemStats on the CUDA backend's path, on a GPU
// played by the CPU (emulated_device.h): the device memory MemStats counts is what a suspend
// gives back (the emulated device's count of live "physical" bytes drops by exactly that), the
// FIFOs and scratch come back at the same addresses, the FIFOs with their counters (a resume
// that lost them hangs the next operation), and collectives and sends after
// each of repeated cycles are exact, with LL and Simple. 1, 2 and 3 ranks, as threads (whose
// FIFOs are this process's own) and as processes (whose FIFO slots in "GPU memory" the peer
// process maps: it lets go of its mapping at the suspend and maps the new memory at resume, so
// they are given back too, and no memory file stays mapped or open in any process). A resume
// whose peer has died or aborted fails naming it, and leaves the communicator unusable.
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "datapath/data_path.h"
#include "harness/ranks.h"
#include "integration/emulated_device.h"
#include "integration/test_env.h"
#include "plan/algo_proto.h"
#include "transport/connector.h"

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

/// The emulated GPU memory this process maps (memory files: FIFO slots shared between
/// processes, its own and its mappings of a peer's) and the descriptors of such files it holds.
struct SharedDeviceMemory {
  int mappings = 0;
  int descriptors = 0;
};
SharedDeviceMemory sharedDeviceMemory() {
  SharedDeviceMemory m;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    m.mappings += line.find("braid-emulated-device") != std::string::npos;
  }
  for (int fd = 0; fd < 4096; ++fd) {
    char target[256] = {};
    const std::string link = "/proc/self/fd/" + std::to_string(fd);
    const ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
    m.descriptors += n > 0 && std::string(target, n).find("braid-emulated-device") != std::string::npos;
  }
  return m;
}

/// Lines of /proc/self/maps (every mapping of the process).
int mappingCount() {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) ++n;
  return n;
}

/// Bytes of this rank's FIFO memory that a peer process maps (shm receivers' slots in GPU memory).
uint64_t slotsPeersMap(ncclComm_t comm) {
  uint64_t bytes = 0;
  comm->dataPath().connector().forEachEnd([&](const transport::Connector::End& end) {
    if (end.kind == transport::Kind::kShm && !end.isSend && end.memory->slotsShared()) {
      bytes += end.memory->deviceData().bytes;
    }
  });
  return bytes;
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
        // Threads' FIFOs are this process's own memory, processes' slots the peer process maps
        // and lets go of at the suspend: all of it goes.
        expect(persistent == 0, std::string(threads ? "threads" : "processes") + " keep nothing: " +
                                    std::to_string(persistent));
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

TEST_CASE("emulated GPU: processes let go of the FIFO slots they map from a peer at suspend and map the new ones at "
          "resume, 3 times, leaking nothing (nor when destroyed suspended)", "[integration][emulated][suspend]") {
  test::EmulatedDeviceScope emulated;
  for (int n : {2, 3}) {
    INFO(n << " processes");
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    CHECK(test::runProcesses(n, [n, id](int rank) {
      ncclComm_t comm = nullptr;
      EXPECT_OK(ncclCommInitRank(&comm, n, id, rank));
      runExact(comm, rank, n, "before any suspend");  // (every connection made: ring, sends, Bruck's)
      const uint64_t shared = slotsPeersMap(comm);
      expect(shared > 0, "the peers map some of this rank's FIFO slots");
      const SharedDeviceMemory before = sharedDeviceMemory();
      expect(before.mappings > 0, "memory files are mapped (slots of this rank's and of its peers')");
      const int fds = test::openFileDescriptors();
      const int maps = mappingCount();
      for (int cycle = 0; cycle < 3; ++cycle) {
        const std::string when = "cycle " + std::to_string(cycle + 1);
        // The slots a peer maps count as suspendable, nothing stays.
        const uint64_t releasable = stat(comm, ncclStatGpuMemSuspend);
        const uint64_t persistent = stat(comm, ncclStatGpuMemPersist);
        expect(persistent == 0, when + ": persistent " + std::to_string(persistent));
        expect(releasable >= shared, when + ": suspendable " + std::to_string(releasable) + " holds the " +
                                         std::to_string(shared) + " bytes of slots the peers map");
        const int64_t physical = test::EmulatedDevice::physicalBytes.load();
        EXPECT_OK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
        const int64_t given = physical - test::EmulatedDevice::physicalBytes.load();
        expect(given == static_cast<int64_t>(releasable), when + ": device memory given back: " +
                                                              std::to_string(given) + " bytes; MemStats said " +
                                                              std::to_string(releasable));
        // Neither this rank's slots nor its mappings of its peers' are held here (nor, each
        // process checking its own, anywhere: the files' pages are freed).
        const SharedDeviceMemory suspended = sharedDeviceMemory();
        expect(suspended.mappings == 0 && suspended.descriptors == 0,
               when + ": while suspended " + std::to_string(suspended.mappings) + " memory files mapped, " +
                   std::to_string(suspended.descriptors) + " open");
        if (cycle == 0 && rank == 0) {
          std::fprintf(stderr, "emulated suspend, %d processes: rank 0 gave back %.2f MiB (%.2f MiB of it slots its "
                       "peers map), keeps 0\n", n, releasable / 1048576.0, shared / 1048576.0);
        }
        EXPECT_OK(ncclCommResume(comm));
        expect(test::EmulatedDevice::physicalBytes.load() == physical, when + ": device memory after resume");
        runExact(comm, rank, n, ("after resume " + std::to_string(cycle + 1)).c_str());
        const SharedDeviceMemory resumed = sharedDeviceMemory();
        expect(resumed.mappings == before.mappings, when + ": " + std::to_string(resumed.mappings) +
                                                        " memory files mapped after resume, " +
                                                        std::to_string(before.mappings) + " before");
        const int fdsNow = test::openFileDescriptors();
        expect(fdsNow == fds, when + ": " + std::to_string(fdsNow) + " descriptors open after resume, " +
                                  std::to_string(fds) + " before");
        // (Not under AddressSanitizer: its allocator maps new regions while its quarantine holds
        // freed blocks, about 10 mappings a cycle here; the memory files are counted above.)
        if (test::kResidentMeaningful) {
          expect(mappingCount() == maps, when + ": " + std::to_string(mappingCount()) + " mappings after resume, " +
                                             std::to_string(maps) + " before");
        }
      }
      // Destroyed while suspended: the reservations go too, no memory file comes back.
      EXPECT_OK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
      EXPECT_OK(ncclCommDestroy(comm));
      const SharedDeviceMemory destroyed = sharedDeviceMemory();
      expect(destroyed.mappings == 0 && destroyed.descriptors == 0,
             "destroyed while suspended: " + std::to_string(destroyed.mappings) + " memory files mapped, " +
                 std::to_string(destroyed.descriptors) + " open");
      expect(test::openFileDescriptors() <= fds, "destroyed while suspended: " +
                                                     std::to_string(test::openFileDescriptors()) + " descriptors, " +
                                                     std::to_string(fds) + " before");
    }, std::chrono::seconds(120)) == "");
  }
}

TEST_CASE("emulated GPU: a resume whose peer process died or aborted fails naming it and leaves the communicator "
          "unusable", "[integration][emulated][suspend]") {
  test::EmulatedDeviceScope emulated;
  // How many survivors have finished their checks (shared by the forked ranks): none aborts
  // before every other has failed its resume, which would change whom that one names.
  auto* checked = static_cast<std::atomic<int>*>(
      mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  REQUIRE(checked != MAP_FAILED);
  for (int n : {2, 3}) {
    for (const bool aborts : {false, true}) {
      INFO(n << " processes; the last " << (aborts ? "aborts" : "exits"));
      new (checked) std::atomic<int>(0);
      ncclUniqueId id;
      REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
      CHECK(test::runProcesses(n, [n, aborts, id, checked](int rank) {
        ncclComm_t comm = nullptr;
        EXPECT_OK(ncclCommInitRank(&comm, n, id, rank));
        runExact(comm, rank, n, "before the suspend");  // (FIFOs in "GPU memory" to every peer: Bruck's)
        EXPECT_OK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
        const int gone = n - 1;
        if (rank == gone) {
          if (aborts) EXPECT_OK(ncclCommAbort(comm));
          _exit(0);  // (never resumes)
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        const auto start = std::chrono::steady_clock::now();
        const ncclResult_t r = ncclCommResume(comm);
        const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const std::string text = ncclGetLastError(comm);
        const std::string named = "rank " + std::to_string(gone);
        expect(r != ncclSuccess && r != ncclInProgress, "the resume fails: " + std::to_string(r));
        expect(text.find(named) != std::string::npos, "the message names " + named + ": " + text);
        expect(text.find("unusable") != std::string::npos, "the message says the communicator is unusable: " + text);
        expect(took < 15, "the resume failed after " + std::to_string(took) + " s");
        if (rank == 0) {
          std::fprintf(stderr, "resume, %d processes, rank %d %s: %d after %.2f s: %s\n", n, gone,
                       aborts ? "aborted" : "exited", r, took, text.c_str());
        }
        uint64_t suspended = 0;
        EXPECT_OK(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &suspended));
        expect(suspended == 1, "it stays suspended");
        float x = 1, y = 0;
        expect(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, streamOf(0)) == ncclInvalidUsage &&
                   std::string(ncclGetLastError(comm)).find("ncclCommResume failed") != std::string::npos,
               std::string("an AllReduce after it is refused, saying why: ") + ncclGetLastError(comm));
        expect(ncclCommResume(comm) == ncclInvalidUsage, "a second resume is refused");
        ++*checked;
        for (int i = 0; i < 2000 && checked->load() < n - 1; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        EXPECT_OK(ncclCommAbort(comm));
      }, std::chrono::seconds(60)) == "");
    }
  }
  munmap(checked, sizeof(std::atomic<int>));
}
