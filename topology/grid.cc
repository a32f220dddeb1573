#include "topology/grid.h"

#include "topology/trees.h"

namespace braid::topo {

void gridShape(int n, int nNodes, int ranksPerNode, int* rows, int* cols) {
  if (nNodes > 1 && ranksPerNode * nNodes == n) {
    *rows = nNodes;
    *cols = ranksPerNode;
    return;
  }
  int r = 1;
  for (int d = 1; d * d <= n; ++d)
    if (n % d == 0) r = d;
  *rows = r;
  *cols = n / r;
}

GridLinks rankGrid(const std::vector<int>& nodeOf, int rank) {
  const int n = static_cast<int>(nodeOf.size());
  const std::vector<std::vector<int>> members = nodeMembers(nodeOf);
  bool equal = true;
  for (const auto& m : members) equal = equal && m.size() == members[0].size();
  int rows, cols;
  gridShape(n, static_cast<int>(members.size()), equal ? static_cast<int>(members[0].size()) : 0, &rows, &cols);
  // at(row, col): the rank there.
  const bool byNodes = rows == static_cast<int>(members.size()) && rows > 1 && equal;
  auto at = [&](int row, int col) { return byNodes ? members[row][col] : row * cols + col; };
  GridLinks g;
  g.rowSize = cols;
  g.colSize = rows;
  int myRow = 0, myCol = 0;
  for (int row = 0; row < rows; ++row)
    for (int col = 0; col < cols; ++col)
      if (at(row, col) == rank) {
        myRow = row;
        myCol = col;
      }
  g.rowIndex = myCol;
  g.colIndex = myRow;
  g.rowNext = at(myRow, (myCol + 1) % cols);
  g.rowPrev = at(myRow, (myCol + cols - 1) % cols);
  g.colNext = at((myRow + 1) % rows, myCol);
  g.colPrev = at((myRow + rows - 1) % rows, myCol);
  return g;
}

}  // namespace braid::topo
