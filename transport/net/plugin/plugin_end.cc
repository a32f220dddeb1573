#include "transport/net/plugin/plugin_end.h"

#include <algorithm>

#include "topology/pci_path.h"

namespace braid::transport::netplugin::detail {

uint64_t envelopeBytes(const FifoSizes& sizes) {
  const uint64_t room = std::max<uint64_t>(sizes.simpleStepBytes, stagingCapacity(sizes));
  return sizeof(FrameHeader) + (room + 63) / 64 * 64;  // (the next record, and slot, 64-byte aligned)
}

uint64_t extraBytes(const FifoSizes& sizes) { return kernels::kSteps * envelopeBytes(sizes); }

int chooseDevice(const Settings& s, bool* planned) {
  const int n = s.session->devices();
  if (planned != nullptr) *planned = false;
  if (!s.port.empty()) {
    for (int dev = 0; dev < n; ++dev) {
      const plugin::NetDeviceProperties& p = s.session->properties(dev);
      if (p.name + ":" + std::to_string(p.port) != s.port) continue;
      if (planned != nullptr) *planned = true;
      return dev;
    }
    if (planned != nullptr) {
      BRAID_INFO(log::kNet, "NET/Plugin: %s: rank %d: net plugin %s has no device %s (the topology's port); choosing "
                 "by number", s.what.c_str(), s.rank, s.session->name().c_str(), s.port.c_str());
    }
  }
  return n > 0 ? (s.deviceHint % n + n) % n : 0;
}

int gpuSlotsType(const Settings& s, int dev, bool receiving, bool* flush, std::string* why) {
  *flush = false;
  why->clear();
  const GpuDirectPolicy& policy = s.gpuDirect;
  if (policy.allocator == nullptr) return 0;
  const plugin::NetDeviceProperties& p = s.session->properties(dev);
  const bool cuda = (p.ptrSupport & NCCL_PTR_CUDA) != 0;
  const bool dmabuf = (p.ptrSupport & NCCL_PTR_DMABUF) != 0 && policy.dmabuf && s.session->canRegisterDmaBuf();
  if (!cuda && !dmabuf) {
    *why = (p.ptrSupport & NCCL_PTR_DMABUF) == 0 ? "the device reports neither NCCL_PTR_CUDA nor NCCL_PTR_DMABUF"
           : policy.dmabuf                      ? "the device reports only NCCL_PTR_DMABUF and the plugin has no regMrDmaBuf"
                                                : "the device reports only NCCL_PTR_DMABUF and NCCL_DMABUF_ENABLE=0";
    return 0;
  }
  const GpuDirectChoice c = chooseGpuDirect(policy, topo::sysfsDeviceChain(p.pciPath, policy.sysRoot), receiving,
                                            p.forceFlush, s.session->canFlush());
  if (!c.slotsOnGpu) {
    *why = c.why + (c.why.find("flush") != std::string::npos && !s.session->canFlush() ? " (the plugin has no iflush)" : "");
    return 0;
  }
  *flush = c.needsFlush;
  return dmabuf ? NCCL_PTR_DMABUF : NCCL_PTR_CUDA;
}

const char* typeName(int type) {
  return type == NCCL_PTR_DMABUF ? "dma-buf" : type == NCCL_PTR_CUDA ? "NCCL_PTR_CUDA" : "host";
}

}  // namespace braid::transport::netplugin::detail
