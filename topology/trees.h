// The trees of the Tree algorithm: NCCL's double binary tree across nodes, a chain within
// each node.
//
// Nodes are numbered by their lowest rank, and the ranks of a node are chained in rank order
// (its first rank, the node's head, is the chain's top). Across nodes, heads form a binary
// tree over node indices; two complementary trees exist so that a channel pair uses every
// head's send and receive bandwidth: in tree 0 node 0 is the root and the others form an
// in-order binary tree (node v's children are v -/+ half its lowest set bit), which makes
// every odd node a leaf; tree 1 is tree 0 mirrored (v -> N-1-v) when N is even, and shifted by
// one (v -> v+1 mod N) when it is odd, so that the leaves of one are mostly the inner nodes of
// the other. A rank's tree neighbours: its parent (the rank above it in the chain, or for a
// head the parent node's head) and up to three children (the next rank in its chain and, for
// a head, up to two child nodes' heads).
#pragma once

#include <vector>

namespace braid::topo {

constexpr int kTreeMaxChildren = 3;

struct TreeLinks {
  int parent = -1;  ///< -1 at the root
  int children[kTreeMaxChildren] = {-1, -1, -1};
  int nChildren = 0;
};

/// The binary tree `which` (0 or 1) over nodes [0, nNodes) as seen by node v: its parent node
/// (-1 at the root) and up to two children.
TreeLinks nodeTree(int nNodes, int v, int which);

/// Rank `rank`'s neighbours in tree `which` (0 or 1). nodeOf[r] is the node of rank r: any
/// labels, numbered here by their lowest rank.
TreeLinks rankTree(const std::vector<int>& nodeOf, int rank, int which);

/// The ranks of each node (nodeOf[r] is rank r's node, any labels): nodes in the order of
/// their lowest rank, each node's ranks in rank order. Tree and Hier2D's grid both start here.
std::vector<std::vector<int>> nodeMembers(const std::vector<int>& nodeOf);

/// Levels of the tree (the most hops from the root to any rank), for the tuner: the chain of
/// the largest node plus the binary tree's depth over nNodes.
int treeDepth(int nNodes, int ranksPerNode);

}  // namespace braid::topo
