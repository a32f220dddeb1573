// Ranks that are threads of one process: the FIFO memory is on the receiver's heap and the
// sender writes it directly (the host analogue of NCCL's P2P transport).
#pragma once

#include "transport/fifo.h"

namespace braid::transport::p2p {

/// Receiver side: allocates zeroed FIFO memory and describes it.
std::unique_ptr<FifoMemory> create(const FifoSizes& sizes, Descriptor* out);
/// Sender side: the receiver's memory, used in place (owned by the receiver).
std::unique_ptr<FifoMemory> import(const Descriptor& d);

}  // namespace braid::transport::p2p
