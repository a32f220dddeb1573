// ncclCommGetUniqueId and ncclCommGrow: a communicator of 2 grows to 3, and that one to 8, on
// threads and on processes; every communicator stays exact (the parents too) and nothing is
// left behind. Then each misuse fails at once, on every rank, with a text naming it.
#include <sys/mman.h>

#include <catch2/catch.hpp>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/root.h"
#include "harness/ranks.h"
#include "test_env.h"

using namespace braid;
using braid::test::expect;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kCount = 4099;  // floats: an odd size, several chunks

double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

/// One exact AllReduce: rank r adds r + 1, so every element must be n (n + 1) / 2.
ncclResult_t allReduceExact(ncclComm_t comm, int n) {
  int rank = -1;
  ncclResult_t r = ncclCommUserRank(comm, &rank);
  if (r != ncclSuccess) return r;
  std::vector<float> x(kCount, static_cast<float>(rank + 1));
  r = ncclAllReduce(x.data(), x.data(), kCount, ncclFloat, ncclSum, comm, nullptr);
  if (r != ncclSuccess) return r;
  const float want = static_cast<float>(n * (n + 1) / 2);
  for (float v : x) expect(v == want, "AllReduce gave " + std::to_string(v) + ", not " + std::to_string(want));
  return ncclSuccess;
}

/// Where the rank that asked for a grow id leaves it for the new ranks: shared memory mapped
/// before the ranks start, so forked ranks see it as threads do.
struct Mailbox {
  std::atomic<int> posted[2];
  ncclUniqueId ids[2];
};

Mailbox* newMailbox() {
  void* p = mmap(nullptr, sizeof(Mailbox), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  return new (p) Mailbox{};
}

ncclUniqueId awaitId(Mailbox& box, int stage) {
  const auto until = Clock::now() + std::chrono::seconds(30);
  while (box.posted[stage].load(std::memory_order_acquire) == 0) {
    expect(Clock::now() < until, "no grow id was posted for stage " + std::to_string(stage) + " within 30 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return box.ids[stage];
}

void checkPosition(ncclComm_t comm, int rank, int n) {
  int count = 0, me = -1;
  EXPECT_OK(ncclCommCount(comm, &count));
  EXPECT_OK(ncclCommUserRank(comm, &me));
  expect(count == n && me == rank, "the grown communicator says rank " + std::to_string(me) + " of " +
                                       std::to_string(count) + ", not " + std::to_string(rank) + " of " +
                                       std::to_string(n));
}

/// Rank `rank` of the run 2 -> 3 -> 8. Ranks 0 and 1 start the first communicator (rank 0 asks
/// for the id), rank 2 joins it; rank 2 (a rank that joined) asks for the second id and ranks
/// 3..7 join. Every communicator, the parents included, runs exact AllReduces afterwards.
void growRank(const ncclUniqueId& first, Mailbox& box, int rank, bool processes) {
  const int fds = test::openFileDescriptors();
  const int threads = test::liveThreads();
  constexpr int kSizes[] = {2, 3, 8};
  std::vector<ncclComm_t> made;  // this rank's communicators, oldest first
  ncclComm_t comm = nullptr;
  int stage = 0;
  if (rank < kSizes[0]) {
    EXPECT_OK(ncclCommInitRank(&comm, kSizes[0], first, rank));
    made.push_back(comm);
  } else {
    stage = rank < kSizes[1] ? 1 : 2;
    const ncclUniqueId id = awaitId(box, stage - 1);
    EXPECT_OK(ncclCommGrow(nullptr, kSizes[stage], &id, rank, &comm, nullptr));
    made.push_back(comm);
    checkPosition(comm, rank, kSizes[stage]);
    for (int i = 0; i < 3; ++i) EXPECT_OK(allReduceExact(comm, kSizes[stage]));  // (the existing ranks' three)
  }
  for (; stage < 2; ++stage) {
    EXPECT_OK(allReduceExact(comm, kSizes[stage]));
    const int asker = stage == 0 ? 0 : 2;
    ncclUniqueId id{};
    if (rank == asker) {
      EXPECT_OK(ncclCommGetUniqueId(comm, &id));
      box.ids[stage] = id;
      box.posted[stage].store(1, std::memory_order_release);
    }
    ncclComm_t grown = nullptr;
    EXPECT_OK(ncclCommGrow(comm, kSizes[stage + 1], rank == asker ? &id : nullptr, -1, &grown, nullptr));
    made.push_back(grown);
    checkPosition(grown, rank, kSizes[stage + 1]);
    for (int i = 0; i < 3; ++i) EXPECT_OK(allReduceExact(grown, kSizes[stage + 1]));
    for (int i = 0; i < 2; ++i) EXPECT_OK(allReduceExact(comm, kSizes[stage]));  // the parent still works
    comm = grown;
  }
  EXPECT_OK(allReduceExact(comm, kSizes[2]));
  for (auto it = made.rbegin(); it != made.rend(); ++it) EXPECT_OK(ncclCommDestroy(*it));
  if (!processes) return;  // (threads: the test checks the process's counts)
  const auto settle = Clock::now() + std::chrono::seconds(5);
  while ((test::openFileDescriptors() != fds || test::liveThreads() != threads || bootstrap::liveRoots() != 0) &&
         Clock::now() < settle) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  expect(test::openFileDescriptors() == fds, "descriptors: " + std::to_string(fds) + " before, " +
                                                 std::to_string(test::openFileDescriptors()) + " after");
  expect(test::liveThreads() == threads, "threads: " + std::to_string(threads) + " before, " +
                                             std::to_string(test::liveThreads()) + " after");
  expect(bootstrap::liveRoots() == 0, "bootstrap roots left running: " + std::to_string(bootstrap::liveRoots()));
}

/// Waits (up to 30 s) for roots earlier tests left to end, so the counts hold still.
void waitForQuietRoots() {
  const auto quiet = Clock::now() + std::chrono::seconds(30);
  while (bootstrap::liveRoots() != 0 && Clock::now() < quiet) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(bootstrap::liveRoots() == 0);
}

}  // namespace

TEST_CASE("grow 2 -> 3 -> 8 on threads and processes: ranks kept, all exact, parents usable, nothing left",
          "[integration][grow]") {
  waitForQuietRoots();
  for (bool processes : {false, true}) {
    INFO((processes ? "processes" : "threads"));
    Mailbox* box = newMailbox();
    const int fds = test::openFileDescriptors();
    const int threads = test::liveThreads();
    ncclUniqueId first;
    REQUIRE(ncclGetUniqueId(&first) == ncclSuccess);
    const auto start = Clock::now();
    auto body = [&](int rank) { growRank(first, *box, rank, processes); };
    const std::string out = processes ? test::runProcesses(8, body, std::chrono::seconds(90))
                                      : test::runThreads(8, body, std::chrono::seconds(90));
    INFO(out);
    INFO("took " << secondsSince(start) << " s");
    CHECK(out == "");
    munmap(box, sizeof(Mailbox));
    // (processes: the first id's root is this process's, and ends once it has served)
    const auto settle = Clock::now() + std::chrono::seconds(5);
    while ((test::openFileDescriptors() != fds || test::liveThreads() != threads || bootstrap::liveRoots() != 0) &&
           Clock::now() < settle) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    CHECK(test::openFileDescriptors() == fds);
    CHECK(test::liveThreads() == threads);
    CHECK(bootstrap::liveRoots() == 0);
  }
}
