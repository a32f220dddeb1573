// One-sided operations on windows (NCCL 2.29): ncclPutSignal, ncclSignal, ncclWaitSignal.
// Exported and argument-checked here; the data path arrives later (the calls say so).
#include "api/api.h"
#include "comm/registrations.h"

using namespace braid;

namespace {

constexpr const char* kRmaWork = "one-sided operations (put, signal, wait)";

void checkPeer(const Communicator& c, int peer, const char* argument) {
  const int n = c.identity().nRanks;
  if (peer < 0 || peer >= n) fail(ncclInvalidArgument, "%s is %d; ranks are 0..%d", argument, peer, n - 1);
}

void checkSignal(const Communicator& c, int sigIdx, int ctx) {
  if (sigIdx < 0) fail(ncclInvalidArgument, "sigIdx is %d; it must be >= 0", sigIdx);
  const int contexts = c.config().numRmaCtx;
  if (ctx < 0 || ctx >= contexts) {
    fail(ncclInvalidArgument, "ctx is %d; the communicator has %d contexts (config.numRmaCtx, NCCL_NUM_RMA_CTX)", ctx,
         contexts);
  }
}

void checkFlags(unsigned int flags) {
  if (flags != 0) fail(ncclInvalidArgument, "flags is %#x; no flags are defined, it must be 0", flags);
}

}  // namespace

BRAID_API(ncclResult_t, ncclPutSignal, const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
          ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
          cudaStream_t stream);
ncclResult_t pncclPutSignal(const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
                            ncclWindow_t peerWin, size_t, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                            cudaStream_t) {
  return api::guarded("ncclPutSignal", comm, [&]() -> ncclResult_t {
    const Communicator& c = communicatorFrom(comm);
    if (count > 0) api::requireNonNull(localbuff, "localbuff");
    const int type = rawCode(datatype);
    if (type < 0 || type >= ncclNumTypes) {
      fail(ncclInvalidArgument, "datatype is %d; valid types are 0..%d", type, ncclNumTypes - 1);
    }
    checkPeer(c, peer, "peer");
    api::requireNonNull(peerWin, "peerWin");
    checkSignal(c, sigIdx, ctx);
    checkFlags(flags);
    api::notImplemented(kRmaWork);
  });
}

BRAID_API(ncclResult_t, ncclSignal, int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
          cudaStream_t stream);
ncclResult_t pncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t) {
  return api::guarded("ncclSignal", comm, [&]() -> ncclResult_t {
    const Communicator& c = communicatorFrom(comm);
    checkPeer(c, peer, "peer");
    checkSignal(c, sigIdx, ctx);
    checkFlags(flags);
    api::notImplemented(kRmaWork);
  });
}

BRAID_API(ncclResult_t, ncclWaitSignal, int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm,
          cudaStream_t stream);
ncclResult_t pncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm, cudaStream_t) {
  return api::guarded("ncclWaitSignal", comm, [&]() -> ncclResult_t {
    const Communicator& c = communicatorFrom(comm);
    if (nDesc < 0) fail(ncclInvalidArgument, "nDesc is %d; it must be >= 0", nDesc);
    if (nDesc > 0) api::requireNonNull(signalDescs, "signalDescs");
    for (int i = 0; i < nDesc; ++i) {
      const ncclWaitSignalDesc_t& d = signalDescs[i];
      if (d.opCnt < 0) fail(ncclInvalidArgument, "signalDescs[%d].opCnt is %d; it must be >= 0", i, d.opCnt);
      const int n = c.identity().nRanks;
      if (d.peer < 0 || d.peer >= n) {
        fail(ncclInvalidArgument, "signalDescs[%d].peer is %d; ranks are 0..%d", i, d.peer, n - 1);
      }
      checkSignal(c, d.sigIdx, d.ctx);
    }
    api::notImplemented(kRmaWork);
  });
}
