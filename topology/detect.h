// Detection: this machine as a topology document in NCCL's XML format.
//
// CPUs and NUMA nodes come from sysfs (/sys/devices/system/node, /proc/cpuinfo); the PCI tree
// above each device of interest from sysfs (/sys/bus/pci/devices, link speed and width); GPUs
// and their NVLinks from NVML; InfiniBand/RoCE ports from libibverbs; Ethernet interfaces from
// /sys/class/net when no RDMA port exists. NVML and libibverbs are opened with dlopen: where
// a library or device is absent, that part is simply empty. Nothing here fails the caller.
//
// A net plugin (NCCL_NET_PLUGIN) that would carry the network (NCCL_NET's rule, the
// transport's: plugin::NetSession::picks) replaces RDMA ports and Ethernet interfaces: each of
// its devices is a NIC, under its PCI path when sysfs knows it, else under the CPU (NCCL's
// virtual NICs).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plugin/net_plugin.h"
#include "topology/xml.h"

namespace braid::topo {

struct DetectOptions {
  std::string sysRoot;  ///< prefix for /sys and /proc ("" on a real machine; tests may point elsewhere)
  std::string nvmlLibrary = "libnvidia-ml.so.1";
  std::string verbsLibrary = "libibverbs.so.1";
  std::string hwlocLibrary = "libhwloc.so.15";
  std::string socketIfname;  ///< NCCL_SOCKET_IFNAME: which Ethernet interfaces count
  std::string ibHca;         ///< NCCL_IB_HCA: which RDMA devices and ports count
  /// The net plugin's devices when it carries the network; when there are any they are the
  /// network ports (pluginNetPorts), in place of RDMA ports and Ethernet interfaces.
  std::vector<plugin::NetDeviceProperties> netPluginDevices;
};

/// From the parameter registry: NCCL_SOCKET_IFNAME, NCCL_IB_HCA, BRAID_NVML_LIBRARY /
/// BRAID_IBVERBS_LIBRARY / BRAID_HWLOC_LIBRARY (which library to open; tests point them at
/// doubles or at nothing), and the devices of the net plugin NCCL_NET_PLUGIN and NCCL_NET
/// pick (plugin::NetSession::probe: the plugin is loaded, once per process, to ask).
DetectOptions detectOptionsFromParams();

/// The document (one <system version="1">) describing this machine.
XmlNode detectSystem(const DetectOptions& options);

/// Completes a document read from a file with what detection knows: attributes the file lacks
/// are added, as are children (<gpu>, <nic>, <net>, <nvlink>) of PCI devices the file names.
/// What the file states wins, and devices the file does not name are not added.
void completeFromDetection(XmlNode& fileDocument, const XmlNode& detected);

/// What to take a document's bare PCI devices for: braid-topo's --assume-gpu and --assume-nic,
/// for published files that list GPUs and NICs only as PCI functions and leave the rest to the
/// running machine.
struct DeviceAssumptions {
  int gpuSm = 0;       ///< >0: a class 0x03 PCI device without <gpu> or <nic> is a GPU of this sm
  double nicMbps = 0;  ///< >0: a class 0x02 PCI device without <gpu> or <nic> is a port of this speed
};

/// Writes the assumptions into the document, so that it describes the system that is searched
/// and a dump of it, read back without them, gives the same system and channels: such a GPU
/// gets <gpu dev rank sm gdr="1"/> (dev and rank its place among the document's GPUs), such
/// a NIC <nic><net name="nic-BUSID" dev .../></nic> (dev its place among the network ports).
/// Devices the document describes are left as they are.
void assumeDevices(XmlNode& document, const DeviceAssumptions& assume);

// ---- the dlopen boundaries (detect_nvml.cc, detect_verbs.cc) ----

/// A device found by a library: where it sits and the element that describes it.
struct DetectedDevice {
  std::string busId;     ///< lower case "dddd:bb:dd.f"; "" when not a PCI device Braid can place
  std::string pciClass;  ///< "0x030200", "0x020000", ...
  XmlNode element;       ///< <gpu> or <nic>
};

/// A NUMA node with CPUs, its CPU set in NCCL's affinity format.
struct NumaNode {
  int id = 0;
  std::string affinity;
};
/// NUMA nodes with CPUs as hwloc reports them; empty without hwloc (sysfs then answers).
std::vector<NumaNode> detectHwlocNumaNodes(const std::string& library);
/// CPU numbers as NCCL's affinity text: 32-bit hex words, most significant first, commas.
std::string cpuMaskText(const std::vector<int>& cpus);

/// One network port of a NIC, as every source describes it (<net> in NCCL's schema).
struct NetPort {
  std::string name;    ///< the device's name ("mlx5_0", "eth0", a plugin's)
  int dev = 0;         ///< its number among the network ports (the transport's device index)
  long speedMbps = 0;
  int port = 0;
  double latencyUs = 0;
  uint64_t guid = 0;
  int maxConn = 0;
  bool gdr = false;    ///< GPU memory can be registered (GPU Direct RDMA)
};
/// Appends `port` to `nic` (a <nic>) as <net name dev speed port latency guid maxconn gdr/>.
void addNetPort(XmlNode& nic, const NetPort& port);

/// The net plugin's devices as NICs, one per device, numbered as the plugin numbers them: a
/// pciPath naming a PCI function gives its bus id (where sysfs places it), else none (the NIC
/// sits under the CPU); speed in Mb/s, port, guid, latency, maxComms; gdr when ptrSupport
/// includes NCCL_PTR_CUDA.
std::vector<DetectedDevice> pluginNetPorts(const std::vector<plugin::NetDeviceProperties>& devices);

/// Every GPU NVML reports, as <gpu dev sm rank gdr> with its <nvlink>s; empty without NVML.
std::vector<DetectedDevice> detectNvmlGpus(const std::string& library);
/// Every active port libibverbs reports that NCCL_IB_HCA (`hcaFilter`) selects, as
/// <nic><net .../></nic> (one NIC per device); empty without libibverbs or devices.
std::vector<DetectedDevice> detectVerbsPorts(const std::string& library, const std::string& sysRoot,
                                             const std::string& hcaFilter = "");

}  // namespace braid::topo
