// One-sided operations between hosts (ncclPutSignal, ncclSignal to a rank another host runs):
// a TCP link from every rank to each peer it cannot address, whose receiving end the process's
// proxy thread drives.
//
// The origin writes each operation on its link to the target, on the calling thread (a put is
// complete at the origin when its bytes are in the socket, so the caller may reuse its buffer):
// a 64-byte frame header naming the operation, the context, the target's window by the id the
// target gave it at registration, the offset and the byte count, then the data. The target's
// proxy checks the header before a byte lands (an unknown window, an offset or size outside the
// window, a context the communicator does not have: the link is closed and a wait on that peer
// fails with the text, nothing written), reads the data straight into the window, and only then
// adds one to the signal counter of (ctx, origin) with release order: data before signal. One
// stream per ordered pair keeps every put and signal of an origin in call order, so
// NCCL_WIN_STRICT_ORDERING asks for nothing more.
//
// Peers never learn each other's addresses: a frame names a window id and an offset, which the
// target resolves in its own table.
//
// Links are made on first use. The first window registration that needs them (a collective
// call) only opens each rank's listener on its bootstrap interface and allgathers the
// invitations (address, nonce, the rank's maxP2pPeers). The origin connects to a target on its
// first put or signal to it, on the calling thread (bounded by the bootstrap timeout and the
// abort word), presents a Hello (nonce, communicator hash, both ranks, a tag) and waits for the
// target's verdict; the target's proxy thread accepts on its listener, reads the Hello without
// blocking (a connection that does not complete one within a few seconds, or that is pushed out
// by newer ones beyond a few pending, is dropped with a warning: a stranger cannot stall it),
// and adopts the link. A link is one direction: a pair that puts one way costs one socket.
//
// Bounded by maxP2pPeers (config.maxP2pPeers, NCCL_P2P_MAX_PEERS; NCCL takes the largest of
// the ranks' values, and so does this): a rank keeps at most that many outgoing links open,
// and to open one more it first closes its least recently used idle link with a pause frame
// (a goodbye that says "I may come back"): the target drains it, forgets it without counting
// its origin as lost, and answers the origin's next Hello only after that, so frames of the
// old and new link never overtake each other. In NCCL maxP2pPeers only sizes the channels of
// point-to-point work (it never fails an operation), so a target adopts every origin's link,
// beyond the bound too (an INFO line says so once): a fan-in holds one link per origin, at
// most nRanks - 1, and the job at most nRanks x bound, since each link holds one of its
// origin's slots.
//
// The link from a peer ends cleanly with a goodbye frame (its communicator was destroyed or
// aborted) or is lost (its process ended, the network broke); either way a wait on that peer
// that its counter has not satisfied fails with the reason instead of hanging. A wait on a
// peer that has no link open to this rank probes that peer's listener now and then: a refused
// connection means its communicator (or process) ended, which fails the wait the same way.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/socket.h"
#include "proxy/proxy.h"
#include "transport/net/net_end.h"
#include "transport/net/one_sided_window_table.h"

namespace braid::bootstrap {
class Bootstrap;
}

namespace braid::transport::onesided {

/// What the one-sided calls need of whatever carries their operations to peers they cannot
/// address (TCP links here; other transports implement the same): the API layer
/// (src/api/rma_api.cc, memory_api.cc) sees only this.
class Carrier {
 public:
  virtual ~Carrier() = default;
  /// Whether operations to `peer` go through this carrier.
  virtual bool linked(int peer) const = 0;
  /// A window of this rank that peers' puts may name by `id`; withdrawWindow ends that, and on
  /// return no byte lands in it any more (a put then arriving is dropped and reported).
  /// publishWindow is called by every rank of the communicator in the same order (window
  /// registration is collective), so a carrier may exchange what it publishes (the verbs
  /// carrier's keys). `settle` (may be empty) runs after each put into it has landed, before
  /// its signal counts; a carrier whose puts land without its knowing (RDMA) refuses one.
  virtual void publishWindow(uint64_t id, void* buffer, uint64_t size, Settle settle) = 0;
  virtual void withdrawWindow(uint64_t id) = 0;
  /// A put of `bytes` from `data` into `peer`'s window `window` at `offset`, then its signal
  /// (ctx); returns once the caller may reuse `data`. Throws ncclRemoteError when the path to
  /// the peer is broken, ncclInvalidUsage on abort.
  virtual void put(int peer, uint64_t window, uint64_t offset, const void* data, uint64_t bytes, int ctx) = 0;
  virtual void signal(int peer, int ctx) = 0;
  /// Whether the path from `peer` has ended (cheap); then lostReason says why.
  virtual bool lost(int peer) const = 0;
  virtual std::string lostReason(int peer) const = 0;
  /// Puts and signals that arrived, and frames refused (tests, logs).
  virtual uint64_t arrivals() const = 0;
};

/// Where a rank listens for its peers' links, as the registration's allgather carries it.
struct Invitation {
  net::SocketAddress::Packed listen;
  int32_t maxPeers;  ///< the rank's config.maxP2pPeers (0: all)
  uint64_t nonce;
};

class Links final : public Carrier, public proxy::Pump {
 public:
  /// `arrive(from, ctx)` adds one to this rank's counter of (ctx, from) with release order (the
  /// signal board's); the proxy thread calls it after a put's data has landed.
  Links(int rank, int nRanks, int contexts, uint64_t commHash, const uint32_t* abortWord,
        std::function<void(int from, int ctx)> arrive);
  ~Links() override;
  Links(const Links&) = delete;
  Links& operator=(const Links&) = delete;

  /// Collective over the bootstrap channel (every rank calls it with the same `linked`, by
  /// rank): listens on `listenAt` (any port) and allgathers the invitations; connects nothing.
  /// `maxPeers` is this rank's config.maxP2pPeers (0: all). `timeout` bounds each later connect.
  void open(bootstrap::Bootstrap& channel, const std::vector<bool>& linked, net::SocketAddress listenAt,
            int maxPeers, std::chrono::seconds timeout);
  /// open's second half, without the allgather (tests give forged invitations): adopts the
  /// listener (whose address and nonce are invitations[rank]) and attaches the proxy pump.
  void start(net::Socket listener, const std::vector<Invitation>& invitations, const std::vector<bool>& linked,
             std::chrono::seconds timeout);
  /// Where this rank's listener is (tests).
  net::SocketAddress listenAddress() const { return listener_.localAddress(); }
  /// The bound on open links each way (maxP2pPeers: the largest of the ranks'; else nRanks - 1).
  int bound() const { return bound_; }
  /// Outgoing links open now, and incoming ones (tests, logs).
  int outgoingOpen() const;
  int incomingOpen() const { return incomingOpen_.load(std::memory_order_acquire); }

  // Carrier. A put is written on the calling thread and returns once the data is in the socket;
  // the first one to a peer connects to it.
  bool linked(int peer) const override { return peer >= 0 && peer < nRanks_ && out_[peer] != nullptr; }
  void publishWindow(uint64_t id, void* buffer, uint64_t size, Settle settle) override;
  void withdrawWindow(uint64_t id) override;
  void put(int peer, uint64_t window, uint64_t offset, const void* data, uint64_t bytes, int ctx) override;
  void signal(int peer, int ctx) override;
  bool lost(int peer) const override;
  std::string lostReason(int peer) const override;
  uint64_t arrivals() const override { return arrivals_.load(std::memory_order_relaxed); }

  // proxy::Pump (the proxy thread): accepts on the listener, reads every incoming link.
  void pollSet(std::vector<pollfd>* fds) override;
  bool progress(const pollfd* polled) override;
  void orphan() override;
  void broke(const std::string& why) override;
  /// Only a Hello's deadline needs passes without a ready socket (waits probe peers on their
  /// own threads): an idle proxy otherwise sleeps until a socket wakes it.
  bool needsPolling() const override { return !pending_.empty(); }

 private:
  /// One incoming link: its socket and the frame being read.
  struct Incoming {
    net::Socket socket;
    FrameHeader header{};
    size_t headerDone = 0;
    uint64_t payloadDone = 0;
    bool inPayload = false;
    bool byeReceived = false;
    bool pausing = false;  ///< the goodbye said the origin may come back (it closed an idle link)
    bool closed = false;
  };
  /// A connection to the listener whose Hello is being read (or, once read, whose origin's
  /// previous link is still draining).
  struct Pending {
    net::Socket socket;
    netend::Hello hello{};
    size_t done = 0;
    net::Clock::time_point since;
  };
  struct Outgoing {
    std::mutex mutex;  // one writer at a time: frames never interleave; held while connecting
    net::Socket socket;
    std::atomic<uint64_t> lastUse{0};
    bool open = false;  ///< a link is open (slotsMutex_ guards it: makeRoom reads it)
  };

  /// Caller holds out.mutex: connects to `peer` when no link is open (after making room).
  void ensureOpen(int peer, Outgoing& out);
  /// Caller holds out_[peer]'s mutex and has no link to it: takes a slot among the bound,
  /// closing the least recently used idle link when none is free.
  void makeRoom(int peer, net::Clock::time_point deadline);
  /// Writes frame h, then its h.bytes of payload, to `peer`'s link, as one frame.
  void write(int peer, const FrameHeader& h, const void* payload);
  /// Writes `size` bytes of `data` to `peer`'s link (its mutex held).
  void send(int peer, Outgoing& out, const void* data, uint64_t size);
  /// Proxy thread: takes new connections, reads pending Hellos, adopts or refuses them.
  bool serveListener(bool readable);
  /// Proxy thread: whether pending connection p is done with (dropped, adopted or refused).
  bool readHello(Pending& p);
  /// Proxy thread: a pending connection's Hello is complete: true when it was settled (adopted,
  /// refused or dropped), false while its origin's previous link still drains.
  bool settle(Pending& p);
  /// Proxy thread: reads what link `from` has; true when anything moved.
  bool readLink(int from, Incoming& in);
  /// Proxy thread: a complete header arrived; false after ending the link.
  bool acceptHeader(int from, Incoming& in);
  /// Proxy thread: reads payload bytes into the window (or discards them when it went away).
  /// -1: the link closed; else bytes read.
  ssize_t readPayload(int from, Incoming& in);
  /// Proxy thread: ends link `from` with `why` (read by waits on it).
  void endLink(int from, Incoming& in, const std::string& why, bool warn);
  /// Marks `peer` lost with `why`.
  void markLost(int peer, const std::string& why) const;
  /// A wait's thread: whether `peer`'s listener still answers (refused: its communicator ended).
  void probe(int peer) const;

  const int rank_, nRanks_, contexts_;
  const uint64_t commHash_;
  const uint32_t* abortWord_;
  std::function<void(int, int)> arrive_;
  std::chrono::seconds timeout_{30};
  int bound_ = 0;
  std::vector<Invitation> invitations_;
  std::vector<bool> linked_;
  net::Socket listener_;
  std::vector<std::unique_ptr<Outgoing>> out_;  // by rank: null unless linked
  mutable std::mutex slotsMutex_;               // the count of open outgoing links
  int outgoingOpen_ = 0;
  std::atomic<uint64_t> useClock_{0};
  // The proxy thread's (once attached):
  std::vector<std::unique_ptr<Incoming>> in_;  // by rank: null while no link from it is open
  std::vector<Pending> pending_;
  std::atomic<int> incomingOpen_{0};  // (written by the proxy thread only)
  std::vector<int> polledAt_;  // by rank: its entry among this pump's of the pass, or -1
  int listenerPolledAt_ = -1;
  std::vector<int> pendingPolledAt_;
  bool attached_ = false;
  bool orphaned_ = false;
  bool toldBeyondBound_ = false;  // the INFO line on a fan-in beyond the bound was written
  std::unique_ptr<std::atomic<bool>[]> linkOpen_;  // by rank: a link from it is open now
  mutable LostPeers lost_;  // (a const wait's probe marks it)
  mutable std::mutex probeMutex_;
  mutable std::vector<net::Clock::time_point> probedAt_;  // by rank
  WindowTable windows_;
  std::vector<char> discard_;  // payload of a window that went away
  std::atomic<uint64_t> arrivals_{0};
};

}  // namespace braid::transport::onesided
