// Communicator creation, lifecycle and queries.
#include "api/api.h"
#include "comm/communicator.h"

using namespace braid;

namespace {
constexpr const char* kBootstrapWork = "the bootstrap and communicator-lifecycle work";
}

BRAID_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId* uniqueId);
ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId) {
  return api::guarded("ncclGetUniqueId", nullptr, [&]() -> ncclResult_t {
    api::requireNonNull(uniqueId, "uniqueId");
    api::notImplemented(kBootstrapWork);
  });
}

BRAID_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* comm, int nranks, ncclUniqueId commId,
          int rank, ncclConfig_t* config);
ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int, ncclUniqueId, int, ncclConfig_t*) {
  return api::guarded("ncclCommInitRankConfig", nullptr, [&]() -> ncclResult_t {
    api::requireNonNull(comm, "comm");
    api::notImplemented(kBootstrapWork);
  });
}

BRAID_API(ncclResult_t, ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t pncclCommInitRank(ncclComm_t* comm, int, ncclUniqueId, int) {
  return api::guarded("ncclCommInitRank", nullptr, [&]() -> ncclResult_t {
    api::requireNonNull(comm, "comm");
    api::notImplemented(kBootstrapWork);
  });
}

BRAID_API(ncclResult_t, ncclCommInitAll, ncclComm_t* comm, int ndev, const int* devlist);
ncclResult_t pncclCommInitAll(ncclComm_t* comm, int, const int*) {
  return api::guarded("ncclCommInitAll", nullptr, [&]() -> ncclResult_t {
    api::requireNonNull(comm, "comm");
    api::notImplemented(kBootstrapWork);
  });
}

BRAID_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t* newcomm, int nranks, int myrank,
          int nId, ncclUniqueId* commIds, ncclConfig_t* config);
ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int, int, int, ncclUniqueId*, ncclConfig_t*) {
  return api::guarded("ncclCommInitRankScalable", nullptr, [&]() -> ncclResult_t {
    api::requireNonNull(newcomm, "newcomm");
    api::notImplemented(kBootstrapWork);
  });
}

BRAID_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm);
ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  return api::guarded("ncclCommFinalize", comm, [&]() -> ncclResult_t {
    communicatorFrom(comm);
    api::notImplemented(kBootstrapWork);
  });
}

BRAID_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm);
ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  return api::guarded("ncclCommDestroy", comm, [&]() -> ncclResult_t {
    if (comm == nullptr) return ncclSuccess;  // as NCCL: destroying NULL is a no-op
    communicatorFrom(comm);
    api::notImplemented(kBootstrapWork);
  });
}

BRAID_API(ncclResult_t, ncclCommAbort, ncclComm_t comm);
ncclResult_t pncclCommAbort(ncclComm_t comm) {
  return api::guarded("ncclCommAbort", comm, [&]() -> ncclResult_t {
    if (comm == nullptr) return ncclSuccess;  // as NCCL: aborting NULL is a no-op
    communicatorFrom(comm);
    api::notImplemented(kBootstrapWork);
  });
}

BRAID_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags);
ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  return api::guarded("ncclCommRevoke", comm, [&]() -> ncclResult_t {
    communicatorFrom(comm);
    if (revokeFlags != NCCL_REVOKE_DEFAULT) {
      fail(ncclInvalidArgument, "revokeFlags is %d; it must be NCCL_REVOKE_DEFAULT (0)", revokeFlags);
    }
    api::notImplemented(kBootstrapWork);
  });
}

BRAID_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
          ncclConfig_t* config);
ncclResult_t pncclCommSplit(ncclComm_t comm, int, int, ncclComm_t* newcomm, ncclConfig_t*) {
  return api::guarded("ncclCommSplit", comm, [&]() -> ncclResult_t {
    communicatorFrom(comm);
    api::requireNonNull(newcomm, "newcomm");
    api::notImplemented(kBootstrapWork);
  });
}

BRAID_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int* excludeRanksList,
          int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags);
ncclResult_t pncclCommShrink(ncclComm_t comm, int*, int, ncclComm_t* newcomm, ncclConfig_t*, int) {
  return api::guarded("ncclCommShrink", comm, [&]() -> ncclResult_t {
    communicatorFrom(comm);
    api::requireNonNull(newcomm, "newcomm");
    api::notImplemented(kBootstrapWork);
  });
}

BRAID_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* asyncError);
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  return api::guarded("ncclCommGetAsyncError", comm, [&] {
    const Communicator& c = communicatorFrom(comm);
    api::requireNonNull(asyncError, "asyncError");
    *asyncError = c.asyncError();
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int* count);
ncclResult_t pncclCommCount(const ncclComm_t comm, int* count) {
  return api::guarded("ncclCommCount", comm, [&] {
    const Communicator& c = communicatorFrom(comm);
    api::requireNonNull(count, "count");
    *count = c.identity().nRanks;
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int* device);
ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device) {
  return api::guarded("ncclCommCuDevice", comm, [&] {
    const Communicator& c = communicatorFrom(comm);
    api::requireNonNull(device, "device");
    *device = c.identity().cudaDevice;
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int* rank);
ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank) {
  return api::guarded("ncclCommUserRank", comm, [&] {
    const Communicator& c = communicatorFrom(comm);
    api::requireNonNull(rank, "rank");
    *rank = c.identity().rank;
    return ncclSuccess;
  });
}
