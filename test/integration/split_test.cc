// ncclCommSplit and ncclCommShrink: membership, ordering, nesting, nonblocking.
#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "comm/communicator.h"
#include "comm/split.h"
#include "harness/ranks.h"
#include "test_env.h"

using namespace braid;
using braid::test::expect;


namespace {

/// Initialises rank `rank` of n on `id` and returns the communicator.
ncclComm_t initRank(const ncclUniqueId& id, int n, int rank) {
  ncclComm_t comm = nullptr;
  EXPECT_OK(ncclCommInitRank(&comm, n, id, rank));
  return comm;
}

/// Every member learns every other member's parent rank through the child's own channel.
std::vector<int> parentRanksSeenBy(ncclComm_t child, int parentRank) {
  const int n = child->identity().nRanks;
  std::vector<int> all(n, -1);
  all[child->identity().rank] = parentRank;
  child->bootstrap().allGather(all.data(), sizeof(int));
  return all;
}

std::string show(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += std::to_string(x) + " ";
  return s;
}

}  // namespace

TEST_CASE("split orders members by key then rank", "[split]") {
  // colours 0 1 0 1 0 1, keys 5 5 1 0 1 9
  const std::vector<int> colors = {0, 1, 0, 1, 0, 1}, keys = {5, 5, 1, 0, 1, 9};
  CHECK(comm::splitMembers(colors, keys, 0) == std::vector<int>{2, 4, 0});
  CHECK(comm::splitMembers(colors, keys, 1) == std::vector<int>{3, 1, 5});
  CHECK(comm::splitMembers(colors, keys, 7).empty());
}

TEST_CASE("ncclCommSplit by parity with reversed keys, NOCOLOR, nested", "[integration][split]") {
  const int n = 8;
  auto makeBody = [&] {
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    return [id, n](int rank) {
      ncclComm_t parent = initRank(id, n, rank);
      // Rank 7 opts out; the others split by parity, ordered by descending parent rank.
      const int color = rank == 7 ? NCCL_SPLIT_NOCOLOR : rank % 2;
      ncclComm_t child = nullptr;
      EXPECT_OK(ncclCommSplit(parent, color, -rank, &child, nullptr));
      if (rank == 7) {
        expect(child == nullptr, "NOCOLOR gives NULL");
      } else {
        const std::vector<int> expected = rank % 2 == 0 ? std::vector<int>{6, 4, 2, 0} : std::vector<int>{5, 3, 1};
        const std::vector<int> seen = parentRanksSeenBy(child, rank);
        expect(seen == expected, "members " + show(seen));
        // Nested: split the child in halves by its own rank, keys equal (order by child rank).
        int childRank = -1;
        EXPECT_OK(ncclCommUserRank(child, &childRank));
        ncclComm_t grandchild = nullptr;
        EXPECT_OK(ncclCommSplit(child, childRank / 2, 0, &grandchild, nullptr));
        int count = 0, r = -1;
        EXPECT_OK(ncclCommCount(grandchild, &count));
        EXPECT_OK(ncclCommUserRank(grandchild, &r));
        const int expectedCount = (childRank / 2 == 0) ? 2 : static_cast<int>(expected.size()) - 2;
        expect(count == expectedCount && r == childRank % 2, "grandchild " + std::to_string(r) + "/" +
                                                                 std::to_string(count));
        grandchild->bootstrap().barrier();
        EXPECT_OK(ncclCommDestroy(grandchild));
        EXPECT_OK(ncclCommDestroy(child));
      }
      EXPECT_OK(ncclCommDestroy(parent));
    };
  };
  REQUIRE(test::runBoth(n, makeBody) == "");
}

TEST_CASE("split inside a group from one thread, and nonblocking split", "[integration][split]") {
  const int n = 4;
  std::vector<ncclComm_t> parents(n), children(n);
  REQUIRE(ncclCommInitAll(parents.data(), n, nullptr) == ncclSuccess);
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < n; ++r) REQUIRE(ncclCommSplit(parents[r], 0, 0, &children[r], nullptr) == ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  for (int r = 0; r < n; ++r) {
    int v = -1;
    REQUIRE(ncclCommUserRank(children[r], &v) == ncclSuccess);
    CHECK(v == r);
    REQUIRE(ncclCommDestroy(children[r]) == ncclSuccess);
  }

  REQUIRE(test::runThreads(n, [&](int rank) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t child = nullptr;
    const ncclResult_t r = ncclCommSplit(parents[rank], rank < 2 ? 0 : 1, 0, &child, &config);
    expect(r == ncclInProgress || r == ncclSuccess, "split returned " + std::to_string(r));
    const ncclResult_t state = test::settle(child);
    expect(state == ncclSuccess, "state " + std::to_string(state));
    expect(child->identity().nRanks == 2 && child->identity().rank == rank % 2, "nonblocking child position");
    EXPECT_OK(ncclCommDestroy(child));
  }) == "");
  for (auto p : parents) REQUIRE(ncclCommDestroy(p) == ncclSuccess);
}

TEST_CASE("ncclCommShrink drops excluded ranks, which take no part", "[integration][shrink]") {
  const int n = 5;
  auto makeBody = [&] {
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    return [id, n](int rank) {
      ncclComm_t parent = initRank(id, n, rank);
      int excluded[] = {3, 1};
      if (rank == 1 || rank == 3) {
        // An excluded rank must not call shrink; it may simply leave (or be dead).
        int dummy[] = {rank};
        ncclComm_t none = nullptr;
        expect(ncclCommShrink(parent, dummy, 1, &none, nullptr, NCCL_SHRINK_DEFAULT) == ncclInvalidUsage,
               "a rank excluding itself is refused");
        EXPECT_OK(ncclCommAbort(parent));
        return;
      }
      ncclComm_t child = nullptr;
      EXPECT_OK(ncclCommShrink(parent, excluded, 2, &child, nullptr, rank == 4 ? NCCL_SHRINK_ABORT : NCCL_SHRINK_DEFAULT));
      const std::vector<int> seen = parentRanksSeenBy(child, rank);
      expect(seen == std::vector<int>({0, 2, 4}), "survivors " + show(seen));
      EXPECT_OK(ncclCommDestroy(child));
      EXPECT_OK(ncclCommDestroy(parent));
    };
  };
  REQUIRE(test::runBoth(n, makeBody) == "");
}

TEST_CASE("split and shrink reject bad arguments by name", "[integration][split]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comm = nullptr;
  REQUIRE(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess);
  ncclComm_t child = nullptr;
  CHECK(ncclCommSplit(comm, -5, 0, &child, nullptr) == ncclInvalidArgument);
  CHECK_THAT(ncclGetLastError(nullptr), Catch::Contains("color is -5"));
  CHECK(ncclCommSplit(comm, 0, 0, nullptr, nullptr) == ncclInvalidArgument);
  int list[] = {4};
  CHECK(ncclCommShrink(comm, list, 1, &child, nullptr, 0) == ncclInvalidArgument);
  CHECK_THAT(ncclGetLastError(nullptr), Catch::Contains("excludeRanksCount is 1"));
  CHECK(ncclCommShrink(comm, nullptr, 0, &child, nullptr, 9) == ncclInvalidArgument);
  CHECK_THAT(ncclGetLastError(nullptr), Catch::Contains("shrinkFlags is 9"));
  REQUIRE(ncclCommRevoke(comm, 0) == ncclSuccess);
  CHECK(ncclCommFinalize(comm) == ncclInvalidUsage);
  CHECK(ncclCommSplit(comm, 0, 0, &child, nullptr) == ncclInvalidUsage);
  REQUIRE(ncclCommDestroy(comm) == ncclSuccess);
}
