// The CUDA backend's FIFO memory (transport::FifoAllocator): counters in pinned host memory the
// GPU maps, slots in device memory (cuMem where it is enabled, so that another process can map
// them through a file descriptor; else cudaMalloc and legacy IPC handles), dma-buf exports of
// the slots for a NIC (GPU Direct RDMA), and host memory registered with CUDA.
#pragma once

#include "transport/fifo.h"

namespace braid::runtime::cuda {

/// The process's FIFO allocator of CUDA device `device`: never destroyed, as FIFOs shared by
/// two ranks outlive whichever communicator goes first.
transport::FifoAllocator* fifoAllocatorOf(int device);

}  // namespace braid::runtime::cuda
