#include "topology/topology.h"

#include <unistd.h>

#include <cstdio>
#include <sstream>

#include "core/log.h"
#include "core/params.h"
#include "core/status.h"

namespace braid::topo {

TopologyRequest TopologyRequest::fromParams() {
  auto& store = params::process();
  TopologyRequest r;
  r.topoFile = store.string("NCCL_TOPO_FILE");
  const char* virtualTopology = "/var/run/nvidia-topologyd/virtualTopology.xml";
  if (store.lookup("NCCL_TOPO_FILE").origin == params::Origin::Default && access(virtualTopology, R_OK) == 0)
    r.topoFile = virtualTopology;
  r.topoDumpFile = store.string("NCCL_TOPO_DUMP_FILE");
  r.graphFile = store.string("NCCL_GRAPH_FILE");
  r.graphDumpFile = store.string("NCCL_GRAPH_DUMP_FILE");
  int64_t maxChannels = store.integer("NCCL_MAX_NCHANNELS");
  if (maxChannels > 0) r.maxChannels = static_cast<int>(std::min<int64_t>(maxChannels, 32));
  return r;
}

std::unique_ptr<Topology> loadTopology(const TopologyRequest& request) {
  auto t = std::make_unique<Topology>();
  XmlNode detected;
  if (request.detect) detected = detectSystem(detectOptionsFromParams());
  if (!request.topoFile.empty()) {
    t->source = request.topoFile;
    t->document = readXmlFile(request.topoFile);
    if (request.detect) completeFromDetection(t->document, detected);
  } else {
    t->source = "detection";
    t->document = std::move(detected);
    if (t->document.children.empty()) {  // neither file nor detection: one empty CPU
      XmlNode& sys = t->document.add("system");
      sys.set("version", "1");
      sys.add("cpu").set("numaid", "0");
    }
  }
  assumeDevices(t->document, request.assume);
  // The dump is the document the system is built from, completions and assumptions included:
  // read back, it gives the same system and so the same channels.
  if (!request.topoDumpFile.empty()) {
    writeXmlFile(request.topoDumpFile, t->document);
    BRAID_INFO(log::kGraph, "topology written to %s", request.topoDumpFile.c_str());
  }
  t->system = buildSystem(t->document, t->source);
  t->paths = std::make_unique<Paths>(t->system);
  t->policy = PathPolicy::fromParams(t->system);
  bool ringRead = false, treeRead = false;
  if (!request.graphFile.empty()) {
    for (Graph& g : graphsFromXml(readXmlFile(request.graphFile), request.graphFile, t->system)) {
      if (g.id == 0 && !ringRead) t->ring = g, ringRead = true;
      if (g.id == 1 && !treeRead) t->tree = g, treeRead = true;
    }
    BRAID_INFO(log::kGraph, "graphs read from %s (ring %s, tree %s)", request.graphFile.c_str(),
               ringRead ? "read" : "searched", treeRead ? "read" : "searched");
  }
  SearchRequest search;
  search.nodes = request.nodes;
  search.maxChannels = request.maxChannels;
  search.policy = t->policy;
  if (!ringRead) t->ring = searchGraph(*t->paths, search);
  search.pattern = Pattern::BalancedTree;
  if (!treeRead) t->tree = searchGraph(*t->paths, search);
  if (!request.graphDumpFile.empty()) {
    writeXmlFile(request.graphDumpFile, graphsToXml({t->ring, t->tree}));
    BRAID_INFO(log::kGraph, "graphs written to %s", request.graphDumpFile.c_str());
  }
  return t;
}

PortPlan planPorts(const Topology& t, const std::string& busId, int cudaDevice) {
  const System& sys = t.system;
  PortPlan plan;
  bool named = true;  // a port the transport cannot name (a file without names) voids the plan
  auto nameOf = [&](int node) {
    const Node& n = sys.nodes[node];
    if (n.netName.empty()) named = false;
    return n.netName + ":" + std::to_string(n.port);
  };
  auto byDev = [&](int netDev) {
    const int node = sys.netOfDev(netDev);
    if (node < 0) fail(ncclInternalError, "the graph names NET/%d, which the system lacks", netDev);
    return nameOf(node);
  };
  for (const Channel& c : t.ring.channels) {
    if (c.netIn < 0 || c.netOut < 0) continue;
    plan.ringIn.push_back(byDev(c.netIn));
    plan.ringOut.push_back(byDev(c.netOut));
  }
  for (const Channel& c : t.tree.channels)
    if (c.netIn >= 0) plan.tree.push_back(byDev(c.netIn));
  int gpu = -1;
  for (int g : sys.of(NodeType::Gpu))
    if ((!busId.empty() && sys.nodes[g].busId == busId) || (busId.empty() && sys.nodes[g].dev == cudaDevice)) gpu = g;
  const int nearest = gpu >= 0 ? nearestNet(*t.paths, gpu) : -1;
  if (nearest >= 0) {
    const Path& best = t.paths->at(gpu, nearest);
    for (int net : sys.of(NodeType::Net)) {
      const Path& p = t.paths->at(gpu, net);
      if (p.type == best.type && p.bw >= best.bw - 1e-9) plan.near.push_back(nameOf(net));
    }
  }
  if (!named) return PortPlan{};
  return plan;
}

void logTopology(const Topology& t) {
  if (!log::enabled(log::Level::Info, log::kGraph)) return;
  BRAID_INFO(log::kGraph, "=== System (from %s): %d GPUs, %d NICs, %d NUMA nodes ===", t.source.c_str(),
             t.system.count(NodeType::Gpu), t.system.count(NodeType::Net), t.system.count(NodeType::Cpu));
  auto lines = [](const std::string& text) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) BRAID_INFO(log::kGraph, "%s", line.c_str());
  };
  lines(t.system.describe());
  for (const std::string& note : t.system.notes) BRAID_INFO(log::kGraph, "%s", note.c_str());
  lines(describePaths(*t.paths));
  lines(describeGraph(t.ring));
  lines(describeGraph(t.tree));
}

std::string describeDecisions(const Topology& t) {
  const System& sys = t.system;
  std::vector<int> gpus = sys.of(NodeType::Gpu);
  std::vector<int> nets = sys.of(NodeType::Net);
  std::string out;
  char buf[64];
  snprintf(buf, sizeof buf, "P2P (level %s):\n", t.policy.p2pLevel == PathType::Loc ? "LOC, disabled"
                                                                                     : pathTypeName(t.policy.p2pLevel));
  out += buf;
  for (int a : gpus) {
    snprintf(buf, sizeof buf, "  %-8s", sys.nodes[a].label().c_str());
    out += buf;
    for (int b : gpus) out += a == b ? " -" : useP2p(*t.paths, t.policy, a, b) ? " 1" : " 0";
    out += "\n";
  }
  if (!nets.empty() && !gpus.empty()) {
    snprintf(buf, sizeof buf, "GPU Direct RDMA (level %s):\n", pathTypeName(t.policy.gdrLevel));
    out += buf;
    for (int g : gpus) {
      snprintf(buf, sizeof buf, "  %-8s", sys.nodes[g].label().c_str());
      out += buf;
      for (int n : nets) out += useGdr(*t.paths, t.policy, g, n) ? " 1" : " 0";
      int near = nearestNet(*t.paths, g);
      out += "   nearest " + sys.nodes[near].label() + "\n";
    }
  }
  out += std::string("Shared memory between processes: ") + (t.policy.shmDisable ? "disabled" : "allowed") + "\n";
  return out;
}

std::string toDot(const System& sys, const std::string& title) {
  std::string out = "graph braid_topology {\n  label=\"" + title + "\";\n  labelloc=t;\n  node [fontname=Helvetica];\n"
                    "  edge [fontname=Helvetica, fontsize=10];\n";
  char buf[512];
  for (size_t i = 0; i < sys.nodes.size(); ++i) {
    const Node& n = sys.nodes[i];
    const char* style = "";
    std::string label = n.label();
    switch (n.type) {
      case NodeType::Gpu:
        style = "shape=box, style=filled, fillcolor=\"#76b900\", fontcolor=white";
        label += "\\nsm" + std::to_string(n.sm) + "\\n" + n.busId;
        break;
      case NodeType::Nvs: style = "shape=hexagon, style=filled, fillcolor=\"#9ecae1\""; label = "NVSwitch"; break;
      case NodeType::Pci: style = "shape=ellipse, style=filled, fillcolor=\"#dddddd\""; label = "PCI switch\\n" + n.busId; break;
      case NodeType::Cpu:
        style = "shape=box3d, style=filled, fillcolor=\"#fdae6b\"";
        label += "\\nNUMA " + std::to_string(n.numa);
        break;
      case NodeType::Nic: style = "shape=diamond, style=filled, fillcolor=\"#fff7bc\""; label = "NIC\\n" + (n.busId.empty() ? "virtual" : n.busId); break;
      case NodeType::Net:
        style = "shape=oval, style=\"filled,dashed\", fillcolor=\"#c7e9c0\"";
        snprintf(buf, sizeof buf, "\\n%s\\n%.1f GB/s", n.netName.c_str(), n.netBw);
        label += buf;
        break;
    }
    snprintf(buf, sizeof buf, "  n%zu [label=\"%s\", %s];\n", i, label.c_str(), style);
    out += buf;
  }
  for (size_t a = 0; a < sys.nodes.size(); ++a)
    for (const Link& l : sys.nodes[a].links) {
      if (static_cast<size_t>(l.to) < a) continue;  // each pair once
      const char* color = l.type == LinkType::Nvl ? "#2ca02c" : l.type == LinkType::Sys ? "#d62728"
                          : l.type == LinkType::Net ? "#9467bd" : l.type == LinkType::C2c ? "#ff7f0e" : "#555555";
      snprintf(buf, sizeof buf, "  n%zu -- n%d [label=\"%s %.1f\", color=\"%s\"%s];\n", a, l.to, linkTypeName(l.type),
               l.bw, color, l.type == LinkType::Nvl ? ", penwidth=2" : "");
      out += buf;
    }
  return out + "}\n";
}

}  // namespace braid::topo
