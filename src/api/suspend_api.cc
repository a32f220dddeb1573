// Suspend and resume (NCCL 2.29.7): giving back a communicator's dynamic memory while it is idle.
//
// As in NCCL 2.30.7, both calls are collective: every rank of the communicator calls them, each
// waits for its own operations (a device's stream work) and then meets the others at a bootstrap
// barrier, inside a group at the group's end. Only after that barrier is it safe to give back
// memory a peer writes into (a receiver's FIFO slots): no rank has an operation running. What is
// given back is transport/suspend.h's and the scratch memory. Resume maps a device's FIFO
// memory again at the addresses it had (on the host backend the mappings stayed: the pages
// come back on first touch), then meets the others again, so that no rank's next operation
// starts, nor writes into a peer's FIFO, while that peer is still suspended. FIFO slots a peer
// process maps are exchanged in between: the owner sends new handles, the peer maps them at the
// addresses its kernels hold (transport::restoreSlots). NCCL does not check for use while
// suspended (its memory is unmapped); Braid refuses the operation with ncclInvalidUsage. A
// failed resume (a peer that died, a device that cannot map) leaves the communicator suspended
// for good, as NCCL's (its memory manager stays "released" with the group's error): every later
// call but destroy and abort is refused, saying why.
#include <cstdio>
#include <string>

#include "api/api.h"
#include "bootstrap/bootstrap.h"
#include "core/params.h"
#include "datapath/data_path.h"

using namespace braid;

namespace {

/// The communicator behind comm once its init has completed (a nonblocking init is waited for).
Communicator& readyCommunicator(ncclComm_t comm) {
  Communicator& c = communicatorFrom(comm);
  c.waitForJob();
  if (!c.hasDataPath()) fail(ncclInvalidUsage, "communicator %p has not completed its init", static_cast<void*>(comm));
  return c;
}

/// "communicator 0x.. (rank r of n)", for the texts.
std::string named(const Communicator& c) {
  char text[96];
  std::snprintf(text, sizeof text, "communicator %p (rank %d of %d)", static_cast<const void*>(&c), c.identity().rank,
                c.identity().nRanks);
  return text;
}

/// The bootstrap barrier of suspend and resume, whose failure (a rank that never calls `call`:
/// the bootstrap timeout) says what it means.
void meetEveryRank(Communicator& c, const char* call) {
  try {
    c.bootstrap().barrier();
  } catch (const Error& e) {
    fail(e.code(), "every rank of %s must call %s; they did not all meet: %s", named(c).c_str(), call, e.what());
  }
}

/// NCCL_DISABLE_MEM_MANAGER=1: NCCL 2.30.7 refuses suspend and resume with ncclInvalidUsage.
void refuseWithoutMemManager(const char* call) {
  if (params::process().integer("NCCL_DISABLE_MEM_MANAGER") != 0) {
    fail(ncclInvalidUsage, "%s: NCCL_DISABLE_MEM_MANAGER=1 turns the memory manager off, and with it suspend and resume",
         call);
  }
}

}  // namespace

BRAID_API(ncclResult_t, ncclCommSuspend, ncclComm_t comm, int flags);
ncclResult_t pncclCommSuspend(ncclComm_t comm, int flags) {
  return api::guarded("ncclCommSuspend", comm, [&]() -> ncclResult_t {
    Communicator& c = readyCommunicator(comm);
    if ((flags & ~NCCL_SUSPEND_MEM) != 0) {
      fail(ncclInvalidArgument, "flags is %#x; the only flag is NCCL_SUSPEND_MEM (%#x)", static_cast<unsigned>(flags),
           NCCL_SUSPEND_MEM);
    }
    if ((flags & NCCL_SUSPEND_MEM) == 0) return ncclSuccess;  // (as NCCL: nothing asked, nothing done)
    refuseWithoutMemManager("ncclCommSuspend");
    if (c.suspended()) fail(ncclInvalidUsage, "%s is suspended already", named(c).c_str());
    c.setSuspended(true);  // (from here on its operations are refused, also later in this group)
    Communicator* raw = &c;
    return api::dispatch(c, [raw] {
      datapath::DataPath& path = raw->dataPath();
      try {
        path.synchronize();
        meetEveryRank(*raw, "ncclCommSuspend");  // every rank's operations have ended: no peer writes into our FIFOs
      } catch (...) {
        raw->setSuspended(false);  // (nothing was given back)
        throw;
      }
      path.releaseMemory();
    });
  });
}

BRAID_API(ncclResult_t, ncclCommResume, ncclComm_t comm);
ncclResult_t pncclCommResume(ncclComm_t comm) {
  return api::guarded("ncclCommResume", comm, [&]() -> ncclResult_t {
    Communicator& c = readyCommunicator(comm);
    if (!c.suspended()) fail(ncclInvalidUsage, "%s is not suspended (ncclCommSuspend first)", named(c).c_str());
    if (!c.resumeFailure().empty()) c.refuseIfSuspended("ncclCommResume");  // (unusable: says why)
    refuseWithoutMemManager("ncclCommResume");
    Communicator* raw = &c;
    return api::dispatch(c, [raw] {
      try {
        // (before the barrier: after it, peers write into our FIFOs)
        raw->dataPath().restoreMemory(raw->bootstrap(), &raw->abortFlag());
        meetEveryRank(*raw, "ncclCommResume");  // (a peer's next operation must not find this rank still suspended)
      } catch (const Error& e) {
        // Part of the memory may be back, part not, a peer's FIFO mapped or not: no state to
        // run an operation in nor to retry from. It stays suspended, unusable, and says why.
        raw->setResumeFailure(e.what());
        fail(e.code(), "%s; %s stays suspended and is unusable: ncclCommDestroy or ncclCommAbort it", e.what(),
             named(*raw).c_str());
      }
      raw->setSuspended(false);
    });
  });
}

BRAID_API(ncclResult_t, ncclCommMemStats, ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value);
ncclResult_t pncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value) {
  return api::guarded("ncclCommMemStats", comm, [&]() -> ncclResult_t {
    Communicator& c = readyCommunicator(comm);
    api::requireNonNull(value, "value");
    const datapath::DataPath::MemoryUse use = c.dataPath().memoryUse();
    switch (rawCode(stat)) {
      case ncclStatGpuMemSuspend:
        *value = use.releasable;
        return ncclSuccess;
      case ncclStatGpuMemSuspended:
        *value = c.suspended() ? 1 : 0;
        return ncclSuccess;
      case ncclStatGpuMemPersist:
        *value = use.persistent;
        return ncclSuccess;
      case ncclStatGpuMemTotal:
        *value = use.releasable + use.persistent;
        return ncclSuccess;
      default:
        fail(ncclInvalidArgument, "stat is %d; it must be one of ncclStatGpuMemSuspend (0) to ncclStatGpuMemTotal (3)",
             rawCode(stat));
    }
  });
}
