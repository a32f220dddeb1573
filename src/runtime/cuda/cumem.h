// GPU memory through the driver's virtual memory API (cuMem), as NCCL allocates it when
// NCCL_CUMEM_ENABLE is on: physical memory created with a POSIX file descriptor handle, mapped
// at an address reserved for it, readable and writable by its device and by every device that
// can reach it. Such memory is shared with another process by passing the descriptor
// (core/fd_exchange.h) rather than through a legacy CUDA IPC handle. The driver's entry points
// are looked up through the runtime (libcuda is never linked).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/fd_exchange.h"

namespace braid::runtime::cuda {

/// Whether cuMem memory is used on `device`: NCCL_CUMEM_ENABLE (1 by default), the driver's
/// entry points, and the device's support for it and for file descriptor handles. Logged once.
bool cumemEnabled(int device);
/// `bytes` of `device`'s memory (rounded up to the allocation granularity), exportable as a
/// file descriptor; throws ncclUnhandledCudaError naming the driver call that failed.
void* cumemAllocate(int device, size_t bytes);
/// Whether p is a live cumemAllocate or cumemImport mapping.
bool cumemOwns(const void* p);
/// Unmaps and releases what cumemAllocate or cumemImport returned.
void cumemFree(void* p);
/// Bytes of the mapping at p (granularity-rounded), 0 when it is none of cumemAllocate's or
/// cumemImport's.
size_t cumemSize(const void* p);

/// Suspend (as NCCL 2.30's memory manager gives back dynamic memory): the bytes cumemSuspend(p)
/// gives back (or gave back: p suspended), 0 when p is no mapping of cumemAllocate's or was ever
/// exported but to a peer that re-imports (cumemShare, dmabufFd, cumemExport without
/// peerReimports: another process or a NIC maps its physical memory, which releasing this
/// handle would not free and a new one would not replace).
size_t cumemSuspendable(const void* p);
/// Unmaps and releases the physical memory at p (cumemSuspendable, not suspended), keeping the
/// address reserved; only while no kernel, peer or copy touches it. Throws when the driver refuses.
void cumemSuspend(void* p);
/// Creates physical memory for p (cumemSuspend's) again on its device and maps it at the same
/// address for the same devices as before; its contents are undefined. Throws when it cannot.
void cumemResume(void* p);
/// A new file descriptor for the memory at p (from cumemAllocate) and its mapped size.
/// peerReimports: the process that maps it lets go of its mapping at every suspend and maps the
/// new memory at resume (FIFO slots: cumemSuspendImport, cumemResumeImport), so p stays
/// suspendable.
int cumemExport(void* p, size_t* bytes, bool peerReimports = false);
/// Maps on `device` the `bytes` another process exported as `fd` (the caller closes fd).
void* cumemImport(int device, int fd, size_t bytes);
/// Suspend, the importer's side: unmaps and releases cumemImport's mapping p, keeping the
/// address reserved (the exporter's cumemSuspend then frees the physical memory). Throws when
/// p is no live import.
void cumemSuspendImport(void* p);
/// Resume: maps at p (cumemSuspendImport's) the memory another process exported anew as `fd`
/// (the caller closes fd), which must be `bytes`, the reservation's size; throws when not.
void cumemResumeImport(void* p, int fd, size_t bytes);

/// The allocation of this process's (cumemAllocate's, not an import) that holds all of
/// [p, p + bytes): its base and size; false when there is none.
bool cumemFind(const void* p, size_t bytes, void** base, size_t* size);
/// Where (core/fd_exchange.h) other processes fetch the allocation at `base` (cumemAllocate's):
/// offered at the first call, withdrawn by cumemFree.
fds::Offer cumemShare(void* base);

/// A new dma-buf file descriptor for the host pages around `bytes` of `device`'s memory at p
/// (cuMem or cudaMalloc memory), for a NIC to reach it (GPU Direct RDMA), and p's offset in it;
/// -1 with the reason in `why` when the driver or device cannot.
int dmabufFd(int device, void* p, size_t bytes, uint64_t* offset, std::string* why);

/// Whether the calling thread has a current CUDA context (true when the driver cannot say).
/// A thread without one reports device 0 as current, and setting device 0 "back" would make
/// a context there for nothing (hundreds of MiB of GPU 0 per process).
bool threadHasContext();

}  // namespace braid::runtime::cuda
