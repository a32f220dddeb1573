// Suspend and resume (NCCL 2.29.7): releasing a communicator's dynamic memory while it is idle.
// Exported and argument-checked; the work itself arrives later (the calls say so).
#include "api/api.h"

using namespace braid;

namespace {
constexpr const char* kSuspendWork = "suspend and resume (NCCL_SUSPEND_MEM)";
}

BRAID_API(ncclResult_t, ncclCommSuspend, ncclComm_t comm, int flags);
ncclResult_t pncclCommSuspend(ncclComm_t comm, int flags) {
  return api::guarded("ncclCommSuspend", comm, [&]() -> ncclResult_t {
    communicatorFrom(comm);
    if ((flags & ~NCCL_SUSPEND_MEM) != 0) {
      fail(ncclInvalidArgument, "flags is %#x; the only flag is NCCL_SUSPEND_MEM (%#x)", static_cast<unsigned>(flags),
           NCCL_SUSPEND_MEM);
    }
    api::notImplemented(kSuspendWork);
  });
}

BRAID_API(ncclResult_t, ncclCommResume, ncclComm_t comm);
ncclResult_t pncclCommResume(ncclComm_t comm) {
  return api::guarded("ncclCommResume", comm, [&]() -> ncclResult_t {
    communicatorFrom(comm);
    api::notImplemented(kSuspendWork);
  });
}

BRAID_API(ncclResult_t, ncclCommMemStats, ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value);
ncclResult_t pncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value) {
  return api::guarded("ncclCommMemStats", comm, [&]() -> ncclResult_t {
    communicatorFrom(comm);
    api::requireNonNull(value, "value");
    const int raw = rawCode(stat);
    if (raw < ncclStatGpuMemSuspend || raw > ncclStatGpuMemTotal) {
      fail(ncclInvalidArgument, "stat is %d; it must be one of ncclStatGpuMemSuspend (0) to ncclStatGpuMemTotal (3)",
           raw);
    }
    api::notImplemented(kSuspendWork);
  });
}
