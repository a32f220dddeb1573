// Ranks that are processes on one host: the FIFO memory is a POSIX shared-memory segment,
// created by the receiver with mode 0600 under a name unique to the communicator, mapped by
// the sender, and unlinked by the receiver as soon as the sender has mapped it (so a crash
// later leaks nothing in /dev/shm).
//
// With a GPU backend (an allocator) the segment holds only the counters, and the slots are in
// the receiver's GPU memory, which the sender maps through the allocator's handle (CUDA IPC):
// the kernels then move data device to device instead of through host memory. Where the
// allocator cannot share its memory, or `deviceData` is off (NCCL_P2P_DISABLE), the slots
// stay in the segment.
#pragma once

#include "transport/fifo.h"

namespace braid::transport::shm {

/// Receiver side: creates and maps the segment named after `uniqueName` (allocator: the
/// backend's, or null on the host).
std::unique_ptr<FifoMemory> create(const FifoSizes& sizes, const std::string& uniqueName, FifoAllocator* allocator,
                                   bool deviceData, Descriptor* out);
/// The name of the segment create() makes for `uniqueName` (a sender derives it to check the
/// receiver's descriptor).
std::string segmentName(const std::string& uniqueName);
/// Sender side: maps the receiver's segment (and its slots, through `allocator`, when they are
/// in its GPU's memory).
std::unique_ptr<FifoMemory> import(const Descriptor& d, FifoAllocator* allocator);
/// Receiver side, once the sender has mapped it: removes the name (the mapping stays).
void unlinkName(const Descriptor& d);

}  // namespace braid::transport::shm
