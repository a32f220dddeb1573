// The registry of communicator handles: which addresses are live communicators, and the
// calls running on each.
//
// A handle (ncclComm_t) is validated here, never by reading the object behind it: a stale
// handle points at freed memory. Each communicator's storage is a page of a reserved address
// range that is handed out once (until the range wraps round, after millions of
// communicators), so a stale handle can never name a newer communicator, and the registry's
// word for each page outlives the object. The word holds
//   - kLive from construction until the storage is freed,
//   - kClosing from the moment ncclCommDestroy or ncclCommAbort begins (no call is admitted
//     after it, so a destroy cannot be starved by a thread that keeps calling),
//   - the number of calls in progress (enter/leave), which destroy waits to see reach 0.
#pragma once

#include <cstddef>

namespace braid::handles {

/// Storage for one communicator object of `bytes` (at most a page), at an address this process
/// has not handed out before; its registry word starts at 0 (not live). Throws ncclSystemError
/// when no address space can be had.
void* allocate(size_t bytes);
/// Frees storage from allocate(): the registry word goes back to 0 (so the handle reads as
/// destroyed) and the page's memory goes back to the system.
void release(void* storage) noexcept;

/// In a forked child: the handle reads as destroyed from now on, and its storage (the
/// parent's object, deliberately never destroyed here) is never handed out again.
void abandon(const void* handle) noexcept;
/// Marks a constructed communicator live.
void publish(const void* handle) noexcept;
/// Admits a call on `handle`: true (and counted) when it is live and not closing. Reads only
/// the registry, so any pointer may be passed.
bool enter(const void* handle) noexcept;
/// Ends a call admitted by enter().
void leave(const void* handle) noexcept;

enum class CloseStart { kStarted, kNotLive, kAlreadyClosing };
/// Destroy and abort: from now on no call is admitted. Only one caller gets kStarted.
CloseStart beginClose(const void* handle) noexcept;
/// Waits until no admitted call runs on `handle` (its close has begun).
void waitIdle(const void* handle) noexcept;

/// Whether `handle` is a live communicator whose close has not begun.
bool live(const void* handle) noexcept;
/// Whether `handle` is a communicator being destroyed (its close begun, its storage not yet freed).
bool closing(const void* handle) noexcept;

}  // namespace braid::handles
