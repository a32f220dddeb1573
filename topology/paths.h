// Paths between the nodes of a System, and the decisions NCCL takes from them.
//
// A path is the route with the fewest links, ties going to the higher bottleneck bandwidth.
// GPUs forward only NVLink traffic (a GPU between two NVLinks makes NVB); NICs and network
// ports never forward. Its type says what it crosses, best first: LOC (itself), NVL (NVLink,
// maybe through NVSwitch), NVB (NVLink through another GPU), C2C, PIX (one PCI switch), PXB
// (several), P2C (C2C then PCI), PXN (to a NIC through an NVLink peer GPU), PHB (a CPU), SYS
// (between CPUs), NET (between machines).
#pragma once

#include <string>
#include <vector>

#include "topology/system.h"

namespace braid::topo {

enum class PathType { Loc, Nvl, Nvb, C2c, Pix, Pxb, P2c, Pxn, Phb, Sys, Net, Dis };

const char* pathTypeName(PathType type);  ///< "LOC" ... "DIS"
/// Parses a level as NCCL does for NCCL_P2P_LEVEL / NCCL_NET_GDR_LEVEL: a path name
/// (case-insensitive) or a legacy integer (0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 and above SYS).
/// Returns false for anything else.
bool parsePathLevel(const std::string& text, PathType* level);
/// The level parameter `name` names (NCCL_P2P_LEVEL, NCCL_NET_GDR_LEVEL), `fallback` when unset
/// or (with a warning) not a level.
PathType levelFromParams(const char* name, PathType fallback);

struct Path {
  PathType type = PathType::Dis;
  double bw = 0;          ///< bottleneck, GB/s
  int hops = 0;           ///< links crossed
  std::vector<int> nodes; ///< from source to destination, both included
  std::vector<LinkType> links;  ///< links[i] joins nodes[i] and nodes[i+1]
};

/// All-pairs paths of a system.
class Paths {
 public:
  explicit Paths(const System& system);
  const Path& at(int from, int to) const { return paths_[from * n_ + to]; }
  const System& system() const { return system_; }

 private:
  void fromSource(int source);
  void markPxn();
  const System& system_;
  int n_;
  std::vector<Path> paths_;
};

/// The knobs that turn paths into decisions, read once from the parameter registry.
struct PathPolicy {
  PathType p2pLevel = PathType::Pxb;  ///< P2P when the GPU-GPU path is at most this
  PathType gdrLevel = PathType::Pxb;  ///< GPU Direct RDMA when the GPU-NIC path is at most this
  bool shmDisable = false;
  int crossNic = 2;                   ///< 0 never, 1 allowed, 2 try without then with

  /// From NCCL_P2P_DISABLE, NCCL_P2P_LEVEL, NCCL_NET_GDR_LEVEL, NCCL_SHM_DISABLE, NCCL_CROSS_NIC;
  /// the P2P default follows NCCL (PXB, SYS on AMD x86 with at most 2 GPUs). Bad values WARN and
  /// keep the default.
  static PathPolicy fromParams(const System& system);
};

/// P2P between two GPUs (node indices).
bool useP2p(const Paths& paths, const PathPolicy& policy, int gpuA, int gpuB);
/// GPU Direct RDMA between a GPU and a NET port (node indices): both must support it and the
/// path must be near enough.
bool useGdr(const Paths& paths, const PathPolicy& policy, int gpu, int net);
/// The NET port nearest a GPU (best path type, then bandwidth, then lowest dev), or -1.
int nearestNet(const Paths& paths, int gpu);

/// Text tables: GPU x GPU and GPU x NET, each cell "TYPE/bw".
std::string describePaths(const Paths& paths);

}  // namespace braid::topo
