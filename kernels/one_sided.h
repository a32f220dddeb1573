// One-sided operations on the CUDA backend (ncclPutSignal, ncclSignal, ncclWaitSignal): what
// runs on the user's stream once the earlier work there has ended.
//
// A put is a copy into the peer's window (the runtime's device-to-device copy on the stream)
// followed by a signal; a signal is one release-add to the peer's counter of (ctx, this rank)
// (comm/signals.h). The counters stay in the host memory file every rank of the host maps, pinned
// and mapped for the GPU, so the host's own paths (the proxy's arrivals, messages that count
// what arrived) and the GPU's add to the same words; a counter is one 8-byte word crossing the
// bus once per signal. The add is made at system scope after a system fence: the copy that
// preceded it on the stream has ended when the signal's kernel starts, and the fence orders its
// writes, as seen by any reader, before the count. A wait is a kernel that spins with acquire
// loads until each counter reaches the count the host computed when the wait was enqueued
// (waits are counted in call order, so that count is known then), watching the communicator's
// abort word: an abort ends the kernel, and the stream goes on.
#pragma once

#include "kernels/platform.h"

namespace braid::kernels {

/// One counter a wait watches, in memory the device reaches, and the count that ends it.
struct SignalWait {
  uint64_t* counter;
  uint64_t target;
};

/// The most counters one wait kernel watches: its waits travel in the launch's parameters
/// (16 bytes each); a wait for more is several launches one after the other.
constexpr int kMaxSignalWaits = 64;

/// The parameters of one wait launch.
struct SignalWaits {
  SignalWait waits[kMaxSignalWaits];
  int count;
};

/// One thread. Adds one to *counter with release order at system scope: every write this
/// thread's stream made before (a copy's, ended) is visible to a reader that sees the count.
BRAID_INLINE void signalArrive(uint64_t* counter) {
  fenceRelease();
  BRAID_ATOMIC_REF(uint64_t)(*counter).fetch_add(1, BRAID_ORDER(release));
}

/// One thread. Waits until every counter of waits[0, count) reaches its target (acquire order:
/// what the signalling ranks wrote before their adds is visible after), or until *abortFlag
/// is raised (kAborted).
BRAID_OUTLINE WaitResult waitSignals(const SignalWait* waits, int count, const uint32_t* abortFlag) {
  for (int i = 0; i < count; ++i) {
    uint64_t* counter = waits[i].counter;
    const uint64_t target = waits[i].target;
    if (waitUntil([&] { return loadAcquire(counter) >= target; }, abortFlag) == WaitResult::kAborted)
      return WaitResult::kAborted;
  }
  return WaitResult::kReady;
}

}  // namespace braid::kernels
