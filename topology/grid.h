// The grid of the Hier2D algorithm: ranks in rows and columns. With several nodes of equal
// size the rows are the nodes (each node's ranks in rank order, nodes numbered by their lowest
// rank) and column j holds the j-th rank of every node, so that only column steps cross nodes.
// On one node, or nodes of different sizes, the ranks in rank order fill rows of C, where R x C
// = n and R is the largest divisor of n not above sqrt(n) (a prime n gives one row: a ring).
#pragma once

#include <vector>

namespace braid::topo {

struct GridLinks {
  int rowNext = -1, rowPrev = -1;  ///< the ring within the row (this rank when the row is one rank)
  int rowSize = 1, rowIndex = 0;
  int colNext = -1, colPrev = -1;  ///< the ring within the column
  int colSize = 1, colIndex = 0;
};

/// Rows x columns of n ranks in nNodes nodes of ranksPerNode (the tuner's view: equal nodes
/// are rows when ranksPerNode x nNodes = n).
void gridShape(int n, int nNodes, int ranksPerNode, int* rows, int* cols);

/// Rank `rank`'s place in the grid; nodeOf[r] is the node of rank r (any labels).
GridLinks rankGrid(const std::vector<int>& nodeOf, int rank);

}  // namespace braid::topo
