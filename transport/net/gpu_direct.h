// GPU Direct RDMA for the network transports that can use it (the verbs transport, net
// plugins): whether an end keeps its Simple slots in GPU memory for its NIC to read (sender)
// or write (receiver), as NCCL decides it.
//
// Both ends need the CUDA backend (an allocator) and a GPU-NIC PCI path of at most
// NCCL_NET_GDR_LEVEL (PXB by default; a NIC sysfs does not place counts as beyond every level
// but SYS). A sender also needs NCCL_NET_GDR_READ (by default: from Ampere on, where NICs read
// GPU memory well). A receiver's data needs a flush before its kernel may read it unless the GPU
// orders the NIC's writes (Hopper or later, no C2C), the NIC does not ask for one (a net
// plugin's forceFlush) and NCCL_NET_FORCE_FLUSH is 0; a transport that cannot flush (the verbs
// transport) then keeps the receiver's slots in host memory. How the memory is registered
// (dma-buf, NCCL_PTR_CUDA) is the transport's own question.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "topology/paths.h"
#include "transport/fifo.h"

namespace braid::transport {

/// The knobs and facts of the decision, one set per communicator.
struct GpuDirectPolicy {
  FifoAllocator* allocator = nullptr;          ///< the backend's FIFO memory (null: the host backend, no GPU)
  bool dmabuf = true;                          ///< NCCL_DMABUF_ENABLE
  int read = -1;                               ///< NCCL_NET_GDR_READ (-1: automatic)
  topo::PathType level = topo::PathType::Pxb;  ///< NCCL_NET_GDR_LEVEL
  bool forceFlush = false;                     ///< NCCL_NET_FORCE_FLUSH
  int64_t gpuBusId = -1;                       ///< this rank's GPU (runtime::cudaBusId)
  std::string sysRoot;                         ///< where sysfs is (tests)
};

/// What the decision says for one end.
struct GpuDirectChoice {
  bool slotsOnGpu = false;  ///< the Simple slots live in GPU memory
  bool needsFlush = false;  ///< receiver: each Simple step needs a flush before tail is published
  std::string why;          ///< when not on the GPU: why (empty for the host backend)
};

/// The decision for an end whose NIC sits at `nicChain` (topo::pciChain and kin; empty:
/// unknown to sysfs). `nicForcesFlush`: the NIC asks for a flush after every receive;
/// `canFlush`: the transport can flush (else a receiver that needs one stays in host memory).
GpuDirectChoice chooseGpuDirect(const GpuDirectPolicy& policy, const std::vector<std::string>& nicChain,
                                bool receiving, bool nicForcesFlush, bool canFlush);

}  // namespace braid::transport
