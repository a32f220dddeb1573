#include "core/interfaces.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <strings.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/status.h"

namespace braid::net {

namespace {
/// The list syntax both filters share: a leading '^' (exclude), then '=' (exact names), then
/// comma-separated entries; empty entries are dropped.
std::vector<std::string> splitList(const std::string& text, bool* exclude, bool* exact) {
  std::string list = text;
  *exclude = !list.empty() && list[0] == '^';
  if (*exclude) list.erase(0, 1);
  *exact = !list.empty() && list[0] == '=';
  if (*exact) list.erase(0, 1);
  std::vector<std::string> items;
  for (size_t start = 0; start <= list.size();) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    if (comma > start) items.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return items;
}
}  // namespace

InterfaceFilter InterfaceFilter::parse(const std::string& text) {
  InterfaceFilter f;
  for (std::string name : splitList(text, &f.exclude, &f.exact)) {
    // An entry may carry ":port" (as NCCL_IB_HCA does); interfaces ignore it.
    if (const auto colon = name.find(':'); colon != std::string::npos) name.erase(colon);
    if (!name.empty()) f.names.push_back(name);
  }
  return f;
}

HcaFilter HcaFilter::parse(const std::string& text) {
  HcaFilter f;
  for (const std::string& item : splitList(text, &f.exclude, &f.exact)) {
    Entry e;
    const auto colon = item.find(':');
    e.device = item.substr(0, colon);
    if (colon != std::string::npos) {
      const std::string port = item.substr(colon + 1);
      char* end = nullptr;
      const long value = port.empty() ? 0 : std::strtol(port.c_str(), &end, 10);
      if (port.empty() || *end != '\0' || value < 1 || value > 255) {
        f.problems.push_back("entry '" + item + "': the port must be a number from 1 to 255; entry ignored");
        continue;
      }
      e.port = static_cast<int>(value);
    }
    if (e.device.empty()) {
      f.problems.push_back("entry '" + item + "' names no device; entry ignored");
      continue;
    }
    f.entries.push_back(e);
  }
  return f;
}

bool HcaFilter::matches(const std::string& device, int port) const {
  if (entries.empty()) return true;  // nothing (valid) listed: every port
  bool listed = false;
  for (const Entry& e : entries) {
    const bool name = exact ? device == e.device : device.compare(0, e.device.size(), e.device) == 0;
    if (name && (e.port < 0 || e.port == port)) listed = true;
  }
  return exclude ? !listed : listed;
}

bool InterfaceFilter::matches(const std::string& interfaceName) const {
  bool listed = false;
  for (const auto& n : names) {
    if (exact ? interfaceName == n : interfaceName.compare(0, n.size(), n) == 0) listed = true;
  }
  return exclude ? !listed : listed;
}

int parseFamily(const std::string& text) {
  if (text.empty()) return AF_UNSPEC;
  if (strcasecmp(text.c_str(), "AF_INET") == 0 || text == "4") return AF_INET;
  if (strcasecmp(text.c_str(), "AF_INET6") == 0 || text == "6") return AF_INET6;
  fail(ncclInvalidArgument, "NCCL_SOCKET_FAMILY is '%s'; expected AF_INET or AF_INET6", text.c_str());
}

std::vector<Interface> listInterfaces() {
  std::vector<Interface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    // (not "no interface matches": out of descriptors, say, is a different problem)
    fail(ncclSystemError, "cannot list the network interfaces: getifaddrs: %s", strerror(errno));
  }
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || (i->ifa_flags & IFF_UP) == 0) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    SocketAddress a = SocketAddress::fromSockaddr(i->ifa_addr);
    if (family == AF_INET6) {
      const uint8_t* b = a.addressBytes();
      if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) continue;  // link-local needs a scope: skip
    }
    out.push_back({i->ifa_name, a});
  }
  freeifaddrs(list);
  return out;
}

std::string interfaceHolding(const SocketAddress& address) {
  std::vector<Interface> all;
  try {
    all = listInterfaces();
  } catch (const Error&) {
    return "";  // (a hint only: unknown)
  }
  for (const Interface& i : all) {
    if (i.address.family() == address.family() &&
        std::memcmp(i.address.addressBytes(), address.addressBytes(), address.addressSize()) == 0) {
      return i.name;
    }
  }
  return "";
}

namespace {
/// The CPUs of the NUMA node of the device behind <sysRoot>/sys/class/<sysClass>/<name>.
std::vector<int> cpusNearClassDevice(const std::string& sysClass, const std::string& name, const std::string& sysRoot) {
  std::vector<int> cpus;
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") return cpus;
  int node = -1;
  std::ifstream(sysRoot + "/sys/class/" + sysClass + "/" + name + "/device/numa_node") >> node;
  if (node < 0) return cpus;
  std::string list;
  std::ifstream(sysRoot + "/sys/devices/system/node/node" + std::to_string(node) + "/cpulist") >> list;
  // "0-3,8,10-11"
  std::stringstream parts(list);
  for (std::string part; std::getline(parts, part, ',');) {
    int first = -1, last = -1;
    const int fields = std::sscanf(part.c_str(), "%d-%d", &first, &last);
    if (fields < 1 || first < 0) continue;
    if (fields == 1) last = first;
    for (int c = first; c <= last && c < 4096; ++c) cpus.push_back(c);
  }
  return cpus;
}
}  // namespace

std::vector<int> cpusNearInterface(const std::string& interfaceName, const std::string& sysRoot) {
  return cpusNearClassDevice("net", interfaceName, sysRoot);
}

std::vector<int> cpusNearRdmaDevice(const std::string& deviceName, const std::string& sysRoot) {
  return cpusNearClassDevice("infiniband", deviceName, sysRoot);
}

namespace {

bool sameSubnet(const Interface& i, const SocketAddress& target) {
  if (!target.valid() || i.address.family() != target.family()) return false;
  // Without the netmask at hand, compare the network part NCCL would for a /16 or /64.
  const size_t bytes = target.family() == AF_INET ? 2 : 8;
  return std::memcmp(i.address.addressBytes(), target.addressBytes(), bytes) == 0;
}

int defaultClass(const std::string& name) {
  if (name.compare(0, 2, "ib") == 0) return 0;
  if (name.compare(0, 6, "docker") == 0 || name == "lo" || name.compare(0, 5, "virbr") == 0) return 3;
  return 2;
}

}  // namespace

std::vector<Interface> rankInterfaces(const InterfaceRequest& request, const std::vector<Interface>& all) {
  const int family = parseFamily(request.family);
  std::vector<Interface> candidates;
  for (const auto& i : all) {
    if (family != AF_UNSPEC && i.address.family() != family) continue;
    candidates.push_back(i);
  }
  if (!request.ifname.empty()) {
    const InterfaceFilter filter = InterfaceFilter::parse(request.ifname);
    candidates.erase(std::remove_if(candidates.begin(), candidates.end(),
                                    [&](const Interface& i) { return !filter.matches(i.name); }),
                     candidates.end());
    return candidates;  // the user's order is the kernel's; no re-ranking
  }
  auto rank = [&](const Interface& i) {
    int c = defaultClass(i.name);
    if (c == 2 && sameSubnet(i, request.preferSubnetOf)) c = 1;
    return c * 2 + (i.address.family() == AF_INET ? 0 : 1);  // IPv4 first within a class
  };
  std::stable_sort(candidates.begin(), candidates.end(),
                   [&](const Interface& a, const Interface& b) { return rank(a) < rank(b); });
  return candidates;
}

Interface chooseInterface(const InterfaceRequest& request) {
  const auto ranked = rankInterfaces(request, listInterfaces());
  if (ranked.empty()) {
    fail(ncclSystemError, "no network interface matches NCCL_SOCKET_IFNAME='%s' NCCL_SOCKET_FAMILY='%s'",
         request.ifname.c_str(), request.family.c_str());
  }
  return ranked.front();
}

}  // namespace braid::net
