// Several roots (ncclCommInitRankScalable): which ranks each serves, and what root 0 accepts
// from the others.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "bootstrap/admission.h"
#include "bootstrap/wire.h"

using namespace braid;
using namespace braid::bootstrap;

namespace {
Registration registration(int nRanks, int nRoots, int rootIndex) {
  Registration r{};
  r.nRanks = nRanks;
  r.nRoots = nRoots;
  r.rootIndex = rootIndex;
  r.firstRootSecret = 42;
  return r;
}
std::vector<net::SocketAddress::Packed> someAddresses(int count) {
  std::vector<net::SocketAddress::Packed> a(count);
  for (int i = 0; i < count; ++i) a[i].port = static_cast<uint16_t>(1000 + i);
  return a;
}
}  // namespace

TEST_CASE("unique ids split the ranks as NCCL does: contiguous, the first roots one more", "[unit][bootstrap]") {
  CHECK(blockOfRoot(0, 10, 3).first == 0);
  CHECK(blockOfRoot(0, 10, 3).count == 4);
  CHECK(blockOfRoot(1, 10, 3).first == 4);
  CHECK(blockOfRoot(1, 10, 3).count == 3);
  CHECK(blockOfRoot(2, 10, 3).first == 7);
  CHECK(blockOfRoot(2, 10, 3).count == 3);
  for (int nRanks : {1, 2, 3, 7, 8, 10, 64, 1000, 1024}) {
    for (int nRoots : {1, 2, 3, 7, 8, 64}) {
      if (nRoots > nRanks) continue;
      CAPTURE(nRanks, nRoots);
      int next = 0;
      for (int j = 0; j < nRoots; ++j) {
        const RankBlock b = blockOfRoot(j, nRanks, nRoots);
        REQUIRE(b.first == next);
        REQUIRE((b.count == nRanks / nRoots || b.count == nRanks / nRoots + 1));
        for (int r = b.first; r < b.first + b.count; ++r) REQUIRE(rootOfRank(r, nRanks, nRoots) == j);
        next += b.count;
      }
      REQUIRE(next == nRanks);
    }
  }
}

TEST_CASE("root 0 of several completes with its own ranks and every other root's block", "[unit][bootstrap]") {
  Admission a;  // root 0 of 3, for 10 ranks: ranks 0-3, then blocks 1 (4-6) and 2 (7-9)
  for (int r = 0; r < 4; ++r) REQUIRE(a.admit(r, registration(10, 3, 0), "x"));
  CHECK_FALSE(a.complete());
  REQUIRE(a.admitBlock(BlockHead{10, 3, 2, 7, 3, 0}, someAddresses(3), "root 2"));
  CHECK_FALSE(a.complete());
  a.timeOut("root 0", std::chrono::seconds(5));
  CHECK_THAT(a.error(), Catch::Contains("ranks 4, 5 and 6 of 10"));
}

TEST_CASE("a root serves only its block; blocks that disagree are refused", "[unit][bootstrap]") {
  SECTION("a rank at the wrong root") {
    Admission a;
    REQUIRE(a.admit(4, registration(10, 3, 1), "x"));
    CHECK_FALSE(a.admit(0, registration(10, 3, 1), "y"));
    CHECK_THAT(a.error(), Catch::Contains("rank 0 came to unique id 1 of 3, which serves ranks 4 to 6"));
  }
  SECTION("ranks that count the ids differently") {
    Admission a;
    REQUIRE(a.admit(0, registration(10, 3, 0), "x"));
    CHECK_FALSE(a.admit(1, registration(10, 2, 0), "y"));
    CHECK_THAT(a.error(), Catch::Contains("do all ranks pass the same ids in the same order?"));
  }
  SECTION("more ids than ranks") {
    Admission a;
    CHECK_FALSE(a.admit(0, registration(2, 3, 0), "x"));
    CHECK_THAT(a.error(), Catch::Contains("there are 1 to nranks ids"));
  }
  SECTION("a block with the wrong ranks") {
    Admission a;
    REQUIRE(a.admit(0, registration(10, 3, 0), "x"));
    CHECK_FALSE(a.admitBlock(BlockHead{10, 3, 1, 3, 4, 0}, someAddresses(4), "root 1"));
    CHECK_THAT(a.error(), Catch::Contains("where id 1 serves ranks 4 (+3)"));
  }
  SECTION("a block sent twice") {
    Admission a;
    REQUIRE(a.admitBlock(BlockHead{10, 3, 1, 4, 3, 0}, someAddresses(3), "root 1"));
    CHECK_FALSE(a.admitBlock(BlockHead{10, 3, 1, 4, 3, 0}, someAddresses(3), "root 1 again"));
    CHECK_THAT(a.error(), Catch::Contains("two roots both sent the ranks of unique id 1"));
  }
  SECTION("a block sent to a root that is not root 0") {
    Admission a;
    REQUIRE(a.admit(4, registration(10, 3, 1), "x"));
    CHECK_FALSE(a.admitBlock(BlockHead{10, 3, 2, 7, 3, 0}, someAddresses(3), "root 2"));
    CHECK_THAT(a.error(), Catch::Contains("to a root that is id 1 of 3"));
  }
  SECTION("a block with fewer addresses than it says") {
    Admission a;
    CHECK_FALSE(a.admitBlock(BlockHead{10, 3, 1, 4, 3, 0}, someAddresses(2), "root 1"));
    CHECK_THAT(a.error(), Catch::Contains("2 addresses"));
  }
}

TEST_CASE("root 0's table places every block's addresses at its ranks", "[unit][bootstrap]") {
  Admission a;
  for (int r = 0; r < 4; ++r) {
    Registration reg = registration(10, 3, 0);
    reg.listenAddress.port = static_cast<uint16_t>(r);
    REQUIRE(a.admit(r, reg, "x"));
  }
  auto block = [](int first, int count) {
    std::vector<net::SocketAddress::Packed> v(count);
    for (int i = 0; i < count; ++i) v[i].port = static_cast<uint16_t>(first + i);
    return v;
  };
  REQUIRE(a.admitBlock(BlockHead{10, 3, 2, 7, 3, 0}, block(7, 3), "root 2"));
  REQUIRE(a.admitBlock(BlockHead{10, 3, 1, 4, 3, 0}, block(4, 3), "root 1"));
  REQUIRE(a.complete());
  const auto all = a.addresses();
  REQUIRE(all.size() == 10);
  for (int r = 0; r < 10; ++r) CHECK(all[r].port == r);
}
