// The Hier2D grid: rows x columns, rings that close, rows that are nodes.
#include <catch2/catch.hpp>
#include <vector>

#include "topology/grid.h"

using namespace braid::topo;

namespace {

/// Checks the grid of nodeOf: every rank in one row ring and one column ring of the right
/// sizes, positions that follow the rings. Returns the links.
std::vector<GridLinks> checkGrid(const std::vector<int>& nodeOf, int rows, int cols) {
  const int n = static_cast<int>(nodeOf.size());
  std::vector<GridLinks> g;
  for (int r = 0; r < n; ++r) g.push_back(rankGrid(nodeOf, r));
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    REQUIRE(g[r].rowSize == cols);
    REQUIRE(g[r].colSize == rows);
    REQUIRE(g[g[r].rowNext].rowPrev == r);
    REQUIRE(g[g[r].colNext].colPrev == r);
    CHECK(g[g[r].rowNext].rowIndex == (g[r].rowIndex + 1) % cols);
    CHECK(g[g[r].colNext].colIndex == (g[r].colIndex + 1) % rows);
    CHECK(g[g[r].rowNext].colIndex == g[r].colIndex);  // the same row
    CHECK(g[g[r].colNext].rowIndex == g[r].rowIndex);  // the same column
  }
  return g;
}

}  // namespace

TEST_CASE("grid: one node factorises n as R x C, R the largest divisor up to sqrt(n)", "[grid]") {
  const int expect[][3] = {{1, 1, 1}, {2, 1, 2}, {3, 1, 3}, {4, 2, 2}, {6, 2, 3}, {8, 2, 4}, {9, 3, 3}, {12, 3, 4}, {7, 1, 7}};
  for (const auto& e : expect) {
    INFO(e[0] << " ranks");
    int rows = 0, cols = 0;
    gridShape(e[0], 1, e[0], &rows, &cols);
    CHECK(rows == e[1]);
    CHECK(cols == e[2]);
    checkGrid(std::vector<int>(e[0], 0), rows, cols);
  }
}

TEST_CASE("grid: equal nodes are the rows, columns cross them", "[grid]") {
  for (int nodes = 2; nodes <= 5; ++nodes) {
    for (int per = 1; per <= 4; ++per) {
      INFO(nodes << " nodes of " << per);
      std::vector<int> nodeOf;
      for (int r = 0; r < nodes * per; ++r) nodeOf.push_back(r / per);
      int rows = 0, cols = 0;
      gridShape(nodes * per, nodes, per, &rows, &cols);
      CHECK(rows == nodes);
      CHECK(cols == per);
      const auto g = checkGrid(nodeOf, nodes, per);
      for (int r = 0; r < nodes * per; ++r) {
        CHECK(nodeOf[g[r].rowNext] == nodeOf[r]);  // rows stay within a node
        if (nodes > 1) CHECK(nodeOf[g[r].colNext] != nodeOf[r]);
      }
    }
  }
  // Nodes by any labels: node "5" = {0, 2}, node "1" = {1, 3}: rows {0, 2} and {1, 3}.
  const auto g = checkGrid({5, 1, 5, 1}, 2, 2);
  CHECK(g[0].rowNext == 2);
  CHECK(g[0].colNext == 1);
  // Unequal nodes (3 + 1): the factorisation in rank order.
  checkGrid({0, 0, 0, 1}, 2, 2);
}
