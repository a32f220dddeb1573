#include "topology/paths.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <strings.h>

#include "core/log.h"
#include "core/params.h"

namespace braid::topo {

namespace {
const char* const kPathNames[] = {"LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS", "NET", "DIS"};
}

const char* pathTypeName(PathType type) { return kPathNames[static_cast<int>(type)]; }

bool parsePathLevel(const std::string& text, PathType* level) {
  for (int i = 0; i <= static_cast<int>(PathType::Sys); ++i)
    if (strcasecmp(text.c_str(), kPathNames[i]) == 0) {
      *level = static_cast<PathType>(i);
      return true;
    }
  char* end = nullptr;
  long v = strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 0) return false;
  static const PathType legacy[] = {PathType::Loc, PathType::Pix, PathType::Pxb, PathType::Phb, PathType::Sys};
  *level = v >= 4 ? PathType::Sys : legacy[v];
  return true;
}

Paths::Paths(const System& system)
    : system_(system), n_(static_cast<int>(system.nodes.size())), paths_(static_cast<size_t>(n_) * n_) {
  for (int s = 0; s < n_; ++s) fromSource(s);
  markPxn();
}

namespace {

bool forwards(const Node& n, bool allNvlSoFar, LinkType arrived, LinkType next) {
  switch (n.type) {
    case NodeType::Gpu: return allNvlSoFar && next == LinkType::Nvl;
    case NodeType::Nic: return arrived == LinkType::Net || next == LinkType::Net;  // only to/from its ports
    case NodeType::Net: return false;
    default: return true;
  }
}

PathType classify(const System& sys, const std::vector<int>& route, const std::vector<LinkType>& links) {
  if (route.size() == 1) return PathType::Loc;
  bool allNvl = std::all_of(links.begin(), links.end(), [](LinkType t) { return t == LinkType::Nvl; });
  int switches = 0, cpus = 0, gpusInside = 0;
  for (size_t i = 1; i + 1 < route.size(); ++i) {
    NodeType t = sys.nodes[route[i]].type;
    switches += t == NodeType::Pci;
    cpus += t == NodeType::Cpu;
    gpusInside += t == NodeType::Gpu;
  }
  if (allNvl) return gpusInside ? PathType::Nvb : PathType::Nvl;
  bool c2c = std::find(links.begin(), links.end(), LinkType::C2c) != links.end();
  bool sysLink = std::find(links.begin(), links.end(), LinkType::Sys) != links.end();
  if (sysLink) return PathType::Sys;
  if (c2c) return links.size() == 1 ? PathType::C2c : PathType::P2c;
  bool cpuEnd = sys.nodes[route.front()].type == NodeType::Cpu || sys.nodes[route.back()].type == NodeType::Cpu;
  if (cpus || cpuEnd) return PathType::Phb;
  return switches <= 1 ? PathType::Pix : PathType::Pxb;
}

}  // namespace

void Paths::fromSource(int source) {
  // Breadth-first over states (node, "only NVLinks so far"); within one depth the higher
  // bottleneck wins. The second half of the state lets a GPU forward NVLink traffic only.
  struct State {
    double bw = -1;
    int prev = -1;  // previous state id
    LinkType via = LinkType::Loc;
  };
  std::vector<State> states(static_cast<size_t>(n_) * 2);
  auto id = [](int node, bool nvl) { return node * 2 + (nvl ? 1 : 0); };
  std::vector<int> frontier = {id(source, true)};
  states[id(source, true)].bw = kLocalBw;
  std::vector<int> depthOf(states.size(), -1);
  depthOf[id(source, true)] = 0;
  for (int depth = 1; !frontier.empty(); ++depth) {
    std::vector<int> next;
    for (int sid : frontier) {
      int node = sid / 2;
      bool nvl = sid % 2;
      const Node& n = system_.nodes[node];
      for (const Link& l : n.links) {
        if (node != source && !forwards(n, nvl, states[sid].via, l.type)) continue;
        int to = id(l.to, nvl && l.type == LinkType::Nvl);
        double bw = std::min(states[sid].bw, l.bw);
        if (depthOf[to] >= 0 && depthOf[to] < depth) continue;
        if (depthOf[to] < 0) next.push_back(to);
        if (bw > states[to].bw) {
          states[to] = {bw, sid, l.type};
          depthOf[to] = depth;
        }
      }
    }
    frontier = std::move(next);
  }
  for (int dest = 0; dest < n_; ++dest) {
    // Of the two states of dest, the shallower; at equal depth the wider.
    int best = -1;
    for (int s : {id(dest, true), id(dest, false)}) {
      if (depthOf[s] < 0) continue;
      if (best < 0 || depthOf[s] < depthOf[best] || (depthOf[s] == depthOf[best] && states[s].bw > states[best].bw))
        best = s;
    }
    Path& p = paths_[source * n_ + dest];
    if (best < 0) continue;  // DIS
    std::vector<int> route;
    std::vector<LinkType> links;
    for (int s = best; s >= 0; s = states[s].prev) {
      route.push_back(s / 2);
      if (states[s].prev >= 0) links.push_back(states[s].via);
    }
    std::reverse(route.begin(), route.end());
    std::reverse(links.begin(), links.end());
    p.bw = states[best].bw;
    p.hops = depthOf[best];
    p.type = classify(system_, route, links);
    p.nodes = std::move(route);
    p.links = std::move(links);
  }
}

void Paths::markPxn() {
  // A GPU far from a NIC (beyond PXB) reaches it through an NVLink peer that sits near it.
  for (int g : system_.of(NodeType::Gpu))
    for (int net : system_.of(NodeType::Net)) {
      Path& direct = paths_[g * n_ + net];
      if (direct.type <= PathType::Pxb) continue;
      for (int peer : system_.of(NodeType::Gpu)) {
        const Path& toPeer = at(g, peer);
        const Path& peerNet = at(peer, net);
        if (peer == g || toPeer.type > PathType::Nvl || peerNet.type > PathType::Pxb) continue;
        double bw = std::min(toPeer.bw, peerNet.bw);
        if (direct.type == PathType::Pxn && bw <= direct.bw) continue;
        direct.type = PathType::Pxn;
        direct.bw = bw;
        direct.hops = toPeer.hops + peerNet.hops;
        direct.nodes = toPeer.nodes;
        direct.nodes.insert(direct.nodes.end(), peerNet.nodes.begin() + 1, peerNet.nodes.end());
        direct.links = toPeer.links;
        direct.links.insert(direct.links.end(), peerNet.links.begin(), peerNet.links.end());
      }
    }
}

PathType levelFromParams(const char* name, PathType fallback) {
  const std::string text = params::process().string(name);
  PathType level = fallback;
  if (!text.empty() && !parsePathLevel(text, &level)) {
    BRAID_WARN("%s=\"%s\" is not a path level (LOC, NVL, PIX, PXB, PHB, SYS or 0..4); using %s", name, text.c_str(),
               pathTypeName(fallback));
    return fallback;
  }
  return level;
}

PathPolicy PathPolicy::fromParams(const System& system) {
  auto& store = params::process();
  PathPolicy policy;
  std::vector<int> cpus = system.of(NodeType::Cpu);
  bool amd = !cpus.empty() && system.nodes[cpus[0]].vendor == "AuthenticAMD" && system.nodes[cpus[0]].arch == "x86_64";
  if (amd && system.count(NodeType::Gpu) <= 2) policy.p2pLevel = PathType::Sys;
  policy.p2pLevel = levelFromParams("NCCL_P2P_LEVEL", policy.p2pLevel);
  policy.gdrLevel = levelFromParams("NCCL_NET_GDR_LEVEL", policy.gdrLevel);
  if (store.integer("NCCL_P2P_DISABLE") == 1) policy.p2pLevel = PathType::Loc;
  policy.shmDisable = store.integer("NCCL_SHM_DISABLE") == 1;
  int64_t cross = store.integer("NCCL_CROSS_NIC");
  if (cross < 0 || cross > 2) BRAID_WARN("NCCL_CROSS_NIC=%lld is not 0, 1 or 2; using 2", static_cast<long long>(cross));
  else policy.crossNic = static_cast<int>(cross);
  return policy;
}

bool useP2p(const Paths& paths, const PathPolicy& policy, int gpuA, int gpuB) {
  if (policy.p2pLevel == PathType::Loc) return false;
  const Path& p = paths.at(gpuA, gpuB);
  return p.type != PathType::Dis && p.type <= policy.p2pLevel;
}

bool useGdr(const Paths& paths, const PathPolicy& policy, int gpu, int net) {
  const System& sys = paths.system();
  if (!sys.nodes[gpu].gdr || !sys.nodes[net].netGdr) return false;
  const Path& p = paths.at(gpu, net);
  return p.type != PathType::Dis && p.type <= policy.gdrLevel;
}

int nearestNet(const Paths& paths, int gpu) {
  int best = -1;
  for (int net : paths.system().of(NodeType::Net)) {
    const Path& p = paths.at(gpu, net);
    if (p.type == PathType::Dis) continue;
    if (best < 0) {
      best = net;
      continue;
    }
    const Path& b = paths.at(gpu, best);
    if (p.type < b.type || (p.type == b.type && p.bw > b.bw)) best = net;
  }
  return best;
}

std::string describePaths(const Paths& paths) {
  const System& sys = paths.system();
  std::vector<int> gpus = sys.of(NodeType::Gpu);
  std::vector<int> nets = sys.of(NodeType::Net);
  std::string out;
  char cell[64];
  auto table = [&](const char* title, const std::vector<int>& cols) {
    if (gpus.empty() || cols.empty()) return;
    out += title;
    out += "\n        ";
    for (int c : cols) {
      snprintf(cell, sizeof cell, "%-11s", sys.nodes[c].label().c_str());
      out += cell;
    }
    out += "\n";
    for (int g : gpus) {
      snprintf(cell, sizeof cell, "%-8s", sys.nodes[g].label().c_str());
      out += cell;
      for (int c : cols) {
        const Path& p = paths.at(g, c);
        if (g == c) snprintf(cell, sizeof cell, "%-11s", "X");
        else snprintf(cell, sizeof cell, "%s/%-7.1f", pathTypeName(p.type), p.bw);
        out += cell;
      }
      out += "\n";
    }
  };
  table("GPU x GPU paths (type/GB/s):", gpus);
  table("GPU x NET paths (type/GB/s):", nets);
  return out;
}

}  // namespace braid::topo
