// The machine as a graph: GPUs, PCI switches, NVSwitches, CPUs (NUMA nodes), NICs and their
// network ports, joined by directed links that carry a type and a bandwidth in GB/s.
//
// A System is built from a topology document in NCCL's XML format (whether it was read from
// NCCL_TOPO_FILE, detected on this machine, or both merged): see buildSystem(). Paths, P2P/GDR
// decisions and the channel search all work on this graph.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "topology/xml.h"

namespace braid::topo {

/// Node types, in NCCL's order.
enum class NodeType { Gpu, Pci, Nvs, Cpu, Nic, Net };
/// Link types.
enum class LinkType { Loc, Nvl, C2c, Pci, Sys, Net };

const char* nodeTypeName(NodeType type);  ///< "GPU", "PCI", "NVS", "CPU", "NIC", "NET"
const char* linkTypeName(LinkType type);  ///< "LOC", "NVL", "C2C", "PCI", "SYS", "NET"

/// Fixed bandwidths (GB/s) and the per-architecture NVLink figures NCCL uses.
constexpr double kLocalBw = 5000.0;
/// GB/s of one NVLink on an SM architecture (e.g. 90 -> 20.6).
double nvlinkBandwidth(int sm);
/// GB/s of a PCIe link from sysfs/XML text: link_speed ("16.0 GT/s PCIe", "8 GT/s") and width
/// (0 or absent means x16; an unknown speed counts as Gen3).
double pciBandwidth(const std::string& linkSpeed, int width);
/// A PCI bus id as the graph names it: lower case, with its domain ("17:00.0" ->
/// "0000:17:00.0"); "" when text is not a bus id.
std::string canonicalBusId(const std::string& text);
/// GB/s between two CPU sockets, from the CPU's arch/vendor/model.
double interCpuBandwidth(const std::string& arch, const std::string& vendor, int model);

struct Link {
  int to = -1;  ///< node index
  LinkType type = LinkType::Loc;
  double bw = 0;
};

struct Node {
  NodeType type = NodeType::Pci;
  int index = 0;       ///< position among the nodes of its type (GPU/0, NET/1, ...)
  std::string busId;   ///< PCI bus id, lower case ("0000:17:00.0"); "" for CPU and NET
  std::vector<Link> links;

  // GPU
  int dev = -1, sm = 0, rank = -1;
  bool gdr = false;
  // CPU
  int numa = -1, model = 0, family = 0;
  std::string arch, vendor, affinity;
  // NET (one port of a NIC)
  std::string netName;
  int netDev = -1, port = 0, maxConn = 0;
  double netBw = 0;  ///< GB/s
  uint64_t guid = 0;
  bool netGdr = false;

  /// "GPU/0", "NET/2", "CPU/1", "NVS/0", "PCI/0000:17:00.0", "NIC/0".
  std::string label() const;
};

struct System {
  std::vector<Node> nodes;
  /// Notes for the user about what the document left out (GPUs skipped for lack of <gpu>, ...).
  std::vector<std::string> notes;

  /// Node indices of one type, in index order.
  std::vector<int> of(NodeType type) const;
  int count(NodeType type) const { return static_cast<int>(of(type).size()); }
  /// The GPU whose rank is rank, or -1.
  int gpuOfRank(int rank) const;
  /// The NET whose dev is dev, or -1.
  int netOfDev(int dev) const;
  /// Adds a link a->b (or adds bandwidth to an existing one of the same type).
  void connect(int a, int b, LinkType type, double bw);
  /// Multi-line description: every node and its links with bandwidths.
  std::string describe() const;
};

/// Builds the graph from a topology document (a document whose child is <system>). Throws
/// braid::Error(ncclInvalidUsage) naming source and line for documents that cannot describe a
/// machine (unknown element, missing or bad attribute, NVLink to itself, absurd counts); an
/// NVLink to a GPU that is not in the document is dropped with a WARN, as is a GPU whose bus id
/// repeats. The graph holds what the document states and nothing else (a PCI device of class
/// 0x03 without <gpu> is left out, with a note; assumeDevices() writes one in first), so a
/// document written out and read back builds the same system.
System buildSystem(const XmlNode& document, const std::string& source);

}  // namespace braid::topo
