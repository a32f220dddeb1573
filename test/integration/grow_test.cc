// ncclCommGetUniqueId and ncclCommGrow: a communicator of 2 grows to 3, and that one to 8, on
// threads and on processes; every communicator stays exact (the parents too) and nothing is
// left behind. Then each misuse fails at once, on every rank, with a text naming it.
#include <sys/mman.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/root.h"
#include "comm/grow.h"
#include "harness/ranks.h"
#include "integration/emulated_device.h"
#include "datapath/data_path.h"
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
/// for the id), rank 2 joins it; rank 2 (a rank that joined) asks for the second id, which all
/// three pass, and ranks 3..7 join. Every communicator, the parents included, runs exact
/// AllReduces afterwards.
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
    // In the second grow the other existing ranks pass the id too, which NCCL allows.
    if (rank != asker && stage == 1) id = awaitId(box, stage);
    const bool passId = rank == asker || stage == 1;
    ncclComm_t grown = nullptr;
    EXPECT_OK(ncclCommGrow(comm, kSizes[stage + 1], passId ? &id : nullptr, -1, &grown, nullptr));
    made.push_back(grown);
    checkPosition(grown, rank, kSizes[stage + 1]);
    for (int i = 0; i < 3; ++i) EXPECT_OK(allReduceExact(grown, kSizes[stage + 1]));
    for (int i = 0; i < 2; ++i) EXPECT_OK(allReduceExact(comm, kSizes[stage]));  // the parent still works
    comm = grown;
  }
  EXPECT_OK(allReduceExact(comm, kSizes[2]));
  for (auto it = made.rbegin(); it != made.rend(); ++it) EXPECT_OK(ncclCommDestroy(*it));
  if (!processes) return;  // (threads: the test checks the process's counts)
  const std::string left = test::leftBehind(fds, threads);
  expect(left.empty(), left);
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
    CHECK(test::leftBehind(fds, threads) == "");
  }
}

namespace {

/// The call's result and the calling thread's last-error text, for one CHECK of both.
struct Outcome {
  ncclResult_t result;
  std::string text;
};

Outcome grow(ncclComm_t comm, int nRanks, const ncclUniqueId* id, int rank) {
  ncclComm_t made = nullptr;
  const ncclResult_t r = ncclCommGrow(comm, nRanks, id, rank, &made, nullptr);
  const std::string text = ncclGetLastError(nullptr);
  if (made != nullptr) ncclCommAbort(made);  // (a grow that failed still hands back its communicator)
  return {r, text};
}

#define CHECK_OUTCOME(outcome, code, words)    \
  do {                                         \
    const Outcome o_ = (outcome);              \
    INFO(o_.text);                             \
    CHECK(o_.result == (code));                \
    CHECK_THAT(o_.text, Catch::Contains(words)); \
  } while (0)

}  // namespace

TEST_CASE("grow's bad arguments and misused ids fail at once, naming what is wrong", "[integration][grow]") {
  waitForQuietRoots();
  const int fds = test::openFileDescriptors();
  const int threads = test::liveThreads();
  {
    ncclUniqueId first, plain;
    REQUIRE(ncclGetUniqueId(&first) == ncclSuccess);
    REQUIRE(ncclGetUniqueId(&plain) == ncclSuccess);  // (its root ends at its deadline; stopped below)
    ncclComm_t comm = nullptr;
    REQUIRE(ncclCommInitRank(&comm, 1, first, 0) == ncclSuccess);
    const auto start = Clock::now();
    ncclUniqueId id{};
    CHECK(ncclCommGetUniqueId(nullptr, &id) == ncclInvalidArgument);
    CHECK_THAT(ncclGetLastError(nullptr), Catch::Contains("comm is NULL"));
    CHECK(ncclCommGetUniqueId(comm, nullptr) == ncclInvalidArgument);
    CHECK_THAT(ncclGetLastError(nullptr), Catch::Contains("uniqueId is NULL"));
    REQUIRE(ncclCommGetUniqueId(comm, &id) == ncclSuccess);
    ncclUniqueId second{};
    CHECK(ncclCommGetUniqueId(comm, &second) == ncclInvalidUsage);
    CHECK_THAT(ncclGetLastError(nullptr), Catch::Contains("already handed out a grow id"));
    CHECK(ncclCommGrow(comm, 2, &id, -1, nullptr, nullptr) == ncclInvalidArgument);
    CHECK_THAT(ncclGetLastError(nullptr), Catch::Contains("newcomm is NULL"));

    // New ranks' arguments are checked against the id before anything starts.
    CHECK_OUTCOME(grow(nullptr, 3, nullptr, 1), ncclInvalidArgument, "comm and uniqueId are both NULL");
    CHECK_OUTCOME(grow(nullptr, 3, &plain, 1), ncclInvalidArgument, "uniqueId is not a grow id");
    CHECK_OUTCOME(grow(nullptr, 3, &id, 0), ncclInvalidArgument, "rank is 0; new ranks take 1..2");
    CHECK_OUTCOME(grow(nullptr, 3, &id, 3), ncclInvalidArgument, "rank is 3; new ranks take 1..2");
    CHECK_OUTCOME(grow(nullptr, 1, &id, 1), ncclInvalidArgument, "nRanks is 1; the id grows a communicator of 1 ranks");
    ncclUniqueId zeros{};
    CHECK_OUTCOME(grow(nullptr, 3, &zeros, 1), ncclInvalidArgument, "not made by Braid");

    // An existing rank's grow uses the id up, whether it succeeds or not.
    CHECK_OUTCOME(grow(comm, 1, &id, -1), ncclInvalidArgument,
                  "existing rank 0 passed nRanks = 1; it must be larger than the communicator's 1 ranks");
    CHECK_OUTCOME(grow(comm, 2, &id, -1), ncclInvalidUsage, "an earlier ncclCommGrow already used");
    CHECK_OUTCOME(grow(nullptr, 2, &id, 1), ncclInvalidUsage, "already used by an ncclCommGrow that has ended");
    REQUIRE(ncclCommGetUniqueId(comm, &id) == ncclSuccess);  // (the used one no longer blocks a new one)
    CHECK_OUTCOME(grow(comm, 2, &id, 0), ncclInvalidArgument, "existing rank 0 passed rank = 0; existing ranks pass -1");
    CHECK_OUTCOME(grow(comm, 2, &plain, -1), ncclInvalidUsage,
                  "existing rank 0 passed a uniqueId that no existing rank's ncclCommGetUniqueId made");
    CHECK_OUTCOME(grow(comm, 2, nullptr, -1), ncclInvalidUsage, "no existing rank passed a grow id");
    CHECK(secondsSince(start) < 5);

    // After all that the communicator grows.
    REQUIRE(ncclCommGetUniqueId(comm, &id) == ncclSuccess);
    const std::string out = test::runThreads(2, [&](int rank) {
      ncclComm_t grown = nullptr;
      EXPECT_OK(ncclCommGrow(rank == 0 ? comm : nullptr, 2, &id, rank == 0 ? -1 : 1, &grown, nullptr));
      EXPECT_OK(allReduceExact(grown, 2));
      EXPECT_OK(ncclCommDestroy(grown));
    });
    CHECK(out == "");
    CHECK(allReduceExact(comm, 1) == ncclSuccess);
    // A joiner in another process would not know the id is used: it finds the root gone, at
    // once (a grow root is never retried: it ran before its id existed).
    auto late = comm::newCommunicator(1, 2, CommConfig{}, -1);
    const auto lateStart = Clock::now();
    CHECK_THROWS_WITH(comm::growNewRank(*late, id, test::loopbackSettings(30)),
                      Catch::Contains("the root of the grow id is gone"));
    CHECK(secondsSince(lateStart) < 2);
    late.reset();
    CHECK(ncclCommDestroy(comm) == ncclSuccess);
    // The plain id's root waits for ranks that never come: init a communicator of one on it.
    REQUIRE(ncclCommInitRank(&comm, 1, plain, 0) == ncclSuccess);
    CHECK(ncclCommDestroy(comm) == ncclSuccess);
  }
  CHECK(test::leftBehind(fds, threads) == "");
}

TEST_CASE("existing ranks that pass different things to grow all fail alike, at once", "[integration][grow]") {
  const int n = 3;
  ncclUniqueId first;
  REQUIRE(ncclGetUniqueId(&first) == ncclSuccess);
  struct Case {
    const char* name;
    int nRanksOfRank0;  // the others pass 4
    std::vector<int> askers;
    ncclResult_t code;
    const char* words;
  };
  const std::vector<Case> cases = {
      {"nRanks differs", 5, {1}, ncclInvalidArgument, "disagree on nRanks: rank 0 passed 5, rank 1 passed 4"},
      {"two ids", 4, {0, 2}, ncclInvalidUsage, "existing ranks 0 and 2 each passed a grow id of their own"},
      {"smaller", 2, {1}, ncclInvalidArgument, "existing rank 0 passed nRanks = 2; it must be larger than the "
                                               "communicator's 3 ranks"},
  };
  std::vector<ncclComm_t> comms(n);
  CHECK(test::runThreads(n, [&](int rank) { EXPECT_OK(ncclCommInitRank(&comms[rank], n, first, rank)); }) == "");
  for (const Case& c : cases) {
    INFO(c.name);
    std::vector<Outcome> outcomes(n);
    const auto start = Clock::now();
    const std::string out = test::runThreads(n, [&](int rank) {
      ncclUniqueId id{};
      const bool asks = std::find(c.askers.begin(), c.askers.end(), rank) != c.askers.end();
      if (asks) EXPECT_OK(ncclCommGetUniqueId(comms[rank], &id));
      outcomes[rank] = grow(comms[rank], rank == 0 ? c.nRanksOfRank0 : 4, asks ? &id : nullptr, -1);
      EXPECT_OK(allReduceExact(comms[rank], n));  // the parent is unharmed
    });
    CHECK(out == "");
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r);
      CHECK_OUTCOME(outcomes[r], c.code, c.words);
    }
    CHECK(secondsSince(start) < 5);
  }
  for (ncclComm_t c : comms) CHECK(ncclCommDestroy(c) == ncclSuccess);
}

TEST_CASE("a joiner that never comes: the parent's abort, the new communicator's abort or the timeout ends the grow",
          "[integration][grow]") {
  waitForQuietRoots();
  ncclUniqueId first;
  REQUIRE(ncclGetUniqueId(&first) == ncclSuccess);
  std::vector<Outcome> outcomes(2);
  std::vector<double> took(2);
  // Blocking: the new handle is not the caller's yet, so another thread aborts the parent.
  std::string out = test::runThreads(2, [&](int rank) {
    ncclComm_t comm = nullptr;
    EXPECT_OK(ncclCommInitRank(&comm, 2, first, rank));
    ncclUniqueId id{};
    if (rank == 1) EXPECT_OK(ncclCommGetUniqueId(comm, &id));
    std::thread aborter([comm] {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      ncclCommAbort(comm);
    });
    const auto start = Clock::now();
    outcomes[rank] = grow(comm, 3, rank == 1 ? &id : nullptr, -1);
    took[rank] = secondsSince(start);
    aborter.join();
  });
  CHECK(out == "");
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << " after " << took[r] << " s: " << outcomes[r].text);
    CHECK(outcomes[r].result != ncclSuccess);
    CHECK_THAT(outcomes[r].text, Catch::Contains("abort"));
    CHECK(took[r] < 5);
  }

  // Nonblocking: the grow runs in the background; aborting the new communicator ends it and
  // leaves the parent as it was.
  REQUIRE(ncclGetUniqueId(&first) == ncclSuccess);
  out = test::runThreads(2, [&](int rank) {
    ncclComm_t comm = nullptr;
    EXPECT_OK(ncclCommInitRank(&comm, 2, first, rank));
    ncclUniqueId id{};
    if (rank == 0) EXPECT_OK(ncclCommGetUniqueId(comm, &id));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t grown = nullptr;
    const ncclResult_t r = ncclCommGrow(comm, 3, rank == 0 ? &id : nullptr, -1, &grown, &config);
    expect(r == ncclInProgress && grown != nullptr, "a nonblocking grow returned " + std::to_string(r));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ncclResult_t state = ncclSuccess;
    EXPECT_OK(ncclCommGetAsyncError(grown, &state));
    expect(state == ncclInProgress, "the grow without its joiner is in state " + std::to_string(state));
    const auto start = Clock::now();
    EXPECT_OK(ncclCommAbort(grown));
    expect(secondsSince(start) < 3, "the abort took " + std::to_string(secondsSince(start)) + " s");
    EXPECT_OK(allReduceExact(comm, 2));
    EXPECT_OK(ncclCommGetUniqueId(comm, &id));  // the aborted grow used its id up; a new one may be asked for
    EXPECT_OK(ncclCommDestroy(comm));
  });
  CHECK(out == "");

  // Neither: the bootstrap timeout (2 s here) ends it, naming the rank that did not come.
  REQUIRE(ncclGetUniqueId(&first) == ncclSuccess);
  ncclComm_t comm = nullptr;
  REQUIRE(ncclCommInitRank(&comm, 1, first, 0) == ncclSuccess);
  const comm::InitSettings settings = test::loopbackSettings(2);
  ncclUniqueId id = comm::offerGrowId(*comm, settings);
  auto child = comm::newCommunicator(0, 1, CommConfig{}, -1);
  comm::GrowRequest request;
  request.nRanks = 3;
  request.id = &id;
  const auto start = Clock::now();
  std::string text;
  try {
    comm::growExistingRank(*comm, request, comm->nextSplitSequence(), *child, settings);
  } catch (const Error& e) {
    text = e.what();
  }
  INFO(text);
  CHECK_THAT(text, Catch::Contains("ranks 1 and 2"));
  CHECK(secondsSince(start) > 1.5);
  CHECK(secondsSince(start) < 15);
  child.reset();
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
  const auto settle = Clock::now() + std::chrono::seconds(5);
  while (bootstrap::liveRoots() != 0 && Clock::now() < settle) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(bootstrap::liveRoots() == 0);
}

TEST_CASE("new ranks that claim the same rank, or another nRanks, fail everyone at the root, naming it",
          "[integration][grow]") {
  struct Case {
    const char* name;
    int joinerRanks[2];
    int joinerSizes[2];
    const char* words;
  };
  const Case cases[] = {
      {"a rank twice", {2, 2}, {4, 4}, "two ranks both claimed rank 2"},
      {"another nRanks", {2, 3}, {4, 5}, "called init with nranks="},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    ncclUniqueId first;
    REQUIRE(ncclGetUniqueId(&first) == ncclSuccess);
    Mailbox* box = newMailbox();
    std::vector<Outcome> outcomes(4);
    const auto start = Clock::now();
    const std::string out = test::runThreads(4, [&](int rank) {
      if (rank >= 2) {
        const ncclUniqueId id = awaitId(*box, 0);
        outcomes[rank] = grow(nullptr, c.joinerSizes[rank - 2], &id, c.joinerRanks[rank - 2]);
        return;
      }
      ncclComm_t comm = nullptr;
      EXPECT_OK(ncclCommInitRank(&comm, 2, first, rank));
      ncclUniqueId id{};
      if (rank == 0) {
        EXPECT_OK(ncclCommGetUniqueId(comm, &id));
        box->ids[0] = id;
        box->posted[0].store(1, std::memory_order_release);
      }
      outcomes[rank] = grow(comm, 4, rank == 0 ? &id : nullptr, -1);
      EXPECT_OK(allReduceExact(comm, 2));
      EXPECT_OK(ncclCommDestroy(comm));
    });
    munmap(box, sizeof(Mailbox));
    CHECK(out == "");
    for (int r = 0; r < 4; ++r) {
      INFO("thread " << r << ": " << outcomes[r].text);
      CHECK(outcomes[r].result != ncclSuccess);
      if (r < 2) {
        CHECK_THAT(outcomes[r].text, Catch::Contains(c.words));
      } else {  // (a joiner that comes after the failure finds the root stopped, or the id used up)
        CHECK_THAT(outcomes[r].text, Catch::Contains(c.words) || Catch::Contains("the root of the grow id is gone") ||
                                         Catch::Contains("uniqueId was already used by an ncclCommGrow that has ended"));
      }
    }
    CHECK(secondsSince(start) < 10);
  }
}

TEST_CASE("emulated GPU: grow 2 -> 4 on the CUDA backend's path, threads and processes, exact", "[integration][grow]") {
  comm::setTestDeviceFactory([](int) { return std::make_unique<test::EmulatedDevice>(); });
  struct Restore {
    ~Restore() { comm::setTestDeviceFactory(nullptr); }
  } restore;
  // A stream of each rank's own (the legacy stream is refused to ranks sharing a process).
  auto allReduceOnDevice = [](ncclComm_t comm, int rank, int n) {
    std::vector<float> x(kCount, static_cast<float>(rank + 1));
    const auto stream = reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(0x1000 + 16 * rank));
    EXPECT_OK(ncclAllReduce(x.data(), x.data(), kCount, ncclFloat, ncclSum, comm, stream));
    comm->dataPath().synchronize();
    for (float v : x) expect(v == static_cast<float>(n * (n + 1) / 2), "AllReduce gave " + std::to_string(v));
  };
  for (bool processes : {false, true}) {
    INFO((processes ? "processes" : "threads"));
    Mailbox* box = newMailbox();
    ncclUniqueId first;
    REQUIRE(ncclGetUniqueId(&first) == ncclSuccess);
    auto body = [&](int rank) {
      ncclComm_t comm = nullptr, grown = nullptr;
      ncclUniqueId id{};
      if (rank < 2) {
        EXPECT_OK(ncclCommInitRank(&comm, 2, first, rank));
        allReduceOnDevice(comm, rank, 2);
        if (rank == 1) {
          EXPECT_OK(ncclCommGetUniqueId(comm, &id));
          box->ids[0] = id;
          box->posted[0].store(1, std::memory_order_release);
        }
        EXPECT_OK(ncclCommGrow(comm, 4, rank == 1 ? &id : nullptr, -1, &grown, nullptr));
      } else {
        id = awaitId(*box, 0);
        EXPECT_OK(ncclCommGrow(nullptr, 4, &id, rank, &grown, nullptr));
      }
      int device = -1;
      EXPECT_OK(ncclCommCuDevice(grown, &device));
      expect(device == 0, "the grown communicator is on device " + std::to_string(device) + ", not the emulated 0");
      checkPosition(grown, rank, 4);
      for (int i = 0; i < 3; ++i) allReduceOnDevice(grown, rank, 4);
      if (comm != nullptr) allReduceOnDevice(comm, rank, 2);
      EXPECT_OK(ncclCommDestroy(grown));
      if (comm != nullptr) EXPECT_OK(ncclCommDestroy(comm));
    };
    const std::string out = processes ? test::runProcesses(4, body, std::chrono::seconds(60))
                                      : test::runThreads(4, body, std::chrono::seconds(60));
    munmap(box, sizeof(Mailbox));
    CHECK(out == "");
  }
}

TEST_CASE("one thread grows a communicator of 1 into 3 inside a group, as with ncclCommInitAll", "[integration][grow]") {
  ncclUniqueId first, id;
  REQUIRE(ncclGetUniqueId(&first) == ncclSuccess);
  ncclComm_t parent = nullptr;
  REQUIRE(ncclCommInitRank(&parent, 1, first, 0) == ncclSuccess);
  REQUIRE(ncclCommGetUniqueId(parent, &id) == ncclSuccess);
  ncclComm_t comms[3] = {};
  REQUIRE(ncclGroupStart() == ncclSuccess);
  CHECK(ncclCommGrow(parent, 3, &id, -1, &comms[0], nullptr) == ncclSuccess);
  for (int r = 1; r < 3; ++r) CHECK(ncclCommGrow(nullptr, 3, &id, r, &comms[r], nullptr) == ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  std::vector<std::vector<float>> x(3);
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < 3; ++r) {
    x[r].assign(kCount, static_cast<float>(r + 1));
    CHECK(ncclAllReduce(x[r].data(), x[r].data(), kCount, ncclFloat, ncclSum, comms[r], nullptr) == ncclSuccess);
  }
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r);
    CHECK(std::count(x[r].begin(), x[r].end(), 6.0f) == kCount);
    CHECK(ncclCommDestroy(comms[r]) == ncclSuccess);
  }
  CHECK(allReduceExact(parent, 1) == ncclSuccess);
  CHECK(ncclCommDestroy(parent) == ncclSuccess);
}
