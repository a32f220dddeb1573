// Ranks that are threads of one process: the FIFO memory is allocated by the receiver and the
// sender writes it directly (the host analogue of NCCL's P2P transport; with the CUDA backend,
// the slots are device memory and the counters host memory the GPU maps).
#pragma once

#include "transport/fifo.h"

namespace braid::transport::p2p {

/// Receiver side: allocates zeroed FIFO memory and describes it. allocator: where the memory
/// comes from (null: the host's heap); it must outlive both ends (the backends' are per
/// process).
std::unique_ptr<FifoMemory> create(const FifoSizes& sizes, FifoAllocator* allocator, Descriptor* out);
/// Sender side: the receiver's memory, used in place (freed when both ends are gone).
std::unique_ptr<FifoMemory> import(const Descriptor& d);

}  // namespace braid::transport::p2p
