// Communicator lifetimes: a destroy or abort racing the owner's calls, a peer that destroyed or
// aborted its communicator while its process lives on, and stale handles.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "harness/ranks.h"
#include "test_env.h"

using namespace braid;
using Clock = std::chrono::steady_clock;

namespace {

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// 8-byte AllReduces on comm until one fails; returns its result and last-error text
/// ("" and ncclSuccess when `stop` came first), checking each success's sum.
ncclResult_t loopUntilFailure(ncclComm_t comm, float expected, const std::atomic<bool>& stop, std::string* text,
                              double* failedAfter) {
  while (!stop.load()) {
    float x[2] = {1.0f, 1.0f};
    const auto start = Clock::now();
    const ncclResult_t r = ncclAllReduce(x, x, 2, ncclFloat, ncclSum, comm, nullptr);
    if (r != ncclSuccess) {
      *text = ncclGetLastError(nullptr);
      *failedAfter = secondsSince(start);
      return r;
    }
    if (x[0] != expected || x[1] != expected) {
      *text = "wrong sum " + std::to_string(x[0]);
      return ncclInternalError;
    }
  }
  return ncclSuccess;
}

}  // namespace

TEST_CASE("a destroy from a third thread while both ranks loop AllReduces: no crash, no hang, the peer is told",
          "[integration][lifetime]") {
  for (int round = 0; round < 8; ++round) {
    for (bool abort : {false, true}) {
      const int delayMs = round % 4;
      INFO("round " << round << ", " << (abort ? "ncclCommAbort" : "ncclCommDestroy") << " after " << delayMs << " ms");
      ncclComm_t comms[2] = {nullptr, nullptr};
      REQUIRE(ncclCommInitAll(comms, 2, nullptr) == ncclSuccess);
      std::atomic<bool> stop{false};
      ncclResult_t results[2] = {ncclSuccess, ncclSuccess};
      std::string texts[2];
      double after[2] = {0, 0};
      std::vector<std::thread> ranks;
      for (int r = 0; r < 2; ++r) {
        ranks.emplace_back([&, r] { results[r] = loopUntilFailure(comms[r], 2.0f, stop, &texts[r], &after[r]); });
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
      const auto destroyStart = Clock::now();
      const ncclResult_t destroyed = abort ? ncclCommAbort(comms[0]) : ncclCommDestroy(comms[0]);
      const double destroyTook = secondsSince(destroyStart);
      // Rank 1 must fail by itself, naming rank 0; rank 0's loop ends with a refusal.
      const auto waitStart = Clock::now();
      ranks[0].join();
      while (results[1] == ncclSuccess && secondsSince(waitStart) < 10 && !stop.load()) {
        if (!ranks[1].joinable()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        if (!texts[1].empty()) break;
      }
      stop.store(true);
      ranks[1].join();
      INFO("rank 0: " << results[0] << " " << texts[0]);
      INFO("rank 1: " << results[1] << " after " << after[1] << " s: " << texts[1]);
      INFO("destroy took " << destroyTook << " s");
      CHECK(destroyed == ncclSuccess);
      CHECK(destroyTook < 1.0);
      // Once destroy began, rank 0's handle takes no call: refused (being destroyed, or gone);
      // an abort also ends the call in progress.
      CHECK((results[0] == ncclInvalidUsage || results[0] == ncclInvalidArgument));
      if (abort) {
        CHECK_THAT(texts[0], Catch::Contains("being destroyed") || Catch::Contains("not a live communicator") ||
                                 Catch::Contains("aborted (ncclCommAbort was called") ||
                                 Catch::Contains("the communicator was aborted during"));
      } else {
        CHECK_THAT(texts[0], Catch::Contains("being destroyed") || Catch::Contains("not a live communicator"));
      }
      // Rank 1 learns it from their connection, or (when the collective was still making its
      // connections) from rank 0's closed bootstrap listener, waiting for its message or
      // sending, or from the FIFO rank 0 withdrew.
      CHECK(results[1] == ncclRemoteError);
      CHECK_THAT(texts[1], Catch::Contains(abort ? "rank 0's communicator was aborted (ncclCommAbort)"
                                                 : "rank 0's communicator was destroyed (ncclCommDestroy)") ||
                               (Catch::Contains("no longer listens") &&
                                (Catch::Contains("rank 0 at 127.0.0.1:") || Catch::Contains("rank 0 no longer"))) ||
                               Catch::Contains("the peer withdrew FIFO"));
      CHECK(after[1] < 2.0);
      // The stale handle stays refused, and never names another communicator.
      int n = 0;
      CHECK(ncclCommCount(comms[0], &n) == ncclInvalidArgument);
      CHECK(ncclCommDestroy(comms[0]) == ncclInvalidArgument);
      CHECK(ncclCommDestroy(comms[1]) == ncclSuccess);
    }
  }
}

TEST_CASE("a stale handle never drives a newer communicator", "[integration][lifetime]") {
  std::vector<ncclComm_t> stale;
  for (int i = 0; i < 64; ++i) {
    ncclComm_t c = nullptr;
    REQUIRE(ncclCommInitAll(&c, 1, nullptr) == ncclSuccess);
    stale.push_back(c);
    REQUIRE(ncclCommDestroy(c) == ncclSuccess);
  }
  ncclComm_t fresh = nullptr;
  REQUIRE(ncclCommInitAll(&fresh, 1, nullptr) == ncclSuccess);
  for (ncclComm_t s : stale) {
    CHECK(s != fresh);  // never handed out again
    float x = 1.0f;
    CHECK(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, s, nullptr) == ncclInvalidArgument);
    CHECK_THAT(ncclGetLastError(nullptr), Catch::Contains("not a live communicator"));
    CHECK(ncclCommDestroy(s) == ncclInvalidArgument);
    CHECK(ncclCommAbort(s) == ncclInvalidArgument);
  }
  float x = 3.0f;
  CHECK(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, fresh, nullptr) == ncclSuccess);
  CHECK(x == 3.0f);
  CHECK(ncclCommDestroy(fresh) == ncclSuccess);
}

TEST_CASE("destroy is not starved by a thread that keeps calling", "[integration][lifetime]") {
  ncclComm_t c = nullptr;
  REQUIRE(ncclCommInitAll(&c, 1, nullptr) == ncclSuccess);
  std::atomic<bool> started{false};
  std::atomic<int> refused{0};
  std::thread caller([&] {
    for (;;) {
      float x[2] = {1.0f, 2.0f};
      started.store(true);
      const ncclResult_t r = ncclAllReduce(x, x, 2, ncclFloat, ncclSum, c, nullptr);
      if (r != ncclSuccess) {
        refused.store(r);
        return;
      }
    }
  });
  while (!started.load()) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto start = Clock::now();
  CHECK(ncclCommDestroy(c) == ncclSuccess);
  const double took = secondsSince(start);
  caller.join();
  INFO("destroy took " << took << " s");
  CHECK(took < 0.5);
  CHECK((refused.load() == ncclInvalidUsage || refused.load() == ncclInvalidArgument));
}

TEST_CASE("a peer destroys or aborts its communicator and lives on: the waiting rank fails naming it",
          "[integration][lifetime]") {
  for (bool abort : {false, true}) {
    INFO((abort ? "ncclCommAbort" : "ncclCommDestroy"));
    const std::string out = test::runBoth(2, [&] {
      ncclUniqueId id;
      if (ncclGetUniqueId(&id) != ncclSuccess) throw std::runtime_error("no unique id");
      return [id, abort](int rank) {
        ncclComm_t comm = nullptr;
        EXPECT_OK(ncclCommInitRank(&comm, 2, id, rank));
        for (int i = 0; i < 5; ++i) {
          float x[256];
          for (float& v : x) v = static_cast<float>(rank + 1);
          EXPECT_OK(ncclAllReduce(x, x, 256, ncclFloat, ncclSum, comm, nullptr));
          test::expect(x[255] == 3.0f, "wrong sum " + std::to_string(x[255]));
        }
        if (rank == 0) {
          EXPECT_OK(abort ? ncclCommAbort(comm) : ncclCommDestroy(comm));
          std::this_thread::sleep_for(std::chrono::seconds(4));  // alive, but its communicator is gone
          return;
        }
        float x[256] = {};
        const auto start = Clock::now();
        const ncclResult_t r = ncclAllReduce(x, x, 256, ncclFloat, ncclSum, comm, nullptr);
        const double took = secondsSince(start);
        const std::string text = ncclGetLastError(nullptr);
        ncclCommDestroy(comm);
        test::expect(r == ncclRemoteError, "result " + std::to_string(r) + ": " + text);
        test::expect(text.find(abort ? "rank 0's communicator was aborted (ncclCommAbort)"
                                     : "rank 0's communicator was destroyed (ncclCommDestroy)") != std::string::npos,
                     "text: " + text);
        test::expect(text.find("ncclAllReduce op #6") != std::string::npos, "the call not named: " + text);
        test::expect(took < 2.0, "took " + std::to_string(took) + " s");
      };
    }, std::chrono::seconds(30));
    CHECK(out == "");
  }
}
