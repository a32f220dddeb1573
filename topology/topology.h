// The topology as the library and braid-topo use it: one entry point that reads or detects
// the machine (a file is completed by detection and by what braid-topo is told to assume),
// dumps the document the system is built from (so the dump holds every GPU and NIC used),
// computes paths, finds (or reads) the ring and tree channels, dumps them and logs them, all
// steered by NCCL's variables.
#pragma once

#include <memory>
#include <string>

#include "topology/detect.h"
#include "topology/search.h"

namespace braid::topo {

struct TopologyRequest {
  std::string topoFile;       ///< NCCL_TOPO_FILE ("" = detect only)
  bool detect = true;         ///< complete (or, without a file, make) the document by detection
  DeviceAssumptions assume;   ///< written into the document before it is dumped and built
  int nodes = 1;              ///< machines like this one the channels must cross
  std::string topoDumpFile;   ///< NCCL_TOPO_DUMP_FILE
  std::string graphFile;      ///< NCCL_GRAPH_FILE
  std::string graphDumpFile;  ///< NCCL_GRAPH_DUMP_FILE
  int maxChannels = 16;

  /// NCCL_TOPO_FILE (unset: /var/run/nvidia-topologyd/virtualTopology.xml when it exists),
  /// NCCL_TOPO_DUMP_FILE, NCCL_GRAPH_FILE, NCCL_GRAPH_DUMP_FILE, NCCL_MAX_NCHANNELS.
  static TopologyRequest fromParams();
};

struct Topology {
  std::string source;  ///< the file read, or "detection"
  XmlNode document;
  System system;
  std::unique_ptr<Paths> paths;
  PathPolicy policy;
  Graph ring, tree;
};

/// Builds everything `request` asks for. Throws braid::Error on a bad file (with its line) or
/// an unwritable dump file.
std::unique_ptr<Topology> loadTopology(const TopologyRequest& request);

/// Where this rank's network connections go (see PortPlan), for the rank whose GPU has bus id
/// `busId` ("0000:17:00.0"; "" unknown: then the GPU whose dev is cudaDevice; neither: the
/// graphs alone).
PortPlan planPorts(const Topology& topology, const std::string& busId, int cudaDevice);

/// The system and the channels at INFO level, subsystem GRAPH.
void logTopology(const Topology& topology);

/// P2P (GPU x GPU) and GDR (GPU x NET) decisions as text tables of 1/0.
std::string describeDecisions(const Topology& topology);

/// The graph in Graphviz DOT: GPUs, switches, CPUs, NICs and ports drawn distinctly, each
/// link labelled with its type and bandwidth.
std::string toDot(const System& system, const std::string& title);

}  // namespace braid::topo
