#include "topology/system.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

#include "core/log.h"
#include "core/status.h"

namespace braid::topo {

const char* nodeTypeName(NodeType type) {
  static const char* const names[] = {"GPU", "PCI", "NVS", "CPU", "NIC", "NET"};
  return names[static_cast<int>(type)];
}

const char* linkTypeName(LinkType type) {
  static const char* const names[] = {"LOC", "NVL", "C2C", "PCI", "SYS", "NET"};
  return names[static_cast<int>(type)];
}

double nvlinkBandwidth(int sm) {
  if (sm >= 100) return 40.1;
  if (sm >= 90) return 20.6;
  if (sm == 86 || sm == 87 || sm == 89) return 12.0;
  if (sm >= 80) return 20.0;
  if (sm >= 70) return 20.0;
  return 18.0;
}

double pciBandwidth(const std::string& linkSpeed, int width) {
  // Per lane, in units of 100 Mb/s of payload, as NCCL counts it: Gen1 15 ... Gen6 480.
  double gts = strtod(linkSpeed.c_str(), nullptr);
  int perLane = 60;
  if (gts == 2.5) perLane = 15;
  else if (gts == 5) perLane = 30;
  else if (gts == 8) perLane = 60;
  else if (gts == 16) perLane = 120;
  else if (gts == 32) perLane = 240;
  else if (gts == 64) perLane = 480;
  if (width <= 0) width = 16;
  return width * perLane / 80.0;
}

double interCpuBandwidth(const std::string& arch, const std::string& vendor, int model) {
  if (arch == "arm64" || arch == "aarch64") return 6;
  if (arch == "ppc64") return 32;
  if (vendor == "AuthenticAMD") return 16;
  if (model == 143) return 22;  // Sapphire Rapids
  if (model == 207) return 40;  // Emerald Rapids
  return 10;                    // Skylake and the Intel parts NCCL treats like it
}

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::string canonicalBusId(const std::string& text) {
  std::string id = lower(text);
  if (std::count(id.begin(), id.end(), ':') == 1) id = "0000:" + id;
  unsigned dom, bus, dev, fn;
  char tail;
  if (sscanf(id.c_str(), "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail) != 4) return "";
  return id;
}

std::string Node::label() const {
  std::string name = nodeTypeName(type);
  if (type == NodeType::Pci) return name + "/" + busId;
  if (type == NodeType::Gpu) return name + "/" + std::to_string(dev);
  if (type == NodeType::Net) return name + "/" + std::to_string(netDev);
  return name + "/" + std::to_string(index);
}

std::vector<int> System::of(NodeType type) const {
  std::vector<int> out;
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i)
    if (nodes[i].type == type) out.push_back(i);
  return out;
}

int System::gpuOfRank(int rank) const {
  for (int i : of(NodeType::Gpu))
    if (nodes[i].rank == rank) return i;
  return -1;
}

int System::netOfDev(int dev) const {
  for (int i : of(NodeType::Net))
    if (nodes[i].netDev == dev) return i;
  return -1;
}

void System::connect(int a, int b, LinkType type, double bw) {
  for (Link& l : nodes[a].links)
    if (l.to == b && l.type == type) {
      l.bw += bw;
      return;
    }
  nodes[a].links.push_back({b, type, bw});
}

std::string System::describe() const {
  std::string out;
  char buf[256];
  for (const Node& n : nodes) {
    out += n.label();
    switch (n.type) {
      case NodeType::Gpu:
        snprintf(buf, sizeof buf, " (dev %d, sm %d, rank %d, bus %s%s)", n.dev, n.sm, n.rank, n.busId.c_str(),
                 n.gdr ? ", gdr" : "");
        break;
      case NodeType::Cpu:
        snprintf(buf, sizeof buf, " (numa %d, %s %s model %d)", n.numa, n.arch.c_str(), n.vendor.c_str(), n.model);
        break;
      case NodeType::Net:
        snprintf(buf, sizeof buf, " (%s, dev %d, port %d, %.1f GB/s%s)", n.netName.c_str(), n.netDev, n.port,
                 n.netBw, n.netGdr ? ", gdr" : "");
        break;
      case NodeType::Nic:  // (no bus id: a virtual NIC, a net plugin's without a PCI path)
        snprintf(buf, sizeof buf, n.busId.empty() ? " (no PCI device)" : " (bus %s)", n.busId.c_str());
        break;
      default:
        buf[0] = '\0';
    }
    out += buf;
    out += "\n";
    for (const Link& l : n.links) {
      snprintf(buf, sizeof buf, "  + %s[%.1f] - %s\n", linkTypeName(l.type), l.bw, nodes[l.to].label().c_str());
      out += buf;
    }
  }
  return out;
}

namespace {

constexpr int kMaxNvlinksPerPair = 18;  // NVML_NVLINK_MAX_LINKS
constexpr int kMaxGpus = 64;

/// Reads elements of a <system> into a System, checking each against NCCL's schema.
class Builder {
 public:
  explicit Builder(const std::string& source) : source_(source) {}

  System build(const XmlNode& document) {
    const XmlNode* system = nullptr;
    for (const XmlNode& top : document.children) {
      if (top.name != "system") error(top, "expected <system>, found <" + top.name + ">");
      if (system) error(top, "a second <system> element");
      system = &top;
    }
    if (!system) fail(ncclInvalidUsage, "%s: no <system> element", source_.c_str());
    for (const XmlNode& cpu : system->children) {
      if (cpu.name != "cpu") error(cpu, "<" + cpu.name + "> inside <system> (only <cpu> may be there)");
      addCpu(cpu);
    }
    connectCpus();
    for (const Pending& p : nvlinks_) addNvlink(p);
    if (skippedGpus_)
      sys_.notes.push_back(std::to_string(skippedGpus_) +
                           " PCI device(s) of class 0x03 have no <gpu> element and were left out "
                           "(NCCL completes them on the running machine; braid-topo: --assume-gpu smNN)");
    if (skippedNics_)
      sys_.notes.push_back(std::to_string(skippedNics_) +
                           " PCI device(s) of class 0x02 have no <nic> element and were left out "
                           "(braid-topo: --assume-nic SPEED, e.g. 200G)");
    return std::move(sys_);
  }

 private:
  struct Pending {
    const XmlNode* element;
    int gpu;
  };

  [[noreturn]] void error(const XmlNode& at, const std::string& reason) {
    fail(ncclInvalidUsage, "%s:%d: %s", source_.c_str(), at.line, reason.c_str());
  }

  const std::string& required(const XmlNode& e, const char* key) {
    const std::string* v = e.attr(key);
    if (!v) error(e, "<" + e.name + "> has no '" + key + "' attribute");
    return *v;
  }

  int64_t integer(const XmlNode& e, const std::string& key, const std::string& text) {
    char* end = nullptr;
    errno = 0;
    long long v = strtoll(text.c_str(), &end, 0);
    if (text.empty() || *end != '\0' || errno)
      error(e, "attribute " + key + "=\"" + text + "\" of <" + e.name + "> is not an integer");
    return v;
  }

  int64_t integerOr(const XmlNode& e, const char* key, int64_t fallback) {
    const std::string* v = e.attr(key);
    return v ? integer(e, key, *v) : fallback;
  }

  double number(const XmlNode& e, const char* key, double fallback) {
    const std::string* v = e.attr(key);
    if (!v) return fallback;
    char* end = nullptr;
    double d = strtod(v->c_str(), &end);
    if (v->empty() || *end != '\0') error(e, std::string("attribute ") + key + "=\"" + *v + "\" is not a number");
    return d;
  }

  std::string busId(const XmlNode& e) {
    std::string id = canonicalBusId(required(e, "busid"));
    if (id.empty()) error(e, "busid \"" + required(e, "busid") + "\" is not a PCI bus id (dddd:bb:dd.f)");
    return id;
  }

  int addNode(NodeType type, const std::string& bus = "") {
    Node n;
    n.type = type;
    n.index = sys_.count(type);
    n.busId = bus;
    sys_.nodes.push_back(std::move(n));
    return static_cast<int>(sys_.nodes.size()) - 1;
  }

  void link(int a, int b, LinkType type, double bw) {
    sys_.connect(a, b, type, bw);
    sys_.connect(b, a, type, bw);
  }

  void addCpu(const XmlNode& e) {
    int cpu = addNode(NodeType::Cpu);
    Node& n = sys_.nodes[cpu];
    n.numa = static_cast<int>(integer(e, "numaid", required(e, "numaid")));
    n.arch = e.attrOr("arch", "x86_64");
    n.vendor = e.attrOr("vendor", "");
    n.family = static_cast<int>(integerOr(e, "familyid", 0));
    n.model = static_cast<int>(integerOr(e, "modelid", 0));
    n.affinity = e.attrOr("affinity", "");
    for (const XmlNode& c : e.children) {
      if (c.name == "pci") addPci(c, cpu);
      else if (c.name == "nic") addNic(c, cpu, "", kLocalBw);
      else error(c, "<" + c.name + "> inside <cpu> (only <pci> and <nic> may be there)");
    }
  }

  void addPci(const XmlNode& e, int parent) {
    std::string bus = busId(e);
    if (!seenBus_.insert({bus, e.line}).second)
      error(e, "bus id " + bus + " appears twice (first on line " + std::to_string(seenBus_[bus]) + ")");
    std::string cls = lower(e.attrOr("class", ""));
    int64_t width = integerOr(e, "link_width", 16);
    if (width < 0 || width > 32) error(e, "link_width=\"" + std::to_string(width) + "\" is not a PCIe width");
    double bw = pciBandwidth(e.attrOr("link_speed", ""), static_cast<int>(width));
    const XmlNode* gpu = nullptr;
    const XmlNode* nic = nullptr;
    for (const XmlNode& c : e.children) {
      if (c.name == "gpu") gpu = &c;
      else if (c.name == "nic") nic = &c;
      else if (c.name != "pci" && c.name != "pcilink")
        error(c, "<" + c.name + "> inside <pci> (only <pci>, <gpu>, <nic> and <pcilink> may be there)");
    }
    if (gpu) {
      addGpu(*gpu, bus, parent, bw);
      return;
    }
    if (nic) {
      addNic(*nic, parent, bus, bw);
      return;
    }
    if (cls.rfind("0x03", 0) == 0) ++skippedGpus_;
    if (cls.rfind("0x02", 0) == 0) ++skippedNics_;
    bool hasPciChildren = std::any_of(e.children.begin(), e.children.end(),
                                      [](const XmlNode& c) { return c.name == "pci"; });
    if (!hasPciChildren) return;  // an endpoint Braid has no use for (storage, a bare function)
    int sw = addNode(NodeType::Pci, bus);
    link(sw, parent, LinkType::Pci, bw);
    for (const XmlNode& c : e.children)
      if (c.name == "pci") addPci(c, sw);
  }

  void addGpu(const XmlNode& e, const std::string& bus, int parent, double bw) {
    if (sys_.count(NodeType::Gpu) >= kMaxGpus)
      error(e, "more than " + std::to_string(kMaxGpus) + " GPUs in one system");
    int gpu = addNode(NodeType::Gpu, bus);
    Node& n = sys_.nodes[gpu];
    n.dev = static_cast<int>(integer(e, "dev", required(e, "dev")));
    n.sm = static_cast<int>(integer(e, "sm", required(e, "sm")));
    n.rank = static_cast<int>(integerOr(e, "rank", n.dev));
    n.gdr = integerOr(e, "gdr", 0) != 0;
    if (n.sm < 30 || n.sm > 1000) error(e, "sm=\"" + std::to_string(n.sm) + "\" is not an SM architecture");
    for (const XmlNode& c : e.children) {
      if (c.name == "nvlink") nvlinks_.push_back({&c, gpu});
      else if (c.name == "c2c") addC2c(c, gpu, parent);
      else error(c, "<" + c.name + "> inside <gpu> (only <nvlink> and <c2c> may be there)");
    }
    for (int other : sys_.of(NodeType::Gpu))
      if (other != gpu && sys_.nodes[other].rank == sys_.nodes[gpu].rank)
        error(e, "GPU rank " + std::to_string(sys_.nodes[gpu].rank) + " given twice");
    link(gpu, parent, LinkType::Pci, bw);
  }

  void addC2c(const XmlNode& e, int gpu, int parent) {
    int64_t count = integer(e, "count", required(e, "count"));
    double mbps = number(e, "bw", 0);
    if (count < 1 || count > 64) error(e, "c2c count=\"" + std::to_string(count) + "\" is out of range 1..64");
    if (mbps <= 0 || mbps > 1e7) error(e, "c2c bw=\"" + e.attrOr("bw", "") + "\" is out of range");
    link(gpu, cpuOf(parent), LinkType::C2c, static_cast<double>(count) * mbps / 1000.0);
  }

  /// The CPU a node hangs under: its PCI parents are made before it, so the parent is the
  /// PCI neighbour with a smaller index.
  int cpuOf(int node) {
    while (sys_.nodes[node].type != NodeType::Cpu) {
      int parent = -1;
      for (const Link& l : sys_.nodes[node].links)
        if (l.type == LinkType::Pci && l.to < node) parent = l.to;
      if (parent < 0) return sys_.of(NodeType::Cpu).front();
      node = parent;
    }
    return node;
  }

  void addNic(const XmlNode& e, int parent, const std::string& bus, double bw) {
    int nic = addNode(NodeType::Nic, bus);
    link(nic, parent, LinkType::Pci, bw);
    for (const XmlNode& c : e.children) {
      if (c.name != "net") error(c, "<" + c.name + "> inside <nic> (only <net> may be there)");
      addNet(c, nic);
    }
  }

  void addNet(const XmlNode& e, int nic) {
    int net = addNode(NodeType::Net);
    Node& n = sys_.nodes[net];
    n.netDev = static_cast<int>(integer(e, "dev", required(e, "dev")));
    n.netName = e.attrOr("name", "net" + std::to_string(n.netDev));
    double mbps = number(e, "speed", 0);
    if (mbps > 1e8) error(e, "speed=\"" + e.attrOr("speed", "") + "\" Mb/s is absurd");
    if (mbps <= 0) mbps = 10000;
    n.netBw = mbps / 8000.0;
    n.port = static_cast<int>(integerOr(e, "port", 1));
    n.guid = strtoull(e.attrOr("guid", "0").c_str(), nullptr, 0);
    n.netGdr = integerOr(e, "gdr", 0) != 0;
    n.maxConn = static_cast<int>(integerOr(e, "maxconn", 0));
    for (int other : sys_.of(NodeType::Net))
      if (other != net && sys_.nodes[other].netDev == n.netDev)
        error(e, "net dev " + std::to_string(n.netDev) + " given twice");
    link(nic, net, LinkType::Net, n.netBw);
  }

  void connectCpus() {
    std::vector<int> cpus = sys_.of(NodeType::Cpu);
    for (int a : cpus)
      for (int b : cpus)
        if (a != b) {
          const Node& n = sys_.nodes[a];
          sys_.connect(a, b, LinkType::Sys, interCpuBandwidth(n.arch, n.vendor, n.model));
        }
  }

  int nvswitch() {
    if (nvs_ < 0) nvs_ = addNode(NodeType::Nvs, "nvswitch");
    return nvs_;
  }

  void addNvlink(const Pending& p) {
    const XmlNode& e = *p.element;
    std::string target = lower(required(e, "target"));
    int64_t count = integer(e, "count", required(e, "count"));
    if (count < 1 || count > kMaxNvlinksPerPair)
      error(e, "nvlink count=\"" + std::to_string(count) + "\" is out of range 1.." + std::to_string(kMaxNvlinksPerPair));
    const Node& gpu = sys_.nodes[p.gpu];
    if (target == gpu.busId) error(e, "nvlink from GPU " + gpu.busId + " to itself");
    double bw = static_cast<double>(count) * nvlinkBandwidth(gpu.sm);
    std::string tclass = lower(e.attrOr("tclass", ""));
    int peer = -1;
    for (int g : sys_.of(NodeType::Gpu))
      if (sys_.nodes[g].busId == target) peer = g;
    if (tclass == "0x068001") {  // to the CPU (POWER9-style NVLink to the host)
      link(p.gpu, cpuOf(p.gpu), LinkType::Nvl, bw);
    } else if (peer >= 0) {
      sys_.connect(p.gpu, peer, LinkType::Nvl, bw);
    } else if (tclass == "0x068000" || tclass.empty()) {
      link(p.gpu, nvswitch(), LinkType::Nvl, bw);
    } else {
      BRAID_WARN("%s:%d: nvlink of GPU %s points to %s, which is not a GPU of this system; link ignored",
                 source_.c_str(), e.line, gpu.busId.c_str(), target.c_str());
    }
  }

  const std::string& source_;
  System sys_;
  std::vector<Pending> nvlinks_;
  std::map<std::string, int> seenBus_;
  int nvs_ = -1;
  int skippedGpus_ = 0, skippedNics_ = 0;
};

}  // namespace

System buildSystem(const XmlNode& document, const std::string& source) {
  return Builder(source).build(document);
}

}  // namespace braid::topo
