#include "topology/pci_path.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace braid::topo {

namespace {

/// The chain of the device whose sysfs link is `link`.
std::vector<std::string> chainOf(const std::string& link) {
  char real[PATH_MAX];
  if (realpath(link.c_str(), real) == nullptr) return {};
  std::vector<std::string> chain;
  std::stringstream parts(real);
  for (std::string part; std::getline(parts, part, '/');) {
    unsigned domain = 0, bus = 0;
    char tail = 0;
    if (chain.empty() && sscanf(part.c_str(), "pci%4x:%2x%c", &domain, &bus, &tail) == 2) {
      chain.push_back(part);  // the root complex ("pci0000:00")
    } else if (!chain.empty() && isPciBusId(part)) {
      chain.push_back(part);
    }
  }
  return chain.size() >= 2 ? chain : std::vector<std::string>{};
}

int numaNode(const std::string& busId, const std::string& sysRoot) {
  std::ifstream in(sysRoot + "/sys/bus/pci/devices/" + busId + "/numa_node");
  int node = -1;
  return in >> node ? node : -1;
}

}  // namespace

bool isPciBusId(const std::string& s) {
  unsigned a, b, c, d;
  char tail;
  return s.size() == 12 && sscanf(s.c_str(), "%4x:%2x:%2x.%1x%c", &a, &b, &c, &d, &tail) == 4;
}

std::string busIdText(int64_t busId) {
  if (busId < 0) return "";
  char text[48];
  snprintf(text, sizeof text, "%04llx:%02llx:%02llx.%llx", static_cast<unsigned long long>(busId >> 16),
           static_cast<unsigned long long>((busId >> 8) & 0xff), static_cast<unsigned long long>((busId >> 3) & 0x1f),
           static_cast<unsigned long long>(busId & 7));
  return text;
}

std::vector<std::string> pciChain(const std::string& busId, const std::string& sysRoot) {
  if (!isPciBusId(busId)) return {};
  return chainOf(sysRoot + "/sys/bus/pci/devices/" + busId);
}

std::vector<std::string> ibDeviceChain(const std::string& name, const std::string& sysRoot) {
  if (name.empty() || name.find('/') != std::string::npos) return {};
  return chainOf(sysRoot + "/sys/class/infiniband/" + name + "/device");
}

std::vector<std::string> sysfsDeviceChain(const std::string& path, const std::string& sysRoot) {
  if (path.empty() || path[0] != '/') return {};
  return chainOf(sysRoot + path);
}

PathType pciPathBetween(const std::vector<std::string>& a, const std::vector<std::string>& b, const std::string& sysRoot) {
  if (a.size() < 2 || b.size() < 2) return PathType::Dis;
  if (a.front() != b.front()) {
    // (no NUMA node on either, as on a machine of one: one CPU)
    const int na = numaNode(a.back(), sysRoot), nb = numaNode(b.back(), sysRoot);
    return na == nb ? PathType::Phb : PathType::Sys;
  }
  // The bridges both pass through (below the root complex; neither device itself).
  size_t shared = 0;
  while (1 + shared < a.size() - 1 && 1 + shared < b.size() - 1 && a[1 + shared] == b[1 + shared]) ++shared;
  if (shared == 0) return PathType::Phb;
  const size_t belowA = a.size() - 2 - shared, belowB = b.size() - 2 - shared;  // bridges under the shared one
  return belowA <= 1 && belowB <= 1 ? PathType::Pix : PathType::Pxb;
}

}  // namespace braid::topo
