// One-sided operations on windows (NCCL 2.29): ncclPutSignal, ncclSignal, ncclWaitSignal.
//
// On the CUDA backend all three are enqueued on the call's stream after the rank's earlier work
// and the host returns at once (kernels/one_sided.h): a put is a device copy into the peer's
// window (the address of a rank of this process, or the peer process's ncclMemAlloc memory
// mapped at ncclCommWindowRegister) followed by the signal's release-add to the peer's
// counter; a wait makes the stream wait for the counts it needs, which are known when it is
// enqueued (counting is cumulative), until they arrive or the communicator is aborted. Peers on
// other hosts (and every peer with BRAID_ONE_SIDED_NET) go through the carrier's stream relay
// (datapath/one_sided_relay.h): the source is staged on the stream, a host function hands it to
// the relay's sender thread, and the target copies the landed bytes into its device window
// before counting the signal, so the same wait kernel serves them.
//
// On the host backend every call completes before it returns (the stream is not used), except
// on a nonblocking communicator, where it returns ncclInProgress and completes on the
// communicator's job thread (NCCL's implicit group); inside a group it runs at ncclGroupEnd,
// after the communicator's collectives and sends/receives of the group, in call order
// (group::enqueueAfter). A wait polls this rank's counters
// (comm/signals.h). What reaches a peer:
// - ranks that are threads of one process and the other processes of the host (window memory
//   from ncclMemAlloc and the counters are memory files each rank maps at
//   ncclCommWindowRegister): a put is one copy into the peer's window and a release-increment
//   of the peer's counter for (ctx, this rank);
// - ranks on other hosts (and every peer with BRAID_ONE_SIDED_NET=1): the put goes through the
//   communicator's carrier to the peer, whose proxy thread lands the data and then increments
//   the counter: TCP links (transport/net/one_sided_links.h), or the net plugin when one carries
//   every rank's network (transport/net/plugin/one_sided_plugin.h).
// Either way puts from one rank land in the order they were called, whatever the window's
// flags: NCCL_WIN_STRICT_ORDERING asks for nothing more.
#include <cstring>
#include <functional>
#include <vector>

#include "api/api.h"
#include "runtime/device.h"
#include "comm/registrations.h"
#include "group/group.h"
#include "plan/task.h"
#include "datapath/data_path.h"
#include "datapath/one_sided_relay.h"
#include "transport/net/one_sided_links.h"

using namespace braid;

namespace {

Communicator& readyForOneSided(ncclComm_t comm, const char* call) {
  Communicator& c = communicatorFrom(comm);
  if (!c.hasBootstrap()) fail(ncclInvalidUsage, "the communicator has not completed init");
  if (c.asyncError() == ncclInProgress) {  // (a nonblocking communicator's earlier call still runs)
    fail(ncclInvalidUsage, "an earlier nonblocking call on this communicator is still in progress; wait until "
                           "ncclCommGetAsyncError no longer reports ncclInProgress");
  }
  if (c.revoked()) fail(ncclInvalidUsage, "the communicator was revoked");
  c.refuseIfSuspended(call);
  return c;
}

void checkPeer(const Communicator& c, int peer, const char* argument) {
  const int n = c.identity().nRanks;
  if (peer < 0 || peer >= n) fail(ncclInvalidArgument, "%s is %d; ranks are 0..%d", argument, peer, n - 1);
}

void checkSignal(const Communicator& c, int sigIdx, int ctx) {
  if (sigIdx != 0)
    fail(ncclInvalidArgument, "sigIdx is %d; there is one signal per peer, 0 (as in NCCL 2.30)", sigIdx);
  const int contexts = c.config().numRmaCtx;
  if (ctx < 0 || ctx >= contexts) {
    fail(ncclInvalidArgument,
         "ctx is %d; the communicator has %d contexts (config.numRmaCtx, NCCL_NUM_RMA_CTX)", ctx, contexts);
  }
}

/// The link that carries one-sided operations to `peer` (another host), or null when this rank
/// addresses the peer's memory.
transport::onesided::Carrier* linkTo(Communicator& c, int peer) {
  transport::onesided::Carrier* links = c.oneSidedLinks();
  return links != nullptr && links->linked(peer) ? links : nullptr;
}

void checkFlags(unsigned int flags) {
  if (flags != 0) fail(ncclInvalidArgument, "flags is %#x; no flags are defined, it must be 0", flags);
}

/// The communicator's counters, once a window made them; and what limits the calls here.
/// (Texts start after the call's name, which api::guarded puts first.)
comm::SignalBoard& boardFor(Communicator& c, int peer) {
  comm::SignalBoard* board = c.signalsIfMade();
  if (board == nullptr) {
    fail(ncclInvalidUsage,
         "no window was registered on this communicator; signals are counted in memory the "
         "ranks exchange at ncclCommWindowRegister, so register a window first");
  }
  const int me = c.identity().rank;
  if (peer != me && !board->reaches(peer) && linkTo(c, peer) == nullptr) {
    fail(ncclInvalidUsage,
         "rank %d's signal counters are out of this rank's reach (mapping them failed at "
         "ncclCommWindowRegister: see its warning)",
         peer);
  }
  return *board;
}

/// The CUDA backend's carrier to `peer` (another host, or BRAID_ONE_SIDED_NET): linkPeers
/// (memory_api.cc) wraps every carrier it makes there in a relay.
datapath::OneSidedRelay& relayOf(transport::onesided::Carrier* link) {
  auto* relay = dynamic_cast<datapath::OneSidedRelay*>(link);
  if (relay == nullptr) fail(ncclInternalError, "a one-sided carrier on the CUDA backend without its stream relay");
  return *relay;
}

/// The CUDA backend's address of `rank`'s counter of (ctx, source): its board pinned for the
/// device (Device::reachHost, once).
uint64_t* deviceCounter(runtime::Device& device, const comm::SignalBoard& board, int rank, int ctx, int source) {
  void* words = device.reachHost(board.wordsOf(rank), board.bytes());
  return static_cast<uint64_t*>(words) + board.indexOf(ctx, source);
}

/// Runs a checked call's work now, or, inside a group, at its end after the communicator's
/// other operations (group::enqueueAfter), as the group's collectives wait for its end. On a
/// nonblocking communicator a lone call is a group of its own, as in NCCL (ncclEnqueueCheck):
/// its work runs on the communicator's job thread and the call returns ncclInProgress;
/// ncclCommGetAsyncError then says when it ended, and how.
ncclResult_t runOrDefer(Communicator& c, const char* call, std::function<void()> work) {
  if (group::active()) {
    group::enqueueAfter(&c, call, std::move(work));
    return ncclSuccess;
  }
  if (!c.config().blocking) {
    group::start(/*implicit=*/true);
    group::enqueueAfter(&c, call, std::move(work));
    return group::end();
  }
  work();
  return ncclSuccess;
}

}  // namespace

BRAID_API(ncclResult_t, ncclPutSignal, const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
          ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags,
          ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclPutSignal(const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
                            ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx,
                            unsigned int flags, ncclComm_t comm, cudaStream_t stream) {
  return api::guarded("ncclPutSignal", comm, [&]() -> ncclResult_t {
    Communicator& c = readyForOneSided(comm, "ncclPutSignal");
    if (count > 0) api::requireNonNull(localbuff, "localbuff");
    const int type = rawCode(datatype);
    if (type < 0 || type >= ncclNumTypes) {
      fail(ncclInvalidArgument, "datatype is %d; valid types are 0..%d", type, ncclNumTypes - 1);
    }
    checkPeer(c, peer, "peer");
    api::requireNonNull(peerWin, "peerWin");
    checkSignal(c, sigIdx, ctx);
    checkFlags(flags);
    const WindowEntry window = c.windows().find(peerWin);
    const size_t size = plan::typeSize(datatype);
    if (count > SIZE_MAX / size) fail(ncclInvalidArgument, "count %zu is too large", count);
    const size_t bytes = count * size;
    if (peerWinOffset > window.size || bytes > window.size - peerWinOffset) {
      fail(ncclInvalidArgument,
           "the put of %zu bytes (count %zu) at peerWinOffset %zu does not fit the window of %zu "
           "bytes",
           bytes, count, peerWinOffset, window.size);
    }
    comm::SignalBoard& board = boardFor(c, peer);
    if (transport::onesided::Carrier* link = linkTo(c, peer)) {
      const uint64_t id = window.peerIds[peer];
      if (c.dataPath().onDevice()) {  // (stream-ordered: staged on the stream, sent by the relay's thread)
        if (bytes > 0) c.dataPath().checkBuffer(localbuff, "localbuff", "ncclPutSignal");
        c.dataPath().oneSidedDevice(stream, "ncclPutSignal");
        datapath::OneSidedRelay& relay = relayOf(link);
        return runOrDefer(c, "ncclPutSignal", [&relay, peer, id, peerWinOffset, localbuff, bytes, ctx, stream] {
          relay.putOnStream(peer, id, peerWinOffset, localbuff, bytes, ctx, stream, "ncclPutSignal");
        });
      }
      return runOrDefer(c, "ncclPutSignal", [link, peer, id, peerWinOffset, localbuff, bytes, ctx] {
        link->put(peer, id, peerWinOffset, localbuff, bytes, ctx);
      });
    }
    if (window.peerBuffers[peer] == nullptr && window.peerReach[peer] == WindowReach::kNotShareable) {
      fail(ncclInvalidUsage,
           "rank %d's part of window %p is memory Braid cannot share with this process "
           "(not from ncclMemAlloc); register window memory from ncclMemAlloc, which other processes "
           "of the host can map",
           peer, static_cast<void*>(peerWin));
    }
    if (window.peerBuffers[peer] == nullptr) {
      fail(ncclInvalidUsage,
           "rank %d's part of window %p is not mapped here (its mapping failed at registration: see "
           "its warning)",
           peer, static_cast<void*>(peerWin));
    }
    char* target = static_cast<char*>(window.peerBuffers[peer]) + peerWinOffset;
    if (c.dataPath().onDevice()) {
      if (bytes > 0) c.dataPath().checkBuffer(localbuff, "localbuff", "ncclPutSignal");
      runtime::Device& device = c.dataPath().oneSidedDevice(stream, "ncclPutSignal");
      uint64_t* counter = deviceCounter(device, board, peer, ctx, c.identity().rank);
      return runOrDefer(c, "ncclPutSignal", [window, &device, target, localbuff, bytes, counter, stream] {
        device.putSignal(target, localbuff, bytes, counter, stream, "ncclPutSignal");
      });
    }
    // (the entry's copy keeps the peer's mapping until the work has run)
    return runOrDefer(c, "ncclPutSignal", [window, target, localbuff, bytes, &board, peer, ctx] {
      if (bytes > 0) std::memmove(target, localbuff, bytes);  // (a put to itself may overlap its source)
      board.bump(peer, ctx);
    });
  });
}

BRAID_API(ncclResult_t, ncclSignal, int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
          cudaStream_t stream);
ncclResult_t pncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream) {
  return api::guarded("ncclSignal", comm, [&]() -> ncclResult_t {
    Communicator& c = readyForOneSided(comm, "ncclSignal");
    checkPeer(c, peer, "peer");
    checkSignal(c, sigIdx, ctx);
    checkFlags(flags);
    comm::SignalBoard& board = boardFor(c, peer);
    if (transport::onesided::Carrier* link = linkTo(c, peer)) {
      if (c.dataPath().onDevice()) {
        c.dataPath().oneSidedDevice(stream, "ncclSignal");
        datapath::OneSidedRelay& relay = relayOf(link);
        return runOrDefer(c, "ncclSignal", [&relay, peer, ctx, stream] { relay.signalOnStream(peer, ctx, stream, "ncclSignal"); });
      }
      return runOrDefer(c, "ncclSignal", [link, peer, ctx] { link->signal(peer, ctx); });
    }
    if (c.dataPath().onDevice()) {
      runtime::Device& device = c.dataPath().oneSidedDevice(stream, "ncclSignal");
      uint64_t* counter = deviceCounter(device, board, peer, ctx, c.identity().rank);
      return runOrDefer(c, "ncclSignal", [&device, counter, stream] {
        device.putSignal(nullptr, nullptr, 0, counter, stream, "ncclSignal");
      });
    }
    return runOrDefer(c, "ncclSignal", [&board, peer, ctx] { board.bump(peer, ctx); });
  });
}

BRAID_API(ncclResult_t, ncclWaitSignal, int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm,
          cudaStream_t stream);
ncclResult_t pncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm, cudaStream_t stream) {
  return api::guarded("ncclWaitSignal", comm, [&]() -> ncclResult_t {
    Communicator& c = readyForOneSided(comm, "ncclWaitSignal");
    if (nDesc < 0) fail(ncclInvalidArgument, "nDesc is %d; it must be >= 0", nDesc);
    if (nDesc > 0) api::requireNonNull(signalDescs, "signalDescs");
    for (int i = 0; i < nDesc; ++i) {  // (every descriptor is checked before any is consumed)
      const ncclWaitSignalDesc_t& d = signalDescs[i];
      if (d.opCnt <= 0) fail(ncclInvalidArgument, "signalDescs[%d].opCnt is %d; it must be > 0", i, d.opCnt);
      const int n = c.identity().nRanks;
      if (d.peer < 0 || d.peer >= n) {
        fail(ncclInvalidArgument, "signalDescs[%d].peer is %d; ranks are 0..%d", i, d.peer, n - 1);
      }
      checkSignal(c, d.sigIdx, d.ctx);
      boardFor(c, d.peer);
    }
    Communicator* raw = &c;
    if (c.dataPath().onDevice()) {
      runtime::Device& device = c.dataPath().oneSidedDevice(stream, "ncclWaitSignal");
      return runOrDefer(c, "ncclWaitSignal", [raw, &device, stream,
                                               descs = std::vector<ncclWaitSignalDesc_t>(signalDescs, signalDescs + nDesc)] {
        // The counts are taken now, in the order the waits are enqueued: the stream waits for
        // this many signals in all, as the host backend's wait would.
        comm::SignalBoard& board = *raw->signalsIfMade();
        const int me = raw->identity().rank;
        std::vector<kernels::SignalWait> waits;
        for (const ncclWaitSignalDesc_t& d : descs) {
          waits.push_back({deviceCounter(device, board, me, d.ctx, d.peer), board.expect(d.peer, d.ctx, d.opCnt)});
        }
        if (!waits.empty()) device.waitSignals(waits.data(), static_cast<int>(waits.size()), stream, "ncclWaitSignal");
      });
    }
    return runOrDefer(c, "ncclWaitSignal",
                      [raw, descs = std::vector<ncclWaitSignalDesc_t>(signalDescs, signalDescs + nDesc)] {
                        comm::SignalBoard& board = *raw->signalsIfMade();
                        for (const ncclWaitSignalDesc_t& d : descs) {
                          const uint64_t target = board.expect(d.peer, d.ctx, d.opCnt);
                          // A link that ended (the peer's process, or its communicator) ends the
                          // wait too; what arrived before it still counts.
                          transport::onesided::Carrier* link = linkTo(*raw, d.peer);
                          raw->dataPath().waitOneSided("ncclWaitSignal", d.peer, [&] {
                            return board.arrived(d.peer, d.ctx, target) || (link != nullptr && link->lost(d.peer));
                          });
                          if (!board.arrived(d.peer, d.ctx, target)) {
                            fail(ncclRemoteError, "waiting for %d signal(s) of rank %d on ctx %d (%llu of %llu arrived): %s",
                                 d.opCnt, d.peer, d.ctx,
                                 static_cast<unsigned long long>(board.arrivedCount(d.peer, d.ctx)),
                                 static_cast<unsigned long long>(target), link->lostReason(d.peer).c_str());
                          }
                        }
                      });
  });
}
