// The peers each point-to-point algorithm connects: symmetric (both ends of every connection
// ask for it), never the rank itself, log2 n of them for the recursive algorithms and every
// rank for Direct and Pairwise; and the partners of small cases written out.
#include <catch2/catch.hpp>
#include <algorithm>
#include <set>

#include "datapath/algorithm_peers.h"

using braid::kernels::Algo;
using braid::datapath::algorithmPeers;

namespace {
bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }
int ceilLog2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}
}  // namespace

TEST_CASE("algorithm peers: symmetric, bounded, never the rank itself", "[unit][runtime]") {
  for (Algo a : {Algo::kRecDoubling, Algo::kHalvingDoubling, Algo::kBinomial, Algo::kBruck, Algo::kDirect,
                 Algo::kPairwise}) {
    for (int n = 1; n <= 70; ++n) {
      for (int r = 0; r < n; ++r) {
        const std::vector<int> peers = algorithmPeers(a, n, r);
        INFO("algo " << static_cast<int>(a) << " n " << n << " rank " << r);
        REQUIRE(std::is_sorted(peers.begin(), peers.end()));
        REQUIRE(!contains(peers, r));
        for (int q : peers) {
          REQUIRE((q >= 0 && q < n));
          REQUIRE(contains(algorithmPeers(a, n, q), r));
        }
        const bool everyone = a == Algo::kDirect || a == Algo::kPairwise;
        if (everyone) {
          REQUIRE(static_cast<int>(peers.size()) == n - 1);
        } else {
          REQUIRE(static_cast<int>(peers.size()) <= 2 * ceilLog2(n) + 1);
        }
      }
    }
  }
}

TEST_CASE("algorithm peers: the partners of small cases", "[unit][runtime]") {
  // 6 ranks: p = 4, ranks 0 and 2 sit out (their odd neighbours stand for them), then the
  // virtual ranks 0..3 are ranks 1, 3, 4, 5.
  CHECK(algorithmPeers(Algo::kRecDoubling, 6, 0) == std::vector<int>{1});
  CHECK(algorithmPeers(Algo::kRecDoubling, 6, 1) == std::vector<int>{0, 3, 4});
  CHECK(algorithmPeers(Algo::kHalvingDoubling, 6, 5) == std::vector<int>{3, 4});
  CHECK(algorithmPeers(Algo::kRecDoubling, 64, 0).size() == 6u);
  CHECK(algorithmPeers(Algo::kBinomial, 8, 0) == std::vector<int>{1, 2, 4, 6, 7});
  CHECK(algorithmPeers(Algo::kBruck, 5, 2) == std::vector<int>{0, 1, 3, 4});
  CHECK(algorithmPeers(Algo::kBinomial, 1, 0).empty());
}

TEST_CASE("algorithm peers: only Direct and Pairwise connect every rank on every rank count", "[unit][runtime]") {
  using braid::datapath::connectsEveryPeer;
  for (int a = 0; a < static_cast<int>(Algo::kCount); ++a) {
    const Algo algo = static_cast<Algo>(a);
    if (algo == Algo::kRing || algo == Algo::kTree || algo == Algo::kHier2D) continue;  // (not peer sets)
    bool everyRankEveryCount = true;
    for (int n = 1; n <= 33; ++n)
      for (int r = 0; r < n; ++r) everyRankEveryCount &= static_cast<int>(algorithmPeers(algo, n, r).size()) == n - 1;
    CAPTURE(a);
    CHECK(connectsEveryPeer(algo) == everyRankEveryCount);
  }
  // RecDoubling on 3 ranks: rank 1 has both others, rank 0 only one (why a count cannot decide).
  CHECK(algorithmPeers(Algo::kRecDoubling, 3, 1).size() == 2);
  CHECK(algorithmPeers(Algo::kRecDoubling, 3, 0).size() == 1);
}

TEST_CASE("algorithm peers: the log-n algorithms together stay within logPeersBound", "[unit][runtime]") {
  // (the host's send/recv FIFOs above 8 ranks share a budget over this many partners)
  using braid::datapath::logPeersBound;
  for (int n : {2, 3, 8, 9, 16, 17, 100, 255, 256, 257, 1000, 1024, 4096}) {
    for (int r : {0, 1, n / 2, n - 1}) {
      std::set<int> all;
      for (Algo a : {Algo::kRecDoubling, Algo::kHalvingDoubling, Algo::kBinomial, Algo::kBruck})
        for (int p : algorithmPeers(a, n, r)) all.insert(p);
      CAPTURE(n, r);
      CHECK(static_cast<int>(all.size()) <= logPeersBound(n));
    }
  }
  CHECK(logPeersBound(1024) == 30);
  CHECK(logPeersBound(1000) == 30);
  CHECK(logPeersBound(9) == 12);
}
