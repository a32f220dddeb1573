#include "transport/net/gpu_direct.h"

#include "topology/pci_path.h"

namespace braid::transport {

GpuDirectChoice chooseGpuDirect(const GpuDirectPolicy& p, const std::vector<std::string>& nicChain,
                                bool receiving, bool nicForcesFlush, bool canFlush) {
  GpuDirectChoice c;
  if (p.allocator == nullptr) return c;
  const topo::PathType path =
      topo::pciPathBetween(topo::pciChain(topo::busIdText(p.gpuBusId), p.sysRoot), nicChain, p.sysRoot);
  const bool unknown = path == topo::PathType::Dis;
  if (unknown ? p.level < topo::PathType::Sys : path > p.level) {
    c.why = std::string("the GPU-NIC path is ") + (unknown ? "unknown to sysfs" : topo::pathTypeName(path)) +
            ", beyond NCCL_NET_GDR_LEVEL=" + topo::pathTypeName(p.level);
    return c;
  }
  if (receiving) {
    c.needsFlush = p.forceFlush || nicForcesFlush || !p.allocator->ordersRemoteWrites();
    if (c.needsFlush && !canFlush) {
      c.needsFlush = false;
      c.why = p.forceFlush ? "NCCL_NET_FORCE_FLUSH=1 asks for a flush this transport cannot make"
              : nicForcesFlush
                  ? "the NIC asks for a flush this transport cannot make"
                  : "received data would need a flush on this GPU (before Hopper, not ordering the "
                    "NIC's writes, or C2C)";
      return c;
    }
  } else if (p.read == 0 || (p.read < 0 && !p.allocator->nicReadsWell())) {
    c.why = p.read == 0
                ? "NCCL_NET_GDR_READ=0"
                : "the NIC reads this GPU's memory slowly (before Ampere; NCCL_NET_GDR_READ=1 insists)";
    return c;
  }
  c.slotsOnGpu = true;
  return c;
}

}  // namespace braid::transport
