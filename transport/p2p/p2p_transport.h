// Ranks that are threads of one process: the FIFO memory is allocated by the receiver and the
// sender writes it directly (the host analogue of NCCL's P2P transport; with the CUDA backend,
// the slots and the counters the kernels poll are the receiver's device memory, the rest host
// memory the GPU maps). Head alone is the sender's: a credit line the sender allocates when it
// imports the FIFO (its GPU's memory through its allocator, else its heap), which the
// receiver's kernels write and the sender's poll where it is local, as NCCL's sendMem->head.
// The receiver finds it through the FIFO's shared prefix, never through an address on the wire.
#pragma once

#include "transport/fifo.h"

namespace braid::transport::p2p {

/// Receiver side: allocates zeroed FIFO memory and describes it. allocator: where the memory
/// comes from (null: the host's heap); it must outlive both ends (the backends' are per
/// process).
std::unique_ptr<FifoMemory> create(const FifoSizes& sizes, FifoAllocator* allocator, Descriptor* out);
/// Sender side: the receiver's memory, used in place, and the sender's credit line (from
/// `allocator`, the sender's backend's; null: the heap), both freed when both ends are gone.
std::unique_ptr<FifoMemory> import(const Descriptor& d, FifoAllocator* allocator = nullptr);

}  // namespace braid::transport::p2p
