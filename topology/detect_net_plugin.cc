// A net plugin's devices as NICs (detect.h): what the plugin's getProperties said, in the same
// <nic><net/></nic> form as RDMA ports and Ethernet interfaces.
#include <nccl_net.h>

#include <algorithm>
#include <cctype>
#include <sstream>

#include "topology/detect.h"
#include "topology/pci_path.h"

namespace braid::topo {

namespace {

/// The PCI function a plugin's pciPath names: its last bus id ("/sys/devices/pci0000:00/
/// 0000:00:01.0/0000:17:00.0" -> "0000:17:00.0"), lower case; "" when it names none.
std::string busIdOf(const std::string& pciPath) {
  std::string busId;
  std::stringstream parts(pciPath);
  for (std::string part; std::getline(parts, part, '/');) {
    std::transform(part.begin(), part.end(), part.begin(), [](unsigned char c) { return std::tolower(c); });
    if (isPciBusId(part)) busId = part;
  }
  return busId;
}

}  // namespace

std::vector<DetectedDevice> pluginNetPorts(const std::vector<plugin::NetDeviceProperties>& devices) {
  std::vector<DetectedDevice> out;
  for (size_t dev = 0; dev < devices.size(); ++dev) {
    const plugin::NetDeviceProperties& p = devices[dev];
    DetectedDevice d;
    d.busId = busIdOf(p.pciPath);
    d.pciClass = "0x020000";
    d.element.name = "nic";
    NetPort port;
    port.name = p.name.empty() ? "net" + std::to_string(dev) : p.name;
    port.dev = static_cast<int>(dev);
    port.speedMbps = p.speedMbps;
    port.port = p.port;
    port.latencyUs = p.latencyUs;
    port.guid = p.guid;
    port.maxConn = p.maxComms;
    port.gdr = (p.ptrSupport & NCCL_PTR_CUDA) != 0;
    addNetPort(d.element, port);
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace braid::topo
