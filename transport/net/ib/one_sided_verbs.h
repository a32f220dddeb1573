// One-sided operations between hosts over verbs (RDMA), where the communicator's network
// transport is the verbs one: the carrier that src/api/memory_api.cc makes instead of the TCP
// links (transport/net/one_sided_links.h) when every rank's inter-host transport is verbs.
//
// It is one-sided where RDMA allows: the target's CPU never touches a put's data. At window
// registration (publishWindow, a collective step here) each rank registers its window memory
// with its NIC for remote writes and every rank learns every peer's (window id -> address,
// size, rkey) by a bootstrap allgather; the origin checks a record before keeping it (no
// address wrap, a bounded size). A put is one or more RDMA WRITEs of the data straight into
// the target's registered window, at the address the origin computes from the record only
// after checking offset + bytes against the published size (the NIC's bounds check of the
// region stops anything else), then a zero-length RDMA WRITE WITH IMMEDIATE whose 32-bit value
// carries the signal: the context (low 16 bits) and a per-pair sequence number (high 16). An
// RC queue pair places the writes in order, so the data is in the window when the target's
// receive completion for the immediate appears; the target's proxy thread, woken by the
// shared receive completion queue's completion channel (its descriptor is among the proxy's:
// no polling timer), reaps the queue, checks the context and the sequence, adds one to the
// signal counter (release order) and posts a fresh receive; once arrivals pause (64 passes
// without one) it arms the queue's one-shot notification again, so a busy proxy makes no
// event system calls and an idle one sleeps. A library without completion channels leaves
// the proxy polling the queue (within 1 ms when idle). ncclSignal is the immediate alone.
//
// Origin completion (the caller may reuse its buffer on return): a source inside one of this
// rank's registered windows is written from there (zero copy) and the put waits for its
// writes' completions; any other source is copied through a registered staging ring of
// kStagingSlots x kSlotBytes per peer, the copy of one slot overlapping the write of the
// previous, and the put returns once its last piece is copied and posted.
//
// Deregistration: withdrawWindow deregisters the window's memory region, so when it returns
// the NIC lands no byte there any more. An origin still writing into it gets a remote access
// error (the queue pair then breaks, as RC does): its put, or its next operation to that peer,
// fails with ncclRemoteError saying so.
//
// Liveness: next to the queue pairs the carrier keeps the TCP links of one_sided_links.h as
// control channel only (connect's Hello, the goodbye of a destroyed communicator, a closed
// socket when a process dies); no operation travels on them. The proxy thread marks a peer
// lost after reaping every completion that came before, so what a peer sent before it left
// still counts (a waiting thread that finds the peer's listener gone wakes it for that). A failed completion (a queue pair in error, retries exhausted) loses the peer
// too, with the device, port and status in the reason.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "core/socket.h"
#include "transport/net/ib/ib_transport.h"
#include "transport/net/one_sided_links.h"

namespace braid::bootstrap {
class Bootstrap;
}

namespace braid::transport::onesided {

/// What the verbs carrier is made from: the communicator's identity and verbs settings (the
/// FIFO connections' knobs: library, NCCL_IB_HCA, GID index, SL, TC, timeouts).
struct VerbsSetup {
  int rank = 0, nRanks = 0;
  int contexts = 1;  ///< config.numRmaCtx (at most 65536: the immediate carries 16 bits)
  uint64_t commHash = 0;
  const uint32_t* abortWord = nullptr;
  ib::Settings verbs;
  /// Adds one to this rank's counter of (ctx, from), release order (the signal board's).
  std::function<void(int from, int ctx)> arrive;
};

/// Collective over `channel`, as Links::connect (every rank with the same `linked`): opens the
/// device, makes a queue pair to every peer `linked` names, exchanges their endpoints, connects
/// them, and the control links. Throws naming the device and peer when it cannot. Its
/// publishWindow is collective too (every rank, in the same order: ncclCommWindowRegister's
/// collective step); withdrawWindow is not.
std::unique_ptr<Carrier> connectVerbs(const VerbsSetup& setup, bootstrap::Bootstrap& channel,
                                      const std::vector<bool>& linked, net::SocketAddress listenAt,
                                      std::chrono::seconds timeout);

/// Whether `carrier` is the verbs one (tests, logs).
bool overVerbs(const Carrier& carrier);

}  // namespace braid::transport::onesided
