// A rank that never calls: while the others wait, a WARN says so in the user's words
// (BRAID_WAIT_WARN), and the failure that ends the wait names the call the rank did not make.
// The knobs are read once a process, so each case runs in a new process of this binary.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "harness/ranks.h"
#include "test_env.h"

using namespace braid;

namespace {

std::string selfPath() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : "";
}

/// Runs the hidden case in a new process with `mode` and short knobs; returns what it printed.
std::string runWaitingCase(const std::string& mode) {
  return test::runCommand("env BRAID_WAIT_CASE=" + mode +
                          " BRAID_WAIT_WARN=1 BRAID_BOOTSTRAP_TIMEOUT=3 NCCL_TIMEOUT=4 NCCL_DEBUG=WARN timeout 60 " +
                          selfPath() + " '[.waiting-ranks]' 2>&1");
}

/// One AllReduce of rank `r`'s communicator, its result and last error printed.
void allReduceAndSay(ncclComm_t comm, int r, const char* label) {
  std::vector<float> x(1024, 1.0f);
  const ncclResult_t result = ncclAllReduce(x.data(), x.data(), 1024, ncclFloat, ncclSum, comm, nullptr);
  std::printf("%s: rank %d result %d: %s\n", label, r, result, result == ncclSuccess ? "" : ncclGetLastError(nullptr));
  std::fflush(stdout);
}

}  // namespace

TEST_CASE("(hidden) ranks of which one never calls", "[.waiting-ranks]") {
  const char* mode = std::getenv("BRAID_WAIT_CASE");
  if (mode == nullptr) {
    WARN("skipped: a hidden case, run by its visible case in a process of its own");
    return;
  }
  if (std::string(mode) == "threads") {
    // One thread drives both ranks in a group, as a user whose loop skipped rank 1.
    ncclComm_t comms[2] = {nullptr, nullptr};
    REQUIRE(ncclCommInitAll(comms, 2, nullptr) == ncclSuccess);
    std::vector<float> x(1024, 1.0f);
    ncclGroupStart();
    ncclAllReduce(x.data(), x.data(), 1024, ncclFloat, ncclSum, comms[0], nullptr);
    const ncclResult_t cold = ncclGroupEnd();
    std::printf("cold: group result %d: %s\n", cold, ncclGetLastError(nullptr));
    for (ncclComm_t c : comms) ncclCommAbort(c);
    // Once connected (a first AllReduce on both), rank 1 skips the second.
    REQUIRE(ncclCommInitAll(comms, 2, nullptr) == ncclSuccess);
    ncclGroupStart();
    for (ncclComm_t c : comms) ncclAllReduce(x.data(), x.data(), 1024, ncclFloat, ncclSum, c, nullptr);
    REQUIRE(ncclGroupEnd() == ncclSuccess);
    ncclGroupStart();
    ncclAllReduce(x.data(), x.data(), 1024, ncclFloat, ncclSum, comms[0], nullptr);
    const ncclResult_t warm = ncclGroupEnd();
    std::printf("warm: group result %d: %s\n", warm, ncclGetLastError(nullptr));
    for (ncclComm_t c : comms) ncclCommAbort(c);
    return;
  }
  // Processes: rank 1 sleeps through rank 0's AllReduce, then leaves without calling it.
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  const std::string out = test::runProcesses(2, [&](int r) {
    ncclComm_t comm = nullptr;
    EXPECT_OK(ncclCommInitRank(&comm, 2, id, r));
    if (r == 0) {
      allReduceAndSay(comm, r, "cold");
    } else {
      std::this_thread::sleep_for(std::chrono::seconds(6));
    }
    ncclCommAbort(comm);
  }, std::chrono::seconds(40));
  CHECK(out == "");
}

TEST_CASE("a rank that never calls: a WARN while the others wait, and a failure naming the call", "[integration][watchdog]") {
  for (const std::string mode : {"threads", "processes"}) {
    INFO(mode);
    const std::string out = runWaitingCase(mode);
    INFO(out);
    // While connecting (the first call): rank 1 never came to make the connection.
    CHECK_THAT(out, Catch::Contains("rank 0 of communicator 0x") &&
                        Catch::Contains("has waited 1 s in ncclAllReduce #1 without progress: rank 1 has not called "
                                        "ncclAllReduce #1 yet (rank 0 waits for it to make their connection)"));
    CHECK_THAT(out, Catch::Contains("NCCL_TIMEOUT=4 ends it; next report after 2 s"));
    CHECK_THAT(out, Catch::Contains("rank 1 has not called ncclAllReduce #1 of communicator 0x") &&
                        Catch::Contains("rank 0 waited 3 s (BRAID_BOOTSTRAP_TIMEOUT) for it to make their connection"));
    if (mode == "threads") {
      CHECK_THAT(out, Catch::Contains("cold: group result 8: ") &&
                          Catch::Contains("rank 1 has not called ncclAllReduce #1 of communicator"));
      // Connected: rank 1's announcement says it is still at its first collective.
      CHECK_THAT(out, Catch::Contains("has waited 1 s in ncclAllReduce #2 without progress: rank 1 has not called "
                                      "ncclAllReduce #2 yet (its last collective was #1)"));
      CHECK_THAT(out, Catch::Contains("warm: group result 8: ncclGroupEnd: no progress for 4 s (NCCL_TIMEOUT): rank 1 "
                                      "has not called ncclAllReduce #2 yet (its last collective was #1); "));
    } else {
      CHECK_THAT(out, Catch::Contains("cold: rank 0 result 8: ncclAllReduce: rank 1 has not called ncclAllReduce #1"));
    }
  }
}
