#include "topology/trees.h"

#include <algorithm>
#include <map>

namespace braid::topo {

namespace {

/// Tree 0 over [0, n): node 0 the root with one child, the others in order by their lowest
/// set bit (the child of 0 is the largest power of two below n).
TreeLinks inOrderTree(int n, int v) {
  TreeLinks t;
  int low = 1;
  if (v == 0) {
    while (low < n) low *= 2;  // the smallest power of two >= n: the root's "bit"
  } else {
    low = v & -v;
    const int up = (v ^ low) | (low * 2);  // the parent one level up, or past the end ...
    t.parent = up < n ? up : (v ^ low);    // ... then the node this one was the nearest descendant of
  }
  if (v != 0 && low >= 2) t.children[t.nChildren++] = v - low / 2;
  // The right child: the nearest of v + low/2, v + low/4, ... still within [0, n). (For the
  // root, with no left half, that is its only child.)
  for (int step = low / 2; step >= 1; step /= 2) {
    if (v + step < n) {
      t.children[t.nChildren++] = v + step;
      break;
    }
  }
  return t;
}

int relabel(int x, int n, int which, bool inverse) {
  if (x < 0 || which == 0) return x;
  if (n % 2 == 0) return n - 1 - x;                  // mirrored: its own inverse
  return inverse ? (x + n - 1) % n : (x + 1) % n;    // shifted by one
}

}  // namespace

TreeLinks nodeTree(int nNodes, int v, int which) {
  const TreeLinks base = inOrderTree(nNodes, relabel(v, nNodes, which, true));
  TreeLinks t;
  t.parent = relabel(base.parent, nNodes, which, false);
  t.nChildren = base.nChildren;
  for (int i = 0; i < base.nChildren; ++i) t.children[i] = relabel(base.children[i], nNodes, which, false);
  return t;
}

std::vector<std::vector<int>> nodeMembers(const std::vector<int>& nodeOf) {
  std::map<int, int> indexOf;
  std::vector<std::vector<int>> members;
  for (int r = 0; r < static_cast<int>(nodeOf.size()); ++r) {
    auto [it, added] = indexOf.emplace(nodeOf[r], static_cast<int>(members.size()));
    if (added) members.emplace_back();
    members[it->second].push_back(r);
  }
  return members;
}

TreeLinks rankTree(const std::vector<int>& nodeOf, int rank, int which) {
  const std::vector<std::vector<int>> members = nodeMembers(nodeOf);
  int node = 0;
  while (std::find(members[node].begin(), members[node].end(), rank) == members[node].end()) ++node;
  const std::vector<int>& chain = members[node];
  const int at = static_cast<int>(std::find(chain.begin(), chain.end(), rank) - chain.begin());
  TreeLinks t;
  if (at + 1 < static_cast<int>(chain.size())) t.children[t.nChildren++] = chain[at + 1];
  if (at > 0) {
    t.parent = chain[at - 1];
    return t;
  }
  const TreeLinks across = nodeTree(static_cast<int>(members.size()), node, which);
  if (across.parent >= 0) t.parent = members[across.parent][0];
  for (int i = 0; i < across.nChildren; ++i) t.children[t.nChildren++] = members[across.children[i]][0];
  return t;
}

int treeDepth(int nNodes, int ranksPerNode) {
  int deepest = 0;
  for (int v = 0; v < nNodes; ++v) {
    int hops = 0;
    for (int x = v; x > 0; x = inOrderTree(nNodes, x).parent) ++hops;
    deepest = std::max(deepest, hops);
  }
  return deepest + std::max(0, ranksPerNode - 1);
}

}  // namespace braid::topo
