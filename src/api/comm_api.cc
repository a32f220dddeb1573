// Communicator creation, lifecycle and queries.
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "api/api.h"
#include "bootstrap/bootstrap.h"
#include "comm/communicator.h"
#include "datapath/data_path.h"
#include "comm/grow.h"
#include "comm/init.h"
#include "comm/split.h"
#include "core/log.h"
#include "group/group.h"

using namespace braid;

namespace {

/// ncclCommDestroy and ncclCommAbort. From the start no call is admitted on the handle (so a
/// thread that keeps calling cannot starve it, and a second destroy is refused); aborting
/// raises the flag every wait of the communicator watches, so calls in progress and a
/// background job end within one poll slice (~50 ms); then the calls in progress are waited
/// for, peers still waiting on this rank are told it left, and everything is freed.
/// In a forked child the communicator is the parent's: released without a word to any thread
/// or peer (see Communicator::abandonInChild).
void release(ncclComm_t handle, bool abort) {
  const char* call = abort ? "ncclCommAbort" : "ncclCommDestroy";
  switch (handles::beginClose(handle)) {
    case handles::CloseStart::kStarted:
      break;
    case handles::CloseStart::kAlreadyClosing:
      fail(ncclInvalidUsage, "comm %p is already being destroyed (ncclCommDestroy or ncclCommAbort was called on it "
           "by another thread); %s is not needed", static_cast<void*>(handle), call);
    case handles::CloseStart::kNotLive:
      fail(ncclInvalidArgument, "comm %p is not a live communicator (destroyed, or never one)",
           static_cast<void*>(handle));
  }
  Communicator& comm = *handle;
  const RankIdentity& id = comm.identity();
  if (comm.inheritedByFork()) {
    BRAID_INFO(log::kInit, "comm %p rank %d nranks %d - %s in process %d, a fork of process %d that created it: its "
               "threads and connections are the parent's, so nothing is joined or closed here (its memory is freed "
               "when this process ends)", static_cast<void*>(&comm), id.rank, id.nRanks, abort ? "Abort" : "Destroy",
               static_cast<int>(getpid()), static_cast<int>(comm.creatorPid()));
    comm.abandonInChild();
    return;
  }
  if (abort) comm.requestAbort();
  group::forget(&comm);  // (this thread's group lets go of it: waitIdle would wait for that)
  handles::waitIdle(handle);
  if (comm.hasDataPath()) {
    comm.dataPath().departWith("rank " + std::to_string(id.rank) + "'s communicator was " +
                               (abort ? "aborted (ncclCommAbort)" : "destroyed (ncclCommDestroy)") +
                               " while this rank waited on it");
  }
  BRAID_INFO(log::kInit, "comm %p rank %d nranks %d - %s COMPLETE", static_cast<void*>(&comm), id.rank, id.nRanks,
             abort ? "Abort" : "Destroy");
  delete static_cast<ncclComm*>(&comm);
}

/// ncclCommInitRank, ncclCommInitRankConfig and (with several ids) ncclCommInitRankScalable.
ncclResult_t initRank(ncclComm_t* out, int nranks, const std::vector<ncclUniqueId>& ids, int rank,
                      const ncclConfig_t* config) {
  api::requireNonNull(out, "comm");
  *out = nullptr;
  comm::checkInitArguments(nranks, rank);
  const comm::InitSettings settings = comm::InitSettings::fromParams();
  const CommConfig cfg = readConfig(config, nullptr, settings.defaultBlocking);
  for (size_t i = 0; i < ids.size(); ++i) {
    try {
      bootstrap::UniqueId::decode(ids[i]);  // a bad id fails here, before anything starts
    } catch (const Error& e) {
      if (ids.size() == 1) throw;
      fail(e.code(), "commIds[%zu]: %s", i, e.what());
    }
  }
  std::unique_ptr<ncclComm> c = comm::newCommunicator(rank, nranks, cfg, comm::deviceOfNewRank(settings, -1));
  ncclComm* raw = c.get();
  const ncclResult_t r = api::dispatch(*raw, [raw, ids, settings] { comm::initRank(*raw, ids, settings); });
  *out = c.release();
  return r;
}

}  // namespace

BRAID_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId* uniqueId);
ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId) {
  return api::guarded("ncclGetUniqueId", nullptr, [&] {
    api::requireNonNull(uniqueId, "uniqueId");
    *uniqueId = comm::makeUniqueId(comm::InitSettings::fromParams());
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
          ncclConfig_t* config);
ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                     ncclConfig_t* config) {
  return api::guarded("ncclCommInitRankConfig", nullptr, [&] { return initRank(comm, nranks, {commId}, rank, config); });
}

BRAID_API(ncclResult_t, ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return api::guarded("ncclCommInitRank", nullptr, [&] { return initRank(comm, nranks, {commId}, rank, nullptr); });
}

BRAID_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t* newcomm, int nranks, int myrank, int nId,
          ncclUniqueId* commIds, ncclConfig_t* config);
ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                                       ncclConfig_t* config) {
  return api::guarded("ncclCommInitRankScalable", nullptr, [&] {
    api::requireNonNull(commIds, "commIds");
    if (nId < 1 || nId > nranks) {
      fail(ncclInvalidArgument, "nId is %d; it must be between 1 and nranks = %d", nId, nranks);
    }
    // Each id's root serves nranks / nId of the ranks (NCCL's split); root 0 gathers the others.
    return initRank(newcomm, nranks, std::vector<ncclUniqueId>(commIds, commIds + nId), myrank, config);
  });
}

BRAID_API(ncclResult_t, ncclCommInitAll, ncclComm_t* comm, int ndev, const int* devlist);
ncclResult_t pncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  return api::guarded("ncclCommInitAll", nullptr, [&] {
    api::requireNonNull(comms, "comm");
    if (ndev < 1) fail(ncclInvalidArgument, "ndev is %d; it must be at least 1", ndev);
    for (int i = 0; devlist != nullptr && i < ndev; ++i) {
      if (devlist[i] < 0) fail(ncclInvalidArgument, "devlist[%d] is %d; device numbers are >= 0", i, devlist[i]);
    }
    const comm::InitSettings settings = comm::InitSettings::fromParams();
    const ncclUniqueId id = comm::makeUniqueId(settings);
    CommConfig cfg = readConfig(nullptr, nullptr, true);
    std::vector<std::unique_ptr<ncclComm>> created;
    for (int i = 0; i < ndev; ++i) {
      created.push_back(comm::newCommunicator(i, ndev, cfg, comm::deviceOfNewRank(settings, devlist ? devlist[i] : i)));
    }
    // All ranks live in this thread's process: run their inits side by side.
    for (auto& c : created) {
      ncclComm* raw = c.get();
      raw->run([raw, id, settings] { comm::initRank(*raw, id, settings); }, /*background=*/true);
    }
    for (auto& c : created) c->waitForJob();
    for (auto& c : created) {
      if (c->asyncError() != ncclSuccess) {
        for (auto& other : created) other->requestAbort();
        fail(c->asyncError(), "rank %d: %s", c->identity().rank, c->lastError().c_str());
      }
    }
    for (int i = 0; i < ndev; ++i) comms[i] = created[i].release();
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm);
ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  return api::guarded("ncclCommFinalize", comm, [&] {
    Communicator& c = communicatorFrom(comm);
    if (c.revoked()) fail(ncclInvalidUsage, "ncclCommFinalize after ncclCommRevoke is not allowed");
    if (c.finalized()) fail(ncclInvalidUsage, "the communicator is already finalized");
    c.waitForJob();
    c.markFinalized();
    // Host operations are complete when their call returns; a GPU's run until the stream gets
    // to them: finalize waits for them (in the background for a nonblocking communicator).
    Communicator* raw = &c;
    return c.run([raw] { if (raw->hasBootstrap()) raw->dataPath().synchronize(); }, /*background=*/false);
  });
}

BRAID_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm);
ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  return api::guarded("ncclCommDestroy", nullptr, [&] {
    if (comm == nullptr) return ncclSuccess;  // as NCCL: destroying NULL is a no-op
    release(comm, /*abort=*/false);
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclCommAbort, ncclComm_t comm);
ncclResult_t pncclCommAbort(ncclComm_t comm) {
  return api::guarded("ncclCommAbort", nullptr, [&] {
    if (comm == nullptr) return ncclSuccess;  // as NCCL: aborting NULL is a no-op
    release(comm, /*abort=*/true);
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags);
ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  return api::guarded("ncclCommRevoke", comm, [&] {
    Communicator& c = communicatorFrom(comm);
    if (revokeFlags != NCCL_REVOKE_DEFAULT) {
      fail(ncclInvalidArgument, "revokeFlags is %d; it must be NCCL_REVOKE_DEFAULT (0)", revokeFlags);
    }
    // Nothing can be in flight yet, so the communicator is quiescent as soon as it is marked.
    c.markRevoked();
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
          ncclConfig_t* config);
ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  return api::guarded("ncclCommSplit", comm, [&] {
    Communicator& parent = communicatorFrom(comm);
    api::requireNonNull(newcomm, "newcomm");
    *newcomm = nullptr;
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
      fail(ncclInvalidArgument, "color is %d; it must be >= 0 or NCCL_SPLIT_NOCOLOR", color);
    }
    if (parent.revoked()) fail(ncclInvalidUsage, "the communicator was revoked; split is not allowed");
    const comm::InitSettings settings = comm::InitSettings::fromParams();
    const CommConfig cfg = readConfig(config, &parent.config(), settings.defaultBlocking);
    const uint32_t sequence = parent.nextSplitSequence();
    if (color == NCCL_SPLIT_NOCOLOR) {
      // Still a collective over the parent: take part in the exchange, get no communicator.
      return api::dispatch(parent, [&parent, key, sequence, settings] {
        comm::splitRank(parent, NCCL_SPLIT_NOCOLOR, key, sequence, nullptr, settings);
      });
    }
    std::unique_ptr<ncclComm> child = comm::newCommunicator(0, 1, cfg, parent.identity().cudaDevice);
    ncclComm* raw = child.get();
    const ncclResult_t r = api::dispatch(*raw, [&parent, raw, color, key, sequence, settings] {
      comm::splitRank(parent, color, key, sequence, raw, settings);
    });
    *newcomm = child.release();
    return r;
  });
}

BRAID_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
          ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags);
ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                             ncclConfig_t* config, int shrinkFlags) {
  return api::guarded("ncclCommShrink", comm, [&] {
    Communicator& parent = communicatorFrom(comm);
    api::requireNonNull(newcomm, "newcomm");
    *newcomm = nullptr;
    const int n = parent.identity().nRanks;
    if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT) {
      fail(ncclInvalidArgument, "shrinkFlags is %d; expected NCCL_SHRINK_DEFAULT or NCCL_SHRINK_ABORT", shrinkFlags);
    }
    if (excludeRanksCount < 0 || excludeRanksCount >= n) {
      fail(ncclInvalidArgument, "excludeRanksCount is %d; it must be between 0 and nranks-1 = %d",
           excludeRanksCount, n - 1);
    }
    if (excludeRanksCount > 0) api::requireNonNull(excludeRanksList, "excludeRanksList");
    std::vector<int> excluded(excludeRanksList, excludeRanksList + excludeRanksCount);
    for (int i = 0; i < excludeRanksCount; ++i) {
      if (excluded[i] < 0 || excluded[i] >= n) {
        fail(ncclInvalidArgument, "excludeRanksList[%d] is %d; ranks are 0..%d", i, excluded[i], n - 1);
      }
      if (std::count(excluded.begin(), excluded.end(), excluded[i]) > 1) {
        fail(ncclInvalidArgument, "excludeRanksList names rank %d twice", excluded[i]);
      }
      if (excluded[i] == parent.identity().rank) {
        fail(ncclInvalidUsage, "rank %d is in excludeRanksList; excluded ranks must not call ncclCommShrink",
             excluded[i]);
      }
    }
    if (shrinkFlags == NCCL_SHRINK_ABORT) parent.markRevoked();  // stop what the parent still runs
    const comm::InitSettings settings = comm::InitSettings::fromParams();
    const CommConfig cfg = readConfig(config, &parent.config(), settings.defaultBlocking);
    const uint32_t sequence = parent.nextSplitSequence();
    std::unique_ptr<ncclComm> child = comm::newCommunicator(0, 1, cfg, parent.identity().cudaDevice);
    ncclComm* raw = child.get();
    const ncclResult_t r = api::dispatch(*raw, [&parent, raw, excluded, sequence, settings] {
      comm::shrinkRank(parent, excluded, sequence, *raw, settings);
    });
    *newcomm = child.release();
    return r;
  });
}

namespace {

/// A communicator that grow may start from: its init done and healthy.
void requireReady(const Communicator& c) {
  if (c.asyncError() != ncclSuccess) {
    fail(ncclInvalidUsage, "comm is not ready: its state is %s (%s); a grow starts from a communicator whose init "
         "completed and that has not failed", ncclGetErrorString(c.asyncError()),
         c.asyncError() == ncclInProgress ? "init still running" : c.lastError().c_str());
  }
  if (c.revoked()) fail(ncclInvalidUsage, "comm was revoked (ncclCommRevoke); it cannot grow");
  if (c.finalized()) fail(ncclInvalidUsage, "comm was finalized (ncclCommFinalize); it cannot grow");
}

}  // namespace

BRAID_API(ncclResult_t, ncclCommGetUniqueId, ncclComm_t comm, ncclUniqueId* uniqueId);
ncclResult_t pncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId) {
  return api::guarded("ncclCommGetUniqueId", comm, [&] {
    Communicator& c = communicatorFrom(comm);
    api::requireNonNull(uniqueId, "uniqueId");
    requireReady(c);
    *uniqueId = comm::offerGrowId(c, comm::InitSettings::fromParams());
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclCommGrow, ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
          ncclComm_t* newcomm, ncclConfig_t* config);
ncclResult_t pncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank, ncclComm_t* newcomm,
                           ncclConfig_t* config) {
  return api::guarded("ncclCommGrow", comm, [&] {
    api::requireNonNull(newcomm, "newcomm");
    *newcomm = nullptr;
    const comm::InitSettings settings = comm::InitSettings::fromParams();
    if (comm == nullptr) {  // a new rank
      if (uniqueId == nullptr) {
        fail(ncclInvalidArgument, "comm and uniqueId are both NULL: a new rank passes the grow id, an existing rank "
             "its communicator");
      }
      comm::checkNewRankOfGrow(*uniqueId, nRanks, rank);
      const CommConfig cfg = readConfig(config, nullptr, settings.defaultBlocking);
      std::unique_ptr<ncclComm> child = comm::newCommunicator(rank, nRanks, cfg, comm::deviceOfNewRank(settings, -1));
      ncclComm* raw = child.get();
      const ncclUniqueId id = *uniqueId;
      const ncclResult_t r = api::dispatch(*raw, [raw, id, settings] { comm::growNewRank(*raw, id, settings); });
      *newcomm = child.release();
      return r;
    }
    Communicator& parent = communicatorFrom(comm);
    requireReady(parent);
    // nRanks, rank and the id are judged with the other existing ranks' (all fail alike).
    comm::GrowRequest request;
    request.nRanks = nRanks;
    request.rankArgument = rank;
    request.id = uniqueId;
    const CommConfig cfg = readConfig(config, &parent.config(), settings.defaultBlocking);
    const uint32_t sequence = parent.nextSplitSequence();
    std::unique_ptr<ncclComm> child = comm::newCommunicator(0, 1, cfg, parent.identity().cudaDevice);
    ncclComm* raw = child.get();
    const ncclResult_t r = api::dispatch(*raw, [&parent, raw, request, sequence, settings, id = uniqueId ? *uniqueId
                                                                                         : ncclUniqueId{}]() mutable {
      if (request.id != nullptr) request.id = &id;  // (the caller's id may be gone by then)
      comm::growExistingRank(parent, request, sequence, *raw, settings);
    });
    *newcomm = child.release();
    return r;
  });
}

BRAID_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* asyncError);
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  return api::guarded("ncclCommGetAsyncError", comm, [&] {
    Communicator& c = communicatorFrom(comm);
    api::requireNonNull(asyncError, "asyncError");
    *asyncError = codeForCaller(c.asyncError());
    // A failure the watchdog found (with a GPU, while kernels ran after their calls returned):
    // its reason becomes ncclGetLastError(comm)'s, once (a later error's text is not overwritten).
    ncclResult_t code = ncclSuccess;
    std::string text;
    if (*asyncError != ncclSuccess && *asyncError != ncclInProgress && c.hasBootstrap() &&
        c.dataPath().takeFailure(&code, &text)) {
      c.setLastError(text);
    }
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
