// The Tree algorithm's trees: every rank reached once, links agree both ways, depth bounded,
// and the two binary trees complement each other.
#include <catch2/catch.hpp>
#include <set>
#include <vector>

#include "topology/trees.h"

using namespace braid::topo;

namespace {

/// Checks that links[r] (r in [0, n)) form one tree: one root, each child's parent is the
/// rank that lists it, everyone reachable. Returns the depth.
int checkTree(const std::vector<TreeLinks>& links) {
  const int n = static_cast<int>(links.size());
  int roots = 0, root = -1;
  std::vector<int> listedBy(n, -1);
  for (int r = 0; r < n; ++r) {
    if (links[r].parent < 0) {
      ++roots;
      root = r;
    }
    REQUIRE(links[r].nChildren <= kTreeMaxChildren);
    for (int i = 0; i < links[r].nChildren; ++i) {
      const int c = links[r].children[i];
      REQUIRE(c >= 0);
      REQUIRE(c < n);
      REQUIRE(listedBy[c] == -1);  // nobody is a child twice
      listedBy[c] = r;
    }
  }
  REQUIRE(roots == 1);
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    REQUIRE(listedBy[r] == links[r].parent);
  }
  int depth = 0;
  for (int r = 0; r < n; ++r) {
    int hops = 0;
    for (int x = r; x != root; x = links[x].parent) {
      ++hops;
      REQUIRE(hops <= n);  // no cycle
    }
    depth = std::max(depth, hops);
  }
  return depth;
}

int ceilLog2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

}  // namespace

TEST_CASE("tree: both binary trees over 1 to 70 nodes are trees of logarithmic depth", "[trees]") {
  for (int n = 1; n <= 70; ++n) {
    INFO(n << " nodes");
    for (int which = 0; which < 2; ++which) {
      std::vector<TreeLinks> links;
      for (int v = 0; v < n; ++v) links.push_back(nodeTree(n, v, which));
      for (const TreeLinks& t : links) REQUIRE(t.nChildren <= 2);
      const int depth = checkTree(links);
      CHECK(depth <= ceilLog2(n) + 1);
      CHECK(depth == treeDepth(n, 1));
    }
  }
}

TEST_CASE("tree: known shapes", "[trees]") {
  // 6 nodes, tree 0: 0 -> 4 -> {2 -> {1, 3}, 5}.
  CHECK(nodeTree(6, 0, 0).parent == -1);
  CHECK(nodeTree(6, 0, 0).nChildren == 1);
  CHECK(nodeTree(6, 0, 0).children[0] == 4);
  CHECK(nodeTree(6, 4, 0).children[0] == 2);
  CHECK(nodeTree(6, 4, 0).children[1] == 5);
  CHECK(nodeTree(6, 5, 0).parent == 4);
  CHECK(nodeTree(6, 3, 0).parent == 2);
  // Tree 1 mirrors it (even count): 5 -> 1 -> {3 -> {4, 2}, 0}.
  CHECK(nodeTree(6, 5, 1).parent == -1);
  CHECK(nodeTree(6, 5, 1).children[0] == 1);
  CHECK(nodeTree(6, 0, 1).parent == 1);
  // 5 nodes, tree 1 shifts tree 0 (0 -> 4 -> 2 -> {1, 3}) by one: 1 -> 0 -> 3 -> {2, 4}.
  CHECK(nodeTree(5, 1, 1).parent == -1);
  CHECK(nodeTree(5, 1, 1).children[0] == 0);
  CHECK(nodeTree(5, 0, 1).children[0] == 3);
  CHECK(nodeTree(5, 4, 1).parent == 3);
  // One node: a root alone.
  CHECK(nodeTree(1, 0, 0).parent == -1);
  CHECK(nodeTree(1, 0, 0).nChildren == 0);
}

TEST_CASE("tree: the two trees complement each other: few nodes are inner in both", "[trees]") {
  for (int n = 2; n <= 64; ++n) {
    INFO(n << " nodes");
    int both = 0;
    for (int v = 0; v < n; ++v)
      if (nodeTree(n, v, 0).nChildren > 0 && nodeTree(n, v, 1).nChildren > 0) ++both;
    CHECK(both <= 2);
  }
}

TEST_CASE("tree: ranks chained within nodes, heads in the binary tree", "[trees]") {
  for (int n = 1; n <= 20; ++n) {
    for (int perNode = 1; perNode <= 5; ++perNode) {
      INFO(n << " ranks, " << perNode << " per node");
      std::vector<int> nodeOf;
      for (int r = 0; r < n; ++r) nodeOf.push_back(r / perNode);
      const int nodes = (n + perNode - 1) / perNode;
      for (int which = 0; which < 2; ++which) {
        std::vector<TreeLinks> links;
        for (int r = 0; r < n; ++r) links.push_back(rankTree(nodeOf, r, which));
        const int depth = checkTree(links);
        CHECK(depth <= treeDepth(nodes, std::min(n, perNode)));
        for (int r = 0; r < n; ++r) {
          if (r % perNode != 0) CHECK(links[r].parent == r - 1);  // within the chain
          if (r % perNode == 0 && links[r].parent >= 0) CHECK(links[r].parent % perNode == 0);  // head to head
        }
      }
    }
  }
  // Nodes by any labels, in any order: numbered by their lowest rank.
  const std::vector<int> nodeOf = {7, 3, 7, 3};  // node "7" = {0, 2}, node "3" = {1, 3}
  const TreeLinks r0 = rankTree(nodeOf, 0, 0), r1 = rankTree(nodeOf, 1, 0), r2 = rankTree(nodeOf, 2, 0);
  CHECK(r0.parent == -1);
  CHECK(r2.parent == 0);
  CHECK(r1.parent == 0);
  CHECK(rankTree(nodeOf, 3, 0).parent == 1);
}
