// ncclCommWindowRegister / ncclCommWindowDeregister: a collective registration that every rank
// makes with the same size and flags, of memory aligned to NCCL_WIN_REQUIRED_ALIGNMENT. A rank
// whose own arguments are wrong still takes part, so every rank fails instead of waiting.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "harness/ranks.h"
#include "test_env.h"

using namespace braid;
using braid::test::expect;

namespace {

/// 3 ranks; register(rank, comm, buffer of 2 pages, &win) returns what that rank's call gave.
std::string withRanks(const std::function<void(int, ncclComm_t, char*)>& body) {
  return test::runBoth(3, [&] {
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    return [id, body](int rank) {
      ncclComm_t comm = nullptr;
      EXPECT_OK(ncclCommInitRank(&comm, 3, id, rank));
      void* buffer = nullptr;
      EXPECT_OK(ncclMemAlloc(&buffer, 8192));
      body(rank, comm, static_cast<char*>(buffer));
      EXPECT_OK(ncclMemFree(buffer));
      EXPECT_OK(ncclCommDestroy(comm));
    };
  });
}

std::string lastError() { return ncclGetLastError(nullptr); }

}  // namespace

TEST_CASE("windows: every rank registers and deregisters; handles are checked", "[integration][window]") {
  CHECK(withRanks([](int, ncclComm_t comm, char* buffer) {
          ncclWindow_t a = nullptr, b = nullptr;
          EXPECT_OK(ncclCommWindowRegister(comm, buffer, 8192, &a, NCCL_WIN_DEFAULT));
          EXPECT_OK(ncclCommWindowRegister(comm, buffer, 4096, &b, NCCL_WIN_COLL_SYMMETRIC));
          expect(a != nullptr && b != nullptr && a != b, "two windows, two handles");
          expect(comm->windows().size() == 2, "two windows kept");
          EXPECT_OK(ncclCommWindowDeregister(comm, a));
          expect(ncclCommWindowDeregister(comm, a) == ncclInvalidArgument, "a second deregister is refused");
          expect(lastError().find("is not a window of this communicator") != std::string::npos, lastError());
          expect(ncclCommWindowDeregister(comm, nullptr) == ncclInvalidArgument, "NULL win");
          EXPECT_OK(ncclCommWindowDeregister(comm, b));
          // Inside a group the handle is filled at ncclGroupEnd.
          ncclWindow_t c = nullptr;
          EXPECT_OK(ncclGroupStart());
          EXPECT_OK(ncclCommWindowRegister(comm, buffer, 8192, &c, NCCL_WIN_DEFAULT));
          EXPECT_OK(ncclGroupEnd());
          expect(c != nullptr, "the group filled the handle");
          EXPECT_OK(ncclCommWindowDeregister(comm, c));
          expect(ncclCommWindowRegister(comm, buffer, 8192, nullptr, 0) == ncclInvalidArgument, "NULL win pointer");
        }) == "");
}

TEST_CASE("windows: one rank's bad arguments or a different size fail every rank", "[integration][window]") {
  // Rank 1 misaligned: it is refused with the reason, the others with its rank.
  CHECK(withRanks([](int rank, ncclComm_t comm, char* buffer) {
          ncclWindow_t w = nullptr;
          const ncclResult_t r = ncclCommWindowRegister(comm, buffer + (rank == 1 ? 64 : 0), 4096, &w, 0);
          expect(w == nullptr, "no handle on failure");
          if (rank == 1) {
            expect(r == ncclInvalidArgument && lastError().find("NCCL_WIN_REQUIRED_ALIGNMENT") != std::string::npos,
                   "rank 1: " + lastError());
          } else {
            expect(r == ncclInvalidUsage && lastError().find("rank 1's window registration was refused") != std::string::npos,
                   "rank " + std::to_string(rank) + ": " + lastError());
          }
          expect(comm->windows().size() == 0, "nothing kept");
        }) == "");
  // Rank 2 registers a different size; then flags 0x80.
  CHECK(withRanks([](int rank, ncclComm_t comm, char* buffer) {
          ncclWindow_t w = nullptr;
          const ncclResult_t r = ncclCommWindowRegister(comm, buffer, rank == 2 ? 8192 : 4096, &w, 0);
          expect(r == ncclInvalidUsage && lastError().find("every rank must register the same size") != std::string::npos,
                 "rank " + std::to_string(rank) + ": " + lastError());
          const ncclResult_t f = ncclCommWindowRegister(comm, buffer, 4096, &w, 0x80);
          expect(f == ncclInvalidArgument && lastError().find("winFlags is 0x80") != std::string::npos,
                 "rank " + std::to_string(rank) + ": " + lastError());
          // The communicator still works afterwards.
          std::vector<float> x(100, 1.0f);
          EXPECT_OK(ncclAllReduce(x.data(), x.data(), 100, ncclFloat, ncclSum, comm, nullptr));
          expect(x[99] == 3.0f, "AllReduce after refused windows");
        }) == "");
}
