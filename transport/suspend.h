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
// kept aside and written back at resume, the rest comes back zeroed. Slots a peer process maps
// (shm with the slots in the receiver's GPU memory) go too, as NCCL's do: the sender lets go
// of its mapping at the same suspend and keeps the address reserved (its kernels' handles hold
// it), the receiver gives the memory back (the driver frees it once the last mapping and
// handle are gone, whichever end is last); at resume the receiver maps new memory at its
// address, sends the sender a new handle over the bootstrap, and the sender maps it at its
// reserved address (restoreSlots). Only memory a NIC maps (verbs, net plugins: it holds the
// pages themselves) and memory without an address apart from its pages (cudaMalloc's, shared
// by legacy IPC) stay. A sender's credit line (head, in the sender's own device memory) is given
// back and restored whole too; one exported to a receiver process (shm) goes the other way
// round: the receiver lets go of its mapping, the sender sends it the new handle at resume.
// Pinned host memory (the control part) is not the device's and not counted.
#pragma once

#include <atomic>
#include <cstdint>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "transport/connector.h"

namespace braid::bootstrap {
class Bootstrap;
}

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

/// A device allocation a suspend let go of, for restoreSlots: this rank's own memory given
/// back, or its mapping of a peer process's memory (an shm sender's view of the slots).
struct SuspendedSlots {
  char* at = nullptr;
  int peer = -1;
  int link = -1;          ///< Connector::End::link
  bool imported = false;  ///< this rank's mapping of the peer's memory, else its own memory
  bool shared = false;    ///< its own memory that the peer maps: the peer gets a new handle at resume
  uint64_t bytes = 0;     ///< the bytes the kernels touch (FifoMemory::DeviceData::bytes)
};

/// Gives every releasable page back; returns the bytes of this rank's own memory. Only while
/// no operation runs on any connection of the communicator, on this rank or a peer (suspend's
/// barrier). With `device`, the device allocations given back, and the mappings of peers'
/// slots let go of, are appended to `suspended`, for restoreSlots.
uint64_t releaseSlots(const Connector& connector, FifoAllocator* device, std::vector<SuspendedSlots>* suspended);

/// One FIFO's entry in a resume's message from the owner of slots to the peer that maps them.
/// A ResumeHandle's link for the sender's credit line of FIFO `link` (not its slots).
constexpr int32_t kCreditLinkBase = 1 << 20;
static_assert(Connector::kRingLinks < kCreditLinkBase);

struct ResumeHandle {
  int32_t link;       ///< Connector::End::link, or kCreditLinkBase + it for the sender's credit line
  uint32_t replaced;  ///< 1: new memory, mapped through handle; 0: the memory stayed (nothing to map)
  uint8_t handle[FifoAllocator::kHandleBytes];  ///< FifoAllocator::exportData's
};
static_assert(std::is_trivially_copyable_v<ResumeHandle> && sizeof(ResumeHandle) == 8 + FifoAllocator::kHandleBytes);

/// Why the entries a peer sent (bytes from another process: checked before any is used) cannot
/// be this rank's: one for each of `links` (this rank's ends that map that peer's slots), each
/// once, replaced exactly where this rank let go of its mapping (`letGo`). "" when they are.
/// The handles themselves are checked by FifoAllocator::resumeImport (kind, size).
std::string checkResumeHandles(const std::vector<ResumeHandle>& got, const std::vector<int>& links,
                               const std::set<int>& letGo);

/// Resume, collective among the ranks whose slots a peer process maps: gives each of this
/// rank's own `suspended` memory again at its address (the counters as they were, the slots
/// zeroed), sends each peer that mapped some a new handle for each (bootstrap tag
/// kResumeHandlesTag; one message a peer, every message sent before any is awaited), receives
/// the peers' and maps them at the addresses this rank's kernels hold, removing from the list
/// what is done. A peer's message is checked as a descriptor is (its size, each link one of
/// this rank's suspended mappings from that peer, once, the handle's size the reservation's).
/// Throws, leaving the rest listed, when the device cannot or a peer does not answer (the
/// text names the rank); `abortFlag` ends the waits.
void restoreSlots(const Connector& connector, FifoAllocator* device, bootstrap::Bootstrap& channel,
                  std::vector<SuspendedSlots>* suspended, const std::atomic<bool>* abortFlag);

}  // namespace braid::transport
