// ncclCommShrink after a rank's death: the survivors' new communicator works, twice in a row,
// whichever rank died (the one whose process served the new communicator's root included),
// and nothing is left behind; survivors that disagree on the exclusion list are told so.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/root.h"
#include "comm/communicator.h"
#include "harness/ranks.h"
#include "test_env.h"

using namespace braid;
using braid::test::expect;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kCount = 4099;

double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }  // floats: an odd size, several chunks of LL

/// One exact AllReduce of ones: every element must be the communicator's size.
ncclResult_t allReduceOnes(ncclComm_t comm, int n) {
  std::vector<float> x(kCount, 1.0f);
  const ncclResult_t r = ncclAllReduce(x.data(), x.data(), kCount, ncclFloat, ncclSum, comm, nullptr);
  if (r != ncclSuccess) return r;
  for (float v : x) expect(v == static_cast<float>(n), "AllReduce gave " + std::to_string(v) + ", not " + std::to_string(n));
  return ncclSuccess;
}

/// The kills of one run: the parent ranks that die, in order (each a rank of the communicator
/// the previous shrink made).
struct Deaths {
  std::vector<int> victims;
};

/// Rank `rank` of n: AllReduces until each victim in turn dies (SIGKILL in a process, an abort
/// of its communicator in a thread, its thread then leaving), then shrinks without it and runs
/// 20 exact AllReduces on the new communicator.
void survive(const ncclUniqueId& id, int n, int rank, const Deaths& deaths, bool processes, int flagsSeed) {
  const int fds = test::openFileDescriptors();
  const int threads = test::liveThreads();
  std::vector<ncclComm_t> made;
  ncclComm_t comm = nullptr;
  EXPECT_OK(ncclCommInitRank(&comm, n, id, rank));
  made.push_back(comm);
  std::vector<int> members(n);  // parent ranks, in the current communicator's order
  for (int r = 0; r < n; ++r) members[r] = r;
  for (size_t stage = 0; stage < deaths.victims.size(); ++stage) {
    const int victim = deaths.victims[stage];
    const int victimIndex = static_cast<int>(std::find(members.begin(), members.end(), victim) - members.begin());
    const int size = static_cast<int>(members.size());
    for (int i = 0; i < 3; ++i) EXPECT_OK(allReduceOnes(comm, size));
    if (rank == victim) {
      if (processes) raise(SIGKILL);
      EXPECT_OK(ncclCommAbort(comm));  // a thread: its communicator gone, its process alive
      made.pop_back();
      for (auto it = made.rbegin(); it != made.rend(); ++it) ncclCommDestroy(*it);
      return;
    }
    // The victim's death fails a collective, naming it.
    const auto start = Clock::now();
    ncclResult_t r = ncclSuccess;
    for (int i = 0; r == ncclSuccess && Clock::now() - start < std::chrono::seconds(20); ++i) r = allReduceOnes(comm, size);
    const std::string why = ncclGetLastError(nullptr);
    expect(r == ncclRemoteError || r == ncclSystemError || r == ncclTimeout, "after the death of rank " + std::to_string(victimIndex) +
                                                             ": result " + std::to_string(r) + ": " + why);
    expect(why.find("rank " + std::to_string(victimIndex)) != std::string::npos,
           "the failure does not name rank " + std::to_string(victimIndex) + ": " + why);
    int excluded[] = {victimIndex};
    const int flags = (flagsSeed + static_cast<int>(stage)) % 2 == 0 ? NCCL_SHRINK_DEFAULT : NCCL_SHRINK_ABORT;
    ncclComm_t next = nullptr;
    const ncclResult_t shrunk = ncclCommShrink(comm, excluded, 1, &next, nullptr, flags);
    expect(shrunk == ncclSuccess, "shrink " + std::to_string(stage + 1) + " (flags " + std::to_string(flags) +
                                      "): " + std::to_string(shrunk) + ": " + ncclGetLastError(nullptr));
    made.push_back(next);
    members.erase(members.begin() + victimIndex);
    int count = 0, me = -1;
    EXPECT_OK(ncclCommCount(next, &count));
    EXPECT_OK(ncclCommUserRank(next, &me));
    expect(count == size - 1, "the new communicator has " + std::to_string(count) + " ranks");
    expect(members[me] == rank, "parent rank " + std::to_string(rank) + " became rank " + std::to_string(me));
    for (int i = 0; i < 20; ++i) EXPECT_OK(allReduceOnes(next, size - 1));
    comm = next;
  }
  for (auto it = made.rbegin(); it != made.rend(); ++it) EXPECT_OK(ncclCommDestroy(*it));
  if (!processes) return;  // (threads: the test checks the process's counts)
  const std::string left = test::leftBehind(fds, threads);
  expect(left.empty(), left);
}

}  // namespace

TEST_CASE("shrink after a rank's death, twice: each position killed, survivors exact, nothing left behind",
          "[integration][shrink][failure]") {
  const int n = 4;
  // Roots an earlier test left waiting for ranks that never come end at their deadlines: let
  // them, so that this process's descriptors and threads hold still while they are counted.
  const auto quiet = Clock::now() + std::chrono::seconds(30);
  while (bootstrap::liveRoots() != 0 && Clock::now() < quiet) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(bootstrap::liveRoots() == 0);
  for (bool processes : {true, false}) {
    for (int first : {0, 2, 3}) {
      // The second death is the new communicator's rank 0: the survivor that started its root.
      Deaths deaths;
      deaths.victims.push_back(first);
      deaths.victims.push_back(first == 0 ? 1 : 0);
      INFO((processes ? "processes" : "threads") << ": rank " << deaths.victims[0] << " dies, then parent rank "
                                                  << deaths.victims[1]);
      const int fds = test::openFileDescriptors();
      const int threads = test::liveThreads();
      ncclUniqueId id;
      REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
      const auto start = Clock::now();
      auto body = [&](int rank) { survive(id, n, rank, deaths, processes, first); };
      const std::string out = processes ? test::runProcesses(n, body, std::chrono::seconds(90))
                                        : test::runThreads(n, body, std::chrono::seconds(90));
      INFO(out);
      INFO("took " << std::chrono::duration<double>(Clock::now() - start).count() << " s");
      if (processes) {
        // Only the victims' lines, in the order they died (the harness reaps them so).
        std::string expected;
        for (int r : deaths.victims) expected += "rank " + std::to_string(r) + " (process):  (killed by signal 9)\n";
        CHECK(out == expected);
      } else {
        CHECK(out == "");
        CHECK(test::leftBehind(fds, threads, /*roots=*/false) == "");
      }
    }
  }
  const auto settle = Clock::now() + std::chrono::seconds(5);  // (a root that served may take a moment to end)
  while (bootstrap::liveRoots() != 0 && Clock::now() < settle) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(bootstrap::liveRoots() == 0);
}

TEST_CASE("survivors that disagree on who was excluded fail with both views named", "[integration][shrink]") {
  const int n = 4;
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  std::vector<std::string> texts(n);
  std::vector<ncclResult_t> results(n, ncclSuccess);
  const auto start = Clock::now();
  const std::string out = test::runThreads(n, [&](int rank) {
    ncclComm_t comm = nullptr;
    EXPECT_OK(ncclCommInitRank(&comm, n, id, rank));
    EXPECT_OK(allReduceOnes(comm, n));
    if (rank == 3) {  // excluded by ranks 0 and 1; leaves
      EXPECT_OK(ncclCommDestroy(comm));
      return;
    }
    // Rank 2 also excludes rank 1, which is alive: the first member (rank 0) counts {0,1,2}.
    int excluded[2] = {3, 1};
    ncclComm_t next = nullptr;
    results[rank] = ncclCommShrink(comm, excluded, rank == 2 ? 2 : 1, &next, nullptr, NCCL_SHRINK_DEFAULT);
    texts[rank] = ncclGetLastError(nullptr);
    if (next != nullptr) ncclCommAbort(next);
    ncclCommAbort(comm);
  }, std::chrono::seconds(60));
  CHECK(out == "");
  // The first member (rank 0) hears every member's view before anyone inits: all three fail at
  // once, with both views named.
  for (int r : {0, 1, 2}) {
    INFO("rank " << r << ": " << texts[r]);
    CHECK(results[r] == ncclInvalidUsage);
    CHECK_THAT(texts[r], Catch::Contains("disagree on the members") &&
                             Catch::Contains("rank 0 (the first member) counts 3 parent ranks {0,1,2}") &&
                             Catch::Contains("rank 2 counts 2 {0,2}"));
  }
  CHECK(secondsSince(start) < 10);
}
