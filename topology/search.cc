#include "topology/search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "core/status.h"

namespace braid::topo {

namespace {

constexpr double kEps = 1e-9;
constexpr long kMaxStepsPerChannel = 1 << 18;  // bounds the search on large or odd machines

// Speeds (GB/s per channel) tried within a machine and across machines, fastest first.
const std::vector<double>& intraSpeeds(int sm) {
  static const std::vector<double> hopper = {60, 50, 40, 30, 24, 20, 15, 12, 11, 6, 3};
  static const std::vector<double> other = {40, 30, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3};
  return sm >= 90 ? hopper : other;
}
const std::vector<double>& interSpeeds(int sm) {
  static const std::vector<double> hopper = {48, 45, 40, 30, 24, 20, 15, 12, 6, 3, 2.4, 1.2, 0.24, 0.12};
  static const std::vector<double> other = {48, 30, 28, 24, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3, 2.4, 1.2, 0.24, 0.12};
  return sm >= 90 ? hopper : other;
}

/// Bandwidth still free on every directed link.
class Budget {
 public:
  explicit Budget(const System& sys) : sys_(sys) {
    for (const Node& n : sys.nodes) {
      free_.emplace_back();
      for (const Link& l : n.links) free_.back().push_back(l.bw);
    }
  }
  bool fits(const Path& p, double bw) const {
    for (size_t i = 0; i + 1 < p.nodes.size(); ++i)
      if (free_[p.nodes[i]][index(p, i)] < bw - kEps) return false;
    return true;
  }
  void take(const Path& p, double bw) { add(p, -bw); }
  void give(const Path& p, double bw) { add(p, bw); }

 private:
  size_t index(const Path& p, size_t hop) const {
    const auto& links = sys_.nodes[p.nodes[hop]].links;
    for (size_t k = 0; k < links.size(); ++k)
      if (links[k].to == p.nodes[hop + 1] && links[k].type == p.links[hop]) return k;
    fail(ncclInternalError, "path hop %zu has no link", hop);
  }
  void add(const Path& p, double bw) {
    for (size_t i = 0; i + 1 < p.nodes.size(); ++i) free_[p.nodes[i]][index(p, i)] += bw;
  }
  const System& sys_;
  std::vector<std::vector<double>> free_;
};

/// Finds channels one by one at one speed, within one worst path type, reserving as it goes.
class ChannelFinder {
 public:
  ChannelFinder(const Paths& paths, const SearchRequest& req, PathType limit, PathType netLimit, double speed,
                int crossNic)
      : paths_(paths), sys_(paths.system()), req_(req), limit_(limit), netLimit_(netLimit), speed_(speed),
        crossNic_(crossNic),
        budget_(sys_) {
    for (int g : sys_.of(NodeType::Gpu)) gpus_.push_back(g);
    std::sort(gpus_.begin(), gpus_.end(), [&](int a, int b) { return sys_.nodes[a].rank < sys_.nodes[b].rank; });
    nets_ = sys_.of(NodeType::Net);
  }

  bool tree() const { return req_.pattern != Pattern::Ring; }
  bool multiNode() const { return req_.nodes > 1; }

  /// The next channel (its links reserved), or false when none fits.
  bool next(Channel* out, int channelIndex) {
    steps_ = 0;
    if (multiNode()) {
      if (nets_.empty()) return false;
      for (size_t k = 0; k < nets_.size(); ++k) {
        int net = nets_[(channelIndex + k) % nets_.size()];
        std::vector<int> firsts = byCloseness(net, gpus_);
        for (int first : firsts) {
          if (!reserve(net, first)) continue;
          order_ = {first};
          netIn_ = net;
          if (dfs()) return emit(out);
          release(net, first);
        }
      }
      return false;
    }
    order_ = {gpus_.front()};
    netIn_ = -1;
    return dfs() ? emit(out) : false;
  }

 private:
  std::vector<int> byCloseness(int from, std::vector<int> to) const {
    std::stable_sort(to.begin(), to.end(), [&](int a, int b) {
      const Path& pa = paths_.at(from, a);
      const Path& pb = paths_.at(from, b);
      if (pa.type != pb.type) return pa.type < pb.type;
      return pa.bw > pb.bw + kEps;
    });
    return to;
  }

  bool isNet(int node) const { return sys_.nodes[node].type == NodeType::Net; }

  // A hop a->b: a ring uses it one way, a tree both ways (reduce up, broadcast down).
  bool reserve(int a, int b) {
    const Path& ab = paths_.at(a, b);
    if (ab.type == PathType::Dis) return false;
    if (isNet(a) || isNet(b) ? ab.type > netLimit_ : ab.type > limit_) return false;
    const Path& ba = paths_.at(b, a);
    if (!budget_.fits(ab, speed_)) return false;
    budget_.take(ab, speed_);
    if (tree()) {
      if (!budget_.fits(ba, speed_)) {
        budget_.give(ab, speed_);
        return false;
      }
      budget_.take(ba, speed_);
    }
    return true;
  }
  void release(int a, int b) {
    budget_.give(paths_.at(a, b), speed_);
    if (tree()) budget_.give(paths_.at(b, a), speed_);
  }

  bool dfs() {
    if (++steps_ > kMaxStepsPerChannel) return false;
    if (order_.size() == gpus_.size()) return close();
    int current = order_.back();
    for (int cand : byCloseness(current, gpus_)) {
      if (std::find(order_.begin(), order_.end(), cand) != order_.end()) continue;
      if (!reserve(current, cand)) continue;
      order_.push_back(cand);
      if (dfs()) return true;
      order_.pop_back();
      release(current, cand);
    }
    return false;
  }

  // The end of a channel: back to the first GPU (a ring in one machine), out to a network
  // port (a ring across machines), nothing more (a tree).
  bool close() {
    int last = order_.back();
    netOut_ = -1;
    if (tree()) {
      netOut_ = netIn_;
      return true;
    }
    if (!multiNode()) {
      if (order_.size() == 1) return true;
      if (!reserve(last, order_.front())) return false;
      return true;
    }
    // Crossing allowed: leave by the port nearest the last GPU (the entry port when it is as near).
    std::vector<int> outs = {netIn_};
    if (crossNic_) {
      outs = byCloseness(last, nets_);
      const Path& viaEntry = paths_.at(last, netIn_);
      const Path& best = paths_.at(last, outs.front());
      if (viaEntry.type == best.type && viaEntry.bw >= best.bw - kEps) {
        outs.erase(std::find(outs.begin(), outs.end(), netIn_));
        outs.insert(outs.begin(), netIn_);
      }
    }
    for (int net : outs)
      if (reserve(last, net)) {
        netOut_ = net;
        return true;
      }
    return false;
  }

  bool emit(Channel* out) {
    out->gpus.clear();
    for (int g : order_) out->gpus.push_back(sys_.nodes[g].dev);
    out->netIn = netIn_ >= 0 ? sys_.nodes[netIn_].netDev : -1;
    out->netOut = netOut_ >= 0 ? sys_.nodes[netOut_].netDev : -1;
    return true;
  }

  const Paths& paths_;
  const System& sys_;
  const SearchRequest& req_;
  PathType limit_;     // the worst GPU-GPU path a channel may take
  PathType netLimit_;  // the worst GPU-NET path
  double speed_;
  int crossNic_;
  Budget budget_;
  std::vector<int> gpus_, nets_, order_;
  int netIn_ = -1, netOut_ = -1;
  long steps_ = 0;
};

// The worst path types a channel crosses, inside the machine and to the network.
void measureTypes(const Paths& paths, Graph& g) {
  const System& sys = paths.system();
  g.typeIntra = PathType::Loc;
  g.typeInter = PathType::Loc;
  for (const Channel& c : g.channels) {
    std::vector<int> nodes;
    for (int dev : c.gpus)
      for (int n : sys.of(NodeType::Gpu))
        if (sys.nodes[n].dev == dev) nodes.push_back(n);
    size_t hops = nodes.size() > 1 ? nodes.size() - (g.pattern == Pattern::Ring && c.netIn < 0 ? 0 : 1) : 0;
    for (size_t i = 0; i < hops; ++i)
      g.typeIntra = std::max(g.typeIntra, paths.at(nodes[i], nodes[(i + 1) % nodes.size()]).type);
    if (c.netIn >= 0) g.typeInter = std::max(g.typeInter, paths.at(nodes.front(), sys.netOfDev(c.netIn)).type);
    int exitGpu = g.pattern == Pattern::Ring ? nodes.back() : nodes.front();  // a tree's port hangs off its root
    if (c.netOut >= 0) g.typeInter = std::max(g.typeInter, paths.at(exitGpu, sys.netOfDev(c.netOut)).type);
  }
  g.sameChannels = std::all_of(g.channels.begin(), g.channels.end(), [&](const Channel& c) {
    return c.gpus == g.channels[0].gpus && c.netIn == g.channels[0].netIn && c.netOut == g.channels[0].netOut;
  });
}

}  // namespace

Graph searchGraph(const Paths& paths, const SearchRequest& request) {
  const System& sys = paths.system();
  Graph best;
  best.id = request.pattern == Pattern::Ring ? 0 : 1;
  best.pattern = request.pattern;
  std::vector<int> gpus = sys.of(NodeType::Gpu);
  if (gpus.empty()) return best;
  int sm = sys.nodes[gpus[0]].sm;
  bool multi = request.nodes > 1;
  const std::vector<double>& speeds = multi ? interSpeeds(sm) : intraSpeeds(sm);
  std::set<PathType> limits;
  for (int a : gpus)
    for (int b : gpus)
      if (paths.at(a, b).type != PathType::Dis) limits.insert(paths.at(a, b).type);
  // Across machines, ports nearer the GPUs are tried first (PIX before PXB ...): at equal
  // bandwidth the first set found stands.
  std::set<PathType> netLimits = {PathType::Dis};
  if (multi) {
    netLimits.clear();
    for (int g : gpus)
      for (int n : sys.of(NodeType::Net))
        if (paths.at(g, n).type != PathType::Dis) netLimits.insert(paths.at(g, n).type);
    if (netLimits.empty()) netLimits.insert(PathType::Dis);
  }
  std::vector<int> crossings = {0};
  if (multi && request.policy.crossNic == 1) crossings = {1};
  if (multi && request.policy.crossNic == 2) crossings = {0, 1};
  int maxChannels = std::max(1, request.maxChannels);
  double bestTotal = 0;
  for (PathType limit : limits) {
    for (PathType netLimit : netLimits) {
      for (double speed : speeds) {
        if (speed * maxChannels <= bestTotal + kEps) break;
        for (int cross : crossings) {
          ChannelFinder finder(paths, request, limit, netLimit, speed, cross);
          Graph g = best;
          g.channels.clear();
          Channel c;
          while (static_cast<int>(g.channels.size()) < maxChannels &&
                 finder.next(&c, static_cast<int>(g.channels.size()))) {
            g.channels.push_back(c);
            if (gpus.size() == 1 && !multi) break;  // nothing to share: one channel says it all
          }
          double total = speed * static_cast<double>(g.channels.size());
          if (g.channels.empty()) continue;
          measureTypes(paths, g);
          // More bandwidth wins; at equal bandwidth, nearer network ports (crossing NICs may
          // let a ring leave from a GPU beside its port).
          bool better = total > bestTotal + kEps ||
                        (total > bestTotal - kEps && !best.channels.empty() && g.typeInter < best.typeInter);
          if (better) {
            bestTotal = total;
            g.bwIntra = g.bwInter = speed;
            g.crossNic = cross;
            best = std::move(g);
          }
        }
      }
    }
  }
  if (best.channels.empty()) {
    // Nothing fits even the slowest speed: one channel in rank order at whatever it gets.
    Channel c;
    std::vector<int> order = gpus;
    std::sort(order.begin(), order.end(), [&](int a, int b) { return sys.nodes[a].rank < sys.nodes[b].rank; });
    double bw = kLocalBw;
    for (size_t i = 0; i + 1 < order.size(); ++i) bw = std::min(bw, paths.at(order[i], order[i + 1]).bw);
    for (int g : order) c.gpus.push_back(sys.nodes[g].dev);
    if (multi && !sys.of(NodeType::Net).empty()) {
      int net = nearestNet(paths, order[0]);
      c.netIn = c.netOut = sys.nodes[net].netDev;
      bw = std::min(bw, paths.at(order[0], net).bw);
    }
    best.channels = {c};
    best.bwIntra = best.bwInter = bw;
  }
  measureTypes(paths, best);
  return best;
}

std::string describeGraph(const Graph& graph) {
  char buf[256];
  snprintf(buf, sizeof buf, "Pattern %d, crossNic %d, nChannels %zu, bw %f/%f, type %s/%s, sameChannels %d\n",
           static_cast<int>(graph.pattern), graph.crossNic, graph.channels.size(), graph.bwIntra, graph.bwInter,
           pathTypeName(graph.typeIntra), pathTypeName(graph.typeInter), graph.sameChannels ? 1 : 0);
  std::string out = buf;
  for (size_t c = 0; c < graph.channels.size(); ++c) {
    const Channel& ch = graph.channels[c];
    snprintf(buf, sizeof buf, "%2zu :", c);
    out += buf;
    if (ch.netIn >= 0) out += " NET/" + std::to_string(ch.netIn);
    for (int g : ch.gpus) out += " GPU/" + std::to_string(g);
    if (ch.netOut >= 0) out += " NET/" + std::to_string(ch.netOut);
    out += "\n";
  }
  return out;
}

XmlNode graphsToXml(const std::vector<Graph>& graphs) {
  XmlNode doc;
  XmlNode& root = doc.add("graphs");
  root.set("version", "1");
  char buf[64];
  auto num = [&](double v) {
    snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  for (const Graph& g : graphs) {
    XmlNode& e = root.add("graph");
    e.set("id", std::to_string(g.id));
    e.set("pattern", std::to_string(static_cast<int>(g.pattern)));
    e.set("crossnic", std::to_string(g.crossNic));
    e.set("nchannels", std::to_string(g.channels.size()));
    e.set("speedintra", num(g.bwIntra));
    e.set("speedinter", num(g.bwInter));
    e.set("latencyinter", num(g.latencyInter));
    e.set("typeintra", pathTypeName(g.typeIntra));
    e.set("typeinter", pathTypeName(g.typeInter));
    e.set("samechannels", g.sameChannels ? "1" : "0");
    for (const Channel& c : g.channels) {
      XmlNode& ch = e.add("channel");
      if (c.netIn >= 0) ch.add("net").set("dev", std::to_string(c.netIn));
      for (int dev : c.gpus) ch.add("gpu").set("dev", std::to_string(dev));
      if (c.netOut >= 0) ch.add("net").set("dev", std::to_string(c.netOut));
    }
  }
  return doc;
}

namespace {

class GraphReader {
 public:
  GraphReader(const std::string& source, const System& sys) : source_(source), sys_(sys) {}

  std::vector<Graph> read(const XmlNode& document) {
    const XmlNode* root = document.child("graphs");
    if (!root || document.children.size() != 1) fail(ncclInvalidUsage, "%s: expected one <graphs> element", source_.c_str());
    std::vector<Graph> graphs;
    for (const XmlNode& e : root->children) {
      if (e.name != "graph") error(e, "<" + e.name + "> inside <graphs> (only <graph> may be there)");
      graphs.push_back(graph(e));
    }
    return graphs;
  }

 private:
  [[noreturn]] void error(const XmlNode& at, const std::string& reason) {
    fail(ncclInvalidUsage, "%s:%d: %s", source_.c_str(), at.line, reason.c_str());
  }

  double number(const XmlNode& e, const char* key, double lo, double hi) {
    const std::string* v = e.attr(key);
    if (!v) error(e, "<" + e.name + "> has no '" + key + "' attribute");
    char* end = nullptr;
    double d = strtod(v->c_str(), &end);
    if (v->empty() || *end != '\0' || !(d >= lo && d <= hi))
      error(e, std::string(key) + "=\"" + *v + "\" is not a number in " + std::to_string(lo) + ".." + std::to_string(hi));
    return d;
  }

  PathType type(const XmlNode& e, const char* key) {
    const std::string* v = e.attr(key);
    for (int t = 0; v && t <= static_cast<int>(PathType::Dis); ++t)
      if (*v == pathTypeName(static_cast<PathType>(t))) return static_cast<PathType>(t);
    error(e, std::string(key) + "=\"" + (v ? *v : "") + "\" is not a path type (LOC, NVL, ..., NET)");
  }

  Graph graph(const XmlNode& e) {
    Graph g;
    g.id = static_cast<int>(number(e, "id", 0, 4));
    g.pattern = static_cast<Pattern>(static_cast<int>(number(e, "pattern", 1, 6)));
    g.crossNic = static_cast<int>(number(e, "crossnic", 0, 2));
    int declared = static_cast<int>(number(e, "nchannels", 1, 64));
    g.bwIntra = number(e, "speedintra", 0, 1e6);
    g.bwInter = number(e, "speedinter", 0, 1e6);
    g.latencyInter = e.attr("latencyinter") ? number(e, "latencyinter", 0, 1e6) : 0;
    g.typeIntra = type(e, "typeintra");
    g.typeInter = type(e, "typeinter");
    g.sameChannels = e.attrOr("samechannels", "0") == "1";
    for (const XmlNode& c : e.children) {
      if (c.name != "channel") error(c, "<" + c.name + "> inside <graph> (only <channel> may be there)");
      g.channels.push_back(channel(c, g.pattern));
    }
    if (static_cast<int>(g.channels.size()) != declared)
      error(e, "nchannels=\"" + std::to_string(declared) + "\" but " + std::to_string(g.channels.size()) +
                   " <channel> elements");
    return g;
  }

  Channel channel(const XmlNode& e, Pattern pattern) {
    Channel c;
    for (const XmlNode& item : e.children) {
      int dev = static_cast<int>(number(item, "dev", 0, 1 << 20));
      if (item.name == "gpu") {
        bool known = false;
        for (int n : sys_.of(NodeType::Gpu)) known |= sys_.nodes[n].dev == dev;
        if (!known) error(item, "GPU dev " + std::to_string(dev) + " is not in the system");
        if (std::find(c.gpus.begin(), c.gpus.end(), dev) != c.gpus.end())
          error(item, "GPU dev " + std::to_string(dev) + " appears twice in one channel");
        c.gpus.push_back(dev);
      } else if (item.name == "net") {
        if (sys_.netOfDev(dev) < 0) error(item, "net dev " + std::to_string(dev) + " is not in the system");
        (c.gpus.empty() ? c.netIn : c.netOut) = dev;
      } else {
        error(item, "<" + item.name + "> inside <channel> (only <gpu> and <net> may be there)");
      }
    }
    if (pattern == Pattern::Ring && static_cast<int>(c.gpus.size()) != sys_.count(NodeType::Gpu))
      error(e, "a ring channel lists " + std::to_string(c.gpus.size()) + " of the system's " +
                   std::to_string(sys_.count(NodeType::Gpu)) + " GPUs");
    if (c.gpus.empty()) error(e, "a channel without GPUs");
    return c;
  }

  const std::string& source_;
  const System& sys_;
};

}  // namespace

std::vector<Graph> graphsFromXml(const XmlNode& document, const std::string& source, const System& system) {
  return GraphReader(source, system).read(document);
}

}  // namespace braid::topo
