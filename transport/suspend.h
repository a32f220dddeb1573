// What a suspended communicator (ncclCommSuspend) gives back of its connections' FIFO memory.
//
// Suspend runs only once every rank of the communicator has finished its operations and met the
// others at a barrier, so no kernel, executor thread or proxy touches a FIFO's slots until the
// next operation: their contents are dead between operations. The slots' pages are given back
// to the system with the mapping kept (the connections, their handles and both ends' pointers
// stay as they are); the next operation touches them again and gets zeroed pages, which is how
// the FIFO started (an LL or LL128 flag of 0 is a step long past). What stays is the control
// part (counters, step counters, signatures, fault boxes: they carry state from one operation
// to the next) and every slot that the process cannot give back without the peer's or the
// device's part in it.
// With a device (the CUDA backend), what counts is its memory: the allocations that hold the
// counters the kernels poll and the slots (FifoMemory::deviceData), and a network end's slots
// for GPU Direct RDMA. The allocator gives an allocation's physical memory back and keeps its
// address (cuMem), as NCCL 2.30's memory manager does; the counters in front of the slots are
// kept aside and written back at resume, the rest comes back zeroed. Only allocations no other
// process and no NIC maps are given back: those map the physical pages themselves, so they
// would neither be freed nor see the new ones (NCCL re-imports them on every peer at resume;
// Braid keeps them).
// A sender's credit line (head, in the sender's own device memory: transport/p2p) is given back
// and restored whole in the same way. Pinned host memory (the control part) is not the device's and not counted.
#pragma once

#include <cstdint>
#include <vector>

#include "transport/connector.h"

namespace braid::transport {

/// Whole pages of one end's slots that suspend may give back.
struct SlotPages {
  char* begin = nullptr;
  uint64_t bytes = 0;
  bool shared = false;  ///< a shared-memory segment's pages (the peer maps them too)
};

/// The pages of `end` that this rank may give back (none: bytes 0). Only the owner's memory,
/// in host memory that nothing else maps behind the process's back:
///  - threads (p2p): the receiver's slots; the sender writes into them through the same mapping.
///  - processes (shm): the receiver's slots in the segment it created; the hole is punched in
///    the segment, so the sender's mapping of it sees the same zeroed pages.
///  - sockets: each end's own copy (the proxy reads and writes it only during operations).
/// Not released: the sender's view of a peer's memory (the peer owns it), verbs and net plugin
/// ends (a NIC registered the pages: new pages behind the same address would not be the ones it
/// writes), host memory registered with a device backend, and slots in device memory.
SlotPages releasablePages(const Connector::End& end);

/// Gives `pages` back to the system, keeping the mapping (MADV_REMOVE for a segment's, which
/// frees them for every process that maps it; MADV_DONTNEED for private ones); false, with errno
/// set, when the system refuses.
bool releasePages(const SlotPages& pages);

/// Bytes of FIFO memory this rank's connections allocated (the receiver's FIFO for threads and
/// processes, each end's own copy across a network): what suspend may give back and what stays.
/// With `device` (the allocator of a device backend), the device memory only.
struct FifoFootprint {
  uint64_t releasable = 0;
  uint64_t persistent = 0;
};
FifoFootprint fifoFootprint(const Connector& connector, FifoAllocator* device);

/// Gives every releasable page back; returns the bytes. Only while no operation runs on any
/// connection of the communicator, on this rank or a peer (suspend's barrier). With `device`,
/// the device allocations given back are appended to `suspended`, for restoreSlots.
uint64_t releaseSlots(const Connector& connector, FifoAllocator* device, std::vector<char*>* suspended);

/// Resume: gives each of `suspended` (releaseSlots') device memory again at its address, the
/// counters as they were and the slots zeroed, removing it from the list; throws, leaving the
/// rest listed, when the device cannot.
void restoreSlots(FifoAllocator* device, std::vector<char*>* suspended);

}  // namespace braid::transport
