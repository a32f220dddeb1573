// The channel search: sets of rings (or trees) through every GPU that a collective runs in
// parallel, each channel with its own bandwidth reserved on every link it crosses.
//
// For each candidate worst path type (best first) and each speed of a fixed list (fastest
// first), channels are found one at a time by depth-first search, closest GPU first, until no
// further channel fits in the links' remaining bandwidth; the set with the most total bandwidth
// (channels x speed) wins, ties going to the better path type, then the faster speed. Across
// machines (nodes > 1) each channel enters and leaves through a network port, spreading
// channels over the ports; the worst GPU-port path a channel may take is a limit of its own,
// tried nearest first, so at equal bandwidth channels use the ports nearest their GPUs. The result reads and writes NCCL's graph dump format
// (NCCL_GRAPH_DUMP_FILE / NCCL_GRAPH_FILE).
#pragma once

#include <string>
#include <vector>

#include "topology/paths.h"
#include "topology/xml.h"

namespace braid::topo {

/// NCCL's graph patterns.
enum class Pattern { BalancedTree = 1, SplitTree = 2, Tree = 3, Ring = 4, Nvls = 5, CollnetDirect = 6 };

struct Channel {
  std::vector<int> gpus;  ///< GPU devs in order
  int netIn = -1, netOut = -1;  ///< net devs, -1 within one machine
};

struct Graph {
  int id = 0;  ///< ring 0, tree 1 (NCCL's numbering)
  Pattern pattern = Pattern::Ring;
  int crossNic = 0;
  double bwIntra = 0, bwInter = 0, latencyInter = 0;
  PathType typeIntra = PathType::Loc, typeInter = PathType::Loc;
  bool sameChannels = true;
  std::vector<Channel> channels;
};

/// The network ports ("mlx5_0:1": device and port) a rank's connections to other machines use,
/// as the graphs place them. Ring channel c receives through the port its graph channel
/// (c modulo their count) enters by and sends through the one it leaves by; tree channel c
/// uses its tree channel's port; send/recv and the grid use the ports nearest the rank's GPU.
/// An empty list leaves the choice to the transport (it spreads connections over its ports).
struct PortPlan {
  std::vector<std::string> ringIn, ringOut, tree, near;
};

struct SearchRequest {
  Pattern pattern = Pattern::Ring;  ///< Ring or BalancedTree
  int nodes = 1;                    ///< machines like this one (>1 adds network ports)
  int maxChannels = 16;
  PathPolicy policy;
};

/// Searches channels on a system's GPUs. A system without GPUs gives a graph without channels.
Graph searchGraph(const Paths& paths, const SearchRequest& request);

/// "Pattern 4, crossNic 0, nChannels 2, bw 40.000000/40.000000, type NVL/PIX, sameChannels 1"
/// followed by one line per channel (" 0 : NET/0 GPU/0 ... NET/0").
std::string describeGraph(const Graph& graph);

/// <graphs version="1"> holding one <graph> per element of graphs.
XmlNode graphsToXml(const std::vector<Graph>& graphs);
/// Reads graphs back (NCCL_GRAPH_FILE), checking them against the system: every GPU dev and
/// net dev must exist, a ring must visit every GPU once. Throws ncclInvalidUsage naming the
/// line on anything else.
std::vector<Graph> graphsFromXml(const XmlNode& document, const std::string& source, const System& system);

}  // namespace braid::topo
