// Ranks that are processes on one host: the FIFO memory is a POSIX shared-memory segment,
// created by the receiver with mode 0600 under a name unique to the communicator, mapped by
// the sender, and unlinked by the receiver as soon as the sender has mapped it (so a crash
// later leaks nothing in /dev/shm).
#pragma once

#include "transport/fifo.h"

namespace braid::transport::shm {

/// Receiver side: creates and maps the segment named after `uniqueName`.
std::unique_ptr<FifoMemory> create(const FifoSizes& sizes, const std::string& uniqueName, Descriptor* out);
/// Sender side: maps the receiver's segment.
std::unique_ptr<FifoMemory> import(const Descriptor& d);
/// Receiver side, once the sender has mapped it: removes the name (the mapping stays).
void unlinkName(const Descriptor& d);

}  // namespace braid::transport::shm
