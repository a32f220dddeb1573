// Runs the ranks of a multi-rank test as threads or as forked processes, with a time bound.
//
// A rank body is a function of the rank that throws (test::Failure, via expect()) to fail.
// Catch2's assertions are not thread-safe, so bodies never use them; the harness collects
// every rank's failure and the test asserts on the collected text in its own thread.
#pragma once

#include <nccl.h>

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>

namespace braid::test {

using RankBody = std::function<void(int rank)>;

/// Throws a failure with `message` unless `condition` holds.
inline void expect(bool condition, const std::string& message) {
  if (!condition) throw std::runtime_error(message);
}

/// In a rank body: fails with the call's text and the last-error text unless it succeeds.
#define EXPECT_OK(call)                                                                        \
  do {                                                                                         \
    const ncclResult_t braidResult_ = (call);                                                  \
    ::braid::test::expect(braidResult_ == ncclSuccess,                                         \
                          std::string(#call) + " -> " + std::to_string(braidResult_) + ": " +  \
                              ncclGetLastError(nullptr));                                      \
  } while (0)

/// Runs body(0..n-1) on n threads. Returns "" when every rank succeeded, else one line per
/// failed rank. A run longer than `limit` prints the ranks still running and ends the process.
std::string runThreads(int n, const RankBody& body, std::chrono::seconds limit = std::chrono::seconds(60));

/// Runs body(0..n-1) in n forked processes (the calling process only waits). Same results;
/// a run longer than `limit` kills the children and reports which were still running.
std::string runProcesses(int n, const RankBody& body, std::chrono::seconds limit = std::chrono::seconds(60));

/// Both ways, one after the other; used by tests that must hold for threads and processes.
std::string runBoth(int n, const std::function<RankBody()>& makeBody,
                    std::chrono::seconds limit = std::chrono::seconds(60));

/// Threads, then processes: n ranks, each with a communicator of its own (ncclCommInitRank on a
/// new id, ncclCommDestroy after body; both failures are the rank's).
std::string withCommunicators(int n, const std::function<void(int rank, ncclComm_t comm, bool threads)>& body);

/// Polls ncclCommGetAsyncError until it leaves ncclInProgress; returns the final state.
ncclResult_t settle(ncclComm_t comm);

/// Runs a shell command and returns everything it printed (stdout and stderr).
std::string runCommand(const std::string& command);

/// A loopback TCP port that was free a moment ago (for NCCL_COMM_ID tests).
int freeLoopbackPort();

/// Open file descriptors and threads of this process (for leak checks).
int openFileDescriptors();
int liveThreads();

}  // namespace braid::test
