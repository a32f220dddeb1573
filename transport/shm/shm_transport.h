// Ranks that are processes on one host: the FIFO memory is a POSIX shared-memory segment,
// created by the receiver with mode 0600, mapped by the sender, and unlinked by the receiver
// as soon as the sender has mapped it (so a crash later leaks nothing in /dev/shm).
//
// A segment is named after its creator: /braid-<pid>-<pid namespace>-<process id>-<sequence>
// (the namespace's inode and process::randomId() in hex). A process killed during connection
// setup leaves its segments behind; the next init on the host removes those whose creator's
// pid no longer exists in this pid namespace (removeOrphans), and leaves other namespaces' alone.
//
// With a GPU backend (an allocator) the segment holds the control part only, and the slots,
// with tail and head in front of them (fifo.h: kDeviceCounterBytes), are in the receiver's GPU
// memory, which the sender maps through the allocator's handle (cuMem or CUDA IPC): the
// kernels then move data and poll counters device to device instead of across the bus. Where the
// allocator cannot share its memory, or `deviceData` is off (NCCL_P2P_DISABLE), the slots
// stay in the segment.
//
// head is the sender's: a credit line it makes when it maps the receiver's segment (its GPU's
// memory, exported, where the receiver's slots are GPU memory; else a one-page segment of its
// own), named in its acknowledgement of the connection. The receiver maps it and its kernels
// write head there; the sender's credit waits poll their own memory, as NCCL's sendMem->head.
// The receiver unlinks the credit segment once mapped; the sender frees exported GPU memory
// only once the receiver says it no longer maps it (FifoMemory::creditStateWord).
#pragma once

#include "transport/fifo.h"

namespace braid::transport::shm {

/// Receiver side: creates and maps a new segment named after this process (allocator: the
/// backend's, or null on the host).
std::unique_ptr<FifoMemory> create(const FifoSizes& sizes, FifoAllocator* allocator, bool deviceData, Descriptor* out);
/// The start of every segment name a process makes: "/braid-<pid>-<pid namespace>-<process
/// id>-" (a sender checks that a receiver's descriptor names one of the receiver's segments).
std::string segmentPrefix(int pid, uint64_t pidNamespace, uint64_t processId);
/// Sender side: maps the receiver's segment (and its slots, through `allocator`, when they are
/// in its GPU's memory). With `ack`: makes the sender's credit line (head) in its own memory
/// and says where in *ack (credit, creditName or creditHandle; the caller fills the rest).
std::unique_ptr<FifoMemory> import(const Descriptor& d, FifoAllocator* allocator, Acknowledgement* ack = nullptr);
/// Receiver side, once the sender's acknowledgement is checked (checkAcknowledgement): maps
/// its credit line, where this end's kernels then write head.
void adoptCredit(FifoMemory& receiver, const Acknowledgement& ack, FifoAllocator* allocator);
/// Receiver side, once the sender has mapped it: removes the name (the mapping stays).
void unlinkName(const Descriptor& d);

/// The creator of segment `name` (a /dev/shm entry, with or without the leading '/'): false
/// unless it is one of this transport's names.
bool segmentOwner(const std::string& name, int* pid, uint64_t* pidNamespace);

/// Removes /dev/shm's segments whose creator was a process of this pid namespace that no
/// longer exists (killed during connection setup), and says so at INFO; returns how many.
int removeOrphans();

}  // namespace braid::transport::shm
