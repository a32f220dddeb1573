// Host-side functions of NCCL's device API (declared by NVIDIA in nccl_device/*.h, which
// Braid does not ship yet). The team functions describe a communicator's ranks as teams:
// the world, the "LSA" team of ranks that can load/store each other's memory (here: the
// ranks of one node), and the "rail" team of ranks with the same local index on every node.
#include <cstddef>

#include "api/api.h"
#include "comm/communicator.h"
#include "comm/registrations.h"
#include "core/log.h"
#include "core/params.h"

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
typedef struct ncclGinOutboxHandle ncclGinOutboxHandle_t;
typedef struct ncclGinInboxA2AHandle ncclGinInboxA2AHandle_t;
/// NVIDIA's ncclMultimemHandle (passed by value): one device pointer.
typedef struct ncclMultimemHandle {
  void* mcBasePtr;
} ncclMultimemHandle_t;
/// NVIDIA's ncclCommProperties_t of 2.29.7 and later (2.29.2's differs from ginType on: see
/// queryProperties). Filled by ncclCommQueryProperties; size, magic, version are the caller's.
typedef struct ncclCommProperties {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int rank;
  int nRanks;
  int cudaDev;
  int nvmlDev;
  bool deviceApiSupport;
  bool multimemSupport;
  int ginType;  ///< ncclGinType_t: 0 none, 2 proxy, 3 GDAKI, 4 GPI
  int nLsaTeams;
  bool hostRmaSupport;
  int railedGinType;
} ncclCommProperties_t;
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

// ---- NCCL 2.29/2.30 host functions of the device API ----

namespace {

// NVIDIA's layout facts, checked here because nothing else in Braid reads this struct.
static_assert(offsetof(ncclCommProperties_t, rank) == 16 && offsetof(ncclCommProperties_t, deviceApiSupport) == 32 &&
              offsetof(ncclCommProperties_t, ginType) == 36 && offsetof(ncclCommProperties_t, nLsaTeams) == 40 &&
              offsetof(ncclCommProperties_t, hostRmaSupport) == 44 &&
              offsetof(ncclCommProperties_t, railedGinType) == 48 && sizeof(ncclCommProperties_t) == 56,
              "ncclCommProperties_t differs from NCCL 2.30.7's");

/// The part of the struct every version has (2.29.2's ends after multimemSupport and a one-byte ginType).
constexpr size_t kPropertiesCommonBytes = offsetof(ncclCommProperties_t, multimemSupport) + 1;

void queryProperties(Communicator& c, ncclCommProperties_t* props) {
  if (props->magic != NCCL_API_MAGIC) {
    fail(ncclInvalidUsage, "props->magic is %#x, expected %#x: initialise props with NCCL_COMM_PROPERTIES_INITIALIZER",
         props->magic, NCCL_API_MAGIC);
  }
  if (props->size < kPropertiesCommonBytes) {
    fail(ncclInvalidArgument, "props->size is %zu, smaller than any ncclCommProperties_t", props->size);
  }
  if (props->version < NCCL_VERSION(2, 29, 2)) {
    fail(ncclInvalidUsage, "props->version is %u; ncclCommProperties_t exists since NCCL 2.29.2 (22902)",
         props->version);
  }
  if (props->version > NCCL_VERSION_CODE && params::process().integer("NCCL_ENABLE_VERSION_CHECK") != 0) {
    fail(ncclInvalidUsage, "this library (NCCL %d) is older than the nccl.h the program was built with (props->version "
         "%u); NCCL_ENABLE_VERSION_CHECK=0 accepts it", NCCL_VERSION_CODE, props->version);
  }
  const RankIdentity& id = c.identity();
  props->rank = id.rank;
  props->nRanks = id.nRanks;
  props->cudaDev = id.cudaDevice;
  props->nvmlDev = id.cudaDevice;  // (Braid numbers devices as the CUDA runtime does: no NVML remapping)
  props->deviceApiSupport = false;  // no ncclDevComm yet
  props->multimemSupport = false;   // no NVLink SHARP multicast
  if (props->version <= NCCL_VERSION(2, 29, 3)) {
    // 2.29.2's ginType is one byte right after multimemSupport: 0 is "none" in both layouts.
    reinterpret_cast<unsigned char*>(props)[offsetof(ncclCommProperties_t, multimemSupport) + 1] = 0;
    return;
  }
  if (props->size < sizeof(ncclCommProperties_t)) {
    fail(ncclInvalidArgument, "props->size is %zu but version %u's struct takes %zu bytes", props->size,
         props->version, sizeof(ncclCommProperties_t));
  }
  props->ginType = 0;        // NCCL_GIN_TYPE_NONE: no GPU-initiated networking
  props->railedGinType = 0;
  props->nLsaTeams = id.nRanks / id.localRanks;  // one load/store team per host
  // As NCCL decides it (contexts, and one load/store team or a proxy that carries puts between
  // teams): Braid runs ncclPutSignal and friends on the host backend, inside a host by loads and
  // stores and between hosts through the proxy (rma_api.cc).
  props->hostRmaSupport = c.config().numRmaCtx > 0 && id.backend == Backend::kHost;
}

/// A window's entry and the checks NCCL makes on every pointer query.
WindowEntry windowFor(ncclWindow_t window, void** outPtr) {
  api::requireNonNull(window, "window");
  api::requireNonNull(outPtr, "outPtr");
  return WindowTable::findAnywhere(window);
}

void* offsetInto(void* base, const WindowEntry& w, size_t offset) {
  if (offset >= w.size) fail(ncclInvalidArgument, "offset is %zu; the window has %zu bytes", offset, w.size);
  return static_cast<char*>(base) + offset;
}

void* peerPointer(const WindowEntry& w, size_t offset, int peer) {
  const int n = static_cast<int>(w.peerBuffers.size());
  if (peer < 0 || peer >= n) fail(ncclInvalidArgument, "peer is %d; ranks are 0..%d", peer, n - 1);
  void* base = w.peerBuffers[peer];
  if (base == nullptr) {
    const bool notShareable = w.peerReach[peer] == WindowReach::kNotShareable;
    fail(ncclInvalidUsage, "rank %d's window memory is not mapped here: %s", peer,
         notShareable ? "it is in another process and not from ncclMemAlloc (register memory from ncclMemAlloc, which "
                        "the processes of a host map)"
                      : "it is on another host (Braid maps the windows of the ranks of one host)");
  }
  return offsetInto(base, w, offset);
}

constexpr const char* kNoMultimem = "Braid has no NVLink SHARP multicast (multimem) memory";
constexpr const char* kNoGin = "Braid has no GPU-initiated networking (GIN)";

}  // namespace

BRAID_API(ncclResult_t, ncclCommQueryProperties, ncclComm_t comm, ncclCommProperties_t* props);
ncclResult_t pncclCommQueryProperties(ncclComm_t comm, ncclCommProperties_t* props) {
  return api::guarded("ncclCommQueryProperties", comm, [&] {
    Communicator& c = communicatorFrom(comm);
    api::requireNonNull(props, "props");
    if (!c.hasBootstrap()) fail(ncclInvalidUsage, "the communicator has not completed init");
    queryProperties(c, props);
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclGetPeerDevicePointer, ncclWindow_t window, size_t offset, int peer, void** outPtr);
ncclResult_t pncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void** outPtr) {
  return api::guarded("ncclGetPeerDevicePointer", nullptr, [&] {
    const WindowEntry w = windowFor(window, outPtr);
    *outPtr = peerPointer(w, offset, peer);
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclGetLsaDevicePointer, ncclWindow_t window, size_t offset, int lsaRank, void** outPtr);
ncclResult_t pncclGetLsaDevicePointer(ncclWindow_t window, size_t offset, int lsaRank, void** outPtr) {
  return api::guarded("ncclGetLsaDevicePointer", nullptr, [&] {
    const WindowEntry w = windowFor(window, outPtr);
    // The load/store team is the ranks of one host, numbered in world order (see ncclTeamLsa).
    const int localRanks = w.localRanks, firstLocal = w.rank - w.localRank;
    if (lsaRank < 0 || lsaRank >= localRanks) {
      fail(ncclInvalidArgument, "lsaRank is %d; this window's load/store team has ranks 0..%d", lsaRank,
           localRanks - 1);
    }
    *outPtr = peerPointer(w, offset, firstLocal + lsaRank);
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclGetLsaMultimemDevicePointer, ncclWindow_t window, size_t offset, void** outPtr);
ncclResult_t pncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t, void** outPtr) {
  return api::guarded("ncclGetLsaMultimemDevicePointer", nullptr, [&]() -> ncclResult_t {
    windowFor(window, outPtr);
    *outPtr = nullptr;
    fail(ncclInvalidUsage, "%s", kNoMultimem);
  });
}

BRAID_API(ncclResult_t, ncclGetMultimemDevicePointer, ncclWindow_t window, size_t offset,
          ncclMultimemHandle_t multimem, void** outPtr);
ncclResult_t pncclGetMultimemDevicePointer(ncclWindow_t window, size_t, ncclMultimemHandle_t, void** outPtr) {
  return api::guarded("ncclGetMultimemDevicePointer", nullptr, [&]() -> ncclResult_t {
    windowFor(window, outPtr);
    *outPtr = nullptr;
    fail(ncclInvalidUsage, "%s", kNoMultimem);
  });
}

BRAID_API(ncclResult_t, ncclGinOutboxCreateRequirement, int nBlocks, int size_log2, ncclGinOutboxHandle_t* outHandle,
          ncclDevResourceRequirements_t* outReq);
ncclResult_t pncclGinOutboxCreateRequirement(int, int, ncclGinOutboxHandle_t*, ncclDevResourceRequirements_t*) {
  return api::guarded("ncclGinOutboxCreateRequirement", nullptr,
                      []() -> ncclResult_t { fail(ncclInvalidUsage, "%s", kNoGin); });
}

BRAID_API(ncclResult_t, ncclGinInboxA2ACreateRequirement, ncclTeam_t peers, int nBlocks, int size_log2,
          ncclGinInboxA2AHandle_t* outHandle, ncclDevResourceRequirements_t* outReq);
ncclResult_t pncclGinInboxA2ACreateRequirement(ncclTeam_t, int, int, ncclGinInboxA2AHandle_t*,
                                               ncclDevResourceRequirements_t*) {
  return api::guarded("ncclGinInboxA2ACreateRequirement", nullptr,
                      []() -> ncclResult_t { fail(ncclInvalidUsage, "%s", kNoGin); });
}
