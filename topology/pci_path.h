// The PCI path between two devices of this machine, read from sysfs and named as NCCL's path
// types name it (PIX, PXB, PHB, SYS): what the GPU Direct RDMA decision (NCCL_NET_GDR_LEVEL)
// needs about the NIC a verbs connection uses, without building the whole topology.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "topology/paths.h"

namespace braid::topo {

/// Whether s is a PCI bus id as sysfs writes it ("0000:17:00.0").
bool isPciBusId(const std::string& s);

/// The bus id of a CUDA device's PCI bus id number (runtime::cudaBusId's: domain << 16 | bus << 8
/// | device << 3 | function); "" for a negative one.
std::string busIdText(int64_t busId);

/// The PCI functions from the root complex down to device `busId` ("0000:17:00.0"), the root
/// ("pci0000:00") first and the device last, as sysfs under `sysRoot` places it; empty when
/// sysfs does not know it.
std::vector<std::string> pciChain(const std::string& busId, const std::string& sysRoot = "");
/// The same for InfiniBand device `name` (mlx5_0).
std::vector<std::string> ibDeviceChain(const std::string& name, const std::string& sysRoot = "");
/// The same for the device at sysfs path `path` ("/sys/devices/pci0000:00/0000:00:01.0/...", as
/// a net plugin's pciPath says it; placed under sysRoot); empty for a relative path.
std::vector<std::string> sysfsDeviceChain(const std::string& path, const std::string& sysRoot = "");

/// The path between the devices of two chains: PIX when they hang below one PCI switch (at
/// most one bridge each below the one they share), PXB when they share bridges further up,
/// PHB when they share only a root complex, or sit under different root complexes of one NUMA
/// node (or where sysfs gives neither a node), SYS across NUMA nodes; Dis when either chain is
/// empty.
PathType pciPathBetween(const std::vector<std::string>& a, const std::vector<std::string>& b,
                        const std::string& sysRoot = "");

}  // namespace braid::topo
