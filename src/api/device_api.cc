// Host-side functions of NCCL's device API (declared by NVIDIA in nccl_device/*.h, which
// Braid does not ship yet). The team functions describe a communicator's ranks as teams:
// the world, the "LSA" team of ranks that can load/store each other's memory (here: the
// ranks of one node), and the "rail" team of ranks with the same local index on every node.
#include "api/api.h"
#include "comm/communicator.h"
#include "core/log.h"

using namespace braid;

extern "C" {
/// NVIDIA's ncclTeam_t: a strided range of ranks. Same layout, returned by value.
typedef struct ncclTeam {
  int nRanks, rank, stride;
} ncclTeam_t;
typedef struct ncclDevComm ncclDevComm_t;
typedef struct ncclDevCommRequirements ncclDevCommRequirements_t;
typedef struct ncclDevResourceRequirements ncclDevResourceRequirements_t;
typedef struct ncclLLA2AHandle ncclLLA2AHandle_t;
typedef struct ncclLsaBarrierHandle ncclLsaBarrierHandle_t;
typedef struct ncclGinBarrierHandle ncclGinBarrierHandle_t;
}

namespace {

constexpr const char* kDeviceApiWork = "the device API work, after the CUDA backend";

/// Runs a function that returns a value rather than a result code: on failure the reason
/// goes to the last-error text and `failed` is returned.
template <typename T, typename Body>
T valueOrFailed(const char* function, ncclComm_t comm, T failed, Body&& body) noexcept {
  T out = failed;
  api::guarded(function, comm, [&] {
    out = body();
    return ncclSuccess;
  });
  return out;
}

ncclTeam_t team(int nRanks, int rank, int stride) {
  ncclTeam_t t;
  t.nRanks = nRanks;
  t.rank = rank;
  t.stride = stride;
  return t;
}

const ncclTeam_t kNoTeam = {0, 0, 0};

}  // namespace

BRAID_API(ncclTeam_t, ncclTeamWorld, ncclComm_t comm);
ncclTeam_t pncclTeamWorld(ncclComm_t comm) {
  return valueOrFailed("ncclTeamWorld", comm, kNoTeam, [&] {
    const RankIdentity& id = communicatorFrom(comm).identity();
    return team(id.nRanks, id.rank, 1);
  });
}

BRAID_API(ncclTeam_t, ncclTeamLsa, ncclComm_t comm);
ncclTeam_t pncclTeamLsa(ncclComm_t comm) {
  return valueOrFailed("ncclTeamLsa", comm, kNoTeam, [&] {
    const RankIdentity& id = communicatorFrom(comm).identity();
    return team(id.localRanks, id.localRank, 1);
  });
}

BRAID_API(ncclTeam_t, ncclTeamRail, ncclComm_t comm);
ncclTeam_t pncclTeamRail(ncclComm_t comm) {
  return valueOrFailed("ncclTeamRail", comm, kNoTeam, [&] {
    const RankIdentity& id = communicatorFrom(comm).identity();
    return team(id.nRanks / id.localRanks, id.rank / id.localRanks, id.localRanks);
  });
}

BRAID_API(int, ncclTeamRankToWorld, ncclComm_t comm, ncclTeam_t tm, int rank);
int pncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t tm, int rank) {
  return valueOrFailed("ncclTeamRankToWorld", comm, -1, [&] {
    return communicatorFrom(comm).identity().rank + (rank - tm.rank) * tm.stride;
  });
}

BRAID_API(int, ncclTeamRankToLsa, ncclComm_t comm, ncclTeam_t tm, int rank);
int pncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t tm, int rank) {
  return valueOrFailed("ncclTeamRankToLsa", comm, -1, [&] {
    return communicatorFrom(comm).identity().localRank + (rank - tm.rank) * tm.stride;
  });
}

BRAID_API(int, ncclLLA2ACalcSlots, int maxElts, int maxEltSize);
int pncclLLA2ACalcSlots(int maxElts, int maxEltSize) {
  // One 16-byte LL line carries 8 bytes of payload, so an element takes ceil(size/8) slots.
  return valueOrFailed("ncclLLA2ACalcSlots", nullptr, -1, [&] {
    if (maxElts < 0) fail(ncclInvalidArgument, "maxElts is %d; it must be >= 0", maxElts);
    if (maxEltSize < 0) fail(ncclInvalidArgument, "maxEltSize is %d; it must be >= 0", maxEltSize);
    return maxElts * ((maxEltSize + 7) / 8);
  });
}

BRAID_API(ncclResult_t, ncclDevCommCreate, ncclComm_t comm, ncclDevCommRequirements_t const* reqs,
          ncclDevComm_t* outDevComm);
ncclResult_t pncclDevCommCreate(ncclComm_t comm, ncclDevCommRequirements_t const*, ncclDevComm_t*) {
  return api::guarded("ncclDevCommCreate", comm, [&]() -> ncclResult_t { api::notImplemented(kDeviceApiWork); });
}

BRAID_API(ncclResult_t, ncclDevCommDestroy, ncclComm_t comm, ncclDevComm_t const* devComm);
ncclResult_t pncclDevCommDestroy(ncclComm_t comm, ncclDevComm_t const*) {
  return api::guarded("ncclDevCommDestroy", comm, [&]() -> ncclResult_t { api::notImplemented(kDeviceApiWork); });
}

BRAID_API(ncclResult_t, ncclLLA2ACreateRequirement, int nBlocks, int nSlots, ncclLLA2AHandle_t* outHandle,
          ncclDevResourceRequirements_t* outReq);
ncclResult_t pncclLLA2ACreateRequirement(int, int, ncclLLA2AHandle_t*, ncclDevResourceRequirements_t*) {
  return api::guarded("ncclLLA2ACreateRequirement", nullptr,
                      []() -> ncclResult_t { api::notImplemented(kDeviceApiWork); });
}

BRAID_API(ncclResult_t, ncclLsaBarrierCreateRequirement, ncclTeam_t team, int nBarriers,
          ncclLsaBarrierHandle_t* outHandle, ncclDevResourceRequirements_t* outReq);
ncclResult_t pncclLsaBarrierCreateRequirement(ncclTeam_t, int, ncclLsaBarrierHandle_t*,
                                              ncclDevResourceRequirements_t*) {
  return api::guarded("ncclLsaBarrierCreateRequirement", nullptr,
                      []() -> ncclResult_t { api::notImplemented(kDeviceApiWork); });
}

BRAID_API(ncclResult_t, ncclGinBarrierCreateRequirement, ncclComm_t comm, ncclTeam_t team, int nBarriers,
          ncclGinBarrierHandle_t* outHandle, ncclDevResourceRequirements_t* outReq);
ncclResult_t pncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam_t, int, ncclGinBarrierHandle_t*,
                                              ncclDevResourceRequirements_t*) {
  return api::guarded("ncclGinBarrierCreateRequirement", comm,
                      []() -> ncclResult_t { api::notImplemented(kDeviceApiWork); });
}
