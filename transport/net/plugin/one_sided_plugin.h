// One-sided operations between hosts through the communicator's net plugin (src/plugin/
// net_plugin.h), when the plugin carries its inter-host traffic: the same operations and the
// same guarantees as the TCP links (transport/net/one_sided_links.h; the frame header, window
// table and lost-peer record are one_sided_window_table.h's), over one plugin send comm and one
// receive comm per ordered pair of ranks that puts or signals that way.
//
// Made on first use, as the TCP links are. Window registration (collective) only listens: each
// rank listens once per linked peer, on the plugin device its send/recv connections to that
// peer use (Connector::oneSidedPluginDevice: the topology's NIC near the GPU, else spread by
// rank), and the handles are allgathered; it also opens a control listener (a Links, liveness
// only, as the verbs carrier's). An origin's first put or signal to a target connects the send
// comm, then knocks: a signal frame on a control link to the target, whose proxy then accepts
// the receive comm (accept after connect, as NCCL orders them, so a plugin whose accept blocks
// finds the connection pending). Bounce memory is made and registered with a comm when the comm
// is made: a rank holds 2 x kSlots x kChunkBytes (4 MiB) per peer it puts to or hears from, not
// per linked peer.
//
// The plugin is driven as NCCL drives it, and nothing more is assumed of it:
// - every isend, irecv and test, each accept of a receive comm and each comm's close, runs on
//   the proxy thread; listen, connect and the send comm's regMr run on the calling thread, each
//   call with the proxy held (proxy::hold), so that no setup call overlaps a data call;
// - a comm has at most plugin::kNetMaxRequests (8) requests posted; an isend or irecv that
//   answers no request is tried again on a later pass;
// - what test says of a receive's size is never read: every message's size is known to the
//   receiver before it posts the receive. An operation is a 64-byte header message (the
//   FrameHeader), then, for a put, its payload in messages of kChunkBytes (the last shorter);
//   the receiver posts the header's receive, checks the header with checkFrame once it is in,
//   and only then posts the receives of the payload the header announced, followed by the next
//   header's;
// - the plugin only ever sees this carrier's own registered bounce memory in host memory
//   (NCCL_PTR_HOST): kSlots slots of kChunkBytes per comm, one per request that may be posted;
// - no comm is closed with a request in flight: at the end each rank sends a goodbye frame on
//   each send comm, which completes the peer's posted header receive; a comm still holding
//   requests after kFinishWait is left open (with its memory) rather than closed under them.
//
// The origin copies a put's bytes into its send slots on the calling thread, waiting for slots
// the plugin has finished with, and returns once the last byte is copied: the caller may then
// reuse its buffer. The target's proxy receives a put's payload into its receive slots and
// copies each message into the window under the window table's lock (withdrawWindow waits for
// it); after the put's last byte has landed it adds one to the signal counter of (ctx, origin),
// so data comes before signal; one send comm per ordered pair keeps an origin's operations in
// call order. A header that checkFrame refuses (an unknown window, bytes outside it, a context
// the communicator does not have) ends the path from that peer: nothing is written, and a wait
// on the peer fails with the reason. A plugin call that fails ends the path likewise, naming
// the plugin, the call and the peer.
//
// A peer that vanishes is noticed without the plugin's help: its control link closes (or, with
// none open, its control listener refuses the probe of a wait or a put waiting for room), and
// then a wait on it fails with that reason, once the plugin path from it has had kFinishWait to
// deliver what the peer sent before it left; a put to it fails at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "proxy/proxy.h"
#include "transport/net/one_sided_links.h"

namespace braid::plugin {
class NetSession;
}

namespace braid::transport::onesided {

class PluginCarrier final : public Carrier, public proxy::Pump {
 public:
  /// Messages one comm may have posted at once: NCCL_NET_MAX_REQUESTS.
  static constexpr int kSlots = 8;
  /// The largest message: a put's payload travels in pieces of this size.
  static constexpr uint64_t kChunkBytes = 256 << 10;

  /// `arrive(from, ctx)`: as Links'. `session`: the communicator's net plugin; `devices`: by
  /// rank, the plugin device of the comms to and from that rank.
  PluginCarrier(int rank, int nRanks, int contexts, uint64_t commHash, const uint32_t* abortWord,
                std::shared_ptr<plugin::NetSession> session, std::vector<int> devices,
                std::function<void(int from, int ctx)> arrive);
  ~PluginCarrier() override;
  PluginCarrier(const PluginCarrier&) = delete;
  PluginCarrier& operator=(const PluginCarrier&) = delete;

  /// Collective over the bootstrap channel, as Links::open: listens for every rank `linked`
  /// names, allgathers the handles and opens the control listener on `listenAt`; connects
  /// nothing. `timeout` bounds each later connect.
  void open(bootstrap::Bootstrap& channel, const std::vector<bool>& linked, net::SocketAddress listenAt,
            std::chrono::seconds timeout);
  /// Bounce memory this rank holds (made with its comms, on first use; tests).
  uint64_t bounceBytes() const { return bounceBytes_.load(std::memory_order_relaxed); }
  /// The plugin device of the comms to and from `peer` (tests, logs).
  int device(int peer) const { return devices_[peer]; }

  // Carrier.
  bool linked(int peer) const override { return peer >= 0 && peer < nRanks_ && send_[peer] != nullptr; }
  void publishWindow(uint64_t id, void* buffer, uint64_t size, Settle settle) override;
  void withdrawWindow(uint64_t id) override;
  void put(int peer, uint64_t window, uint64_t offset, const void* data, uint64_t bytes, int ctx) override;
  void signal(int peer, int ctx) override;
  bool lost(int peer) const override;
  std::string lostReason(int peer) const override;
  uint64_t arrivals() const override { return arrivals_.load(std::memory_order_relaxed); }

  // proxy::Pump: the plugin has no descriptors to poll; each pass tests what is posted.
  void pollSet(std::vector<pollfd>*) override {}
  bool progress(const pollfd* polled) override;
  void orphan() override;
  void broke(const std::string& why) override;

  /// The wait at the end for goodbyes and closes (kAbortWait after an abort).
  static constexpr std::chrono::milliseconds kFinishWait{2000};
  static constexpr std::chrono::milliseconds kAbortWait{500};

 private:
  /// kSlots bounce slots of kChunkBytes in host memory, registered with one comm; made with it.
  struct Bounce {
    ~Bounce();
    /// Allocates the slots; throws when memory ran out.
    void allocate();
    char* slot(uint64_t message) const { return memory + message % kSlots * kChunkBytes; }
    char* memory = nullptr;
    void* mhandle = nullptr;
  };
  /// This rank's send comm to a peer. The caller's thread fills slots (filled), the proxy posts
  /// them (posted) and frees them in order once the plugin is done with them (freed).
  struct Sending {
    std::vector<char> handle;  // where the peer listens for this rank (connect may keep state there)
    std::atomic<bool> ready{false};  // comm and bounce made (written under mutex, read by the proxy)
    void* comm = nullptr;
    Bounce bounce;
    std::mutex mutex;  // one operation at a time: its messages stay together
    uint64_t sizes[kSlots] = {};
    void* requests[kSlots] = {};
    std::atomic<uint64_t> filled{0};
    uint64_t posted = 0;  // (proxy thread)
    std::atomic<uint64_t> freed{0};
    bool midFrame = false;  // an operation's messages are being written (mutex)
    std::atomic<bool> broken{false};
    std::string why;  // once broken (reasonMutex_)
    bool closed = false;
  };
  /// This rank's receive comm from a peer; the proxy thread's alone after setup.
  struct Receiving {
    void* listen = nullptr;  // until the comm is accepted
    bool accepted = false;   // the peer knocked and its comm was accepted (comm, bounce made)
    void* comm = nullptr;
    Bounce bounce;
    void* requests[kSlots] = {};
    uint64_t sizes[kSlots] = {};
    uint64_t posted = 0, done = 0;   // messages
    bool headerDue = true;           // the next message to post is a header
    uint64_t payloadToPost = 0;      // bytes of the current put not posted yet
    FrameHeader frame{};             // the operation whose payload arrives
    uint64_t landed = 0;             // of its payload
    bool dropped = false;            // its window went away: the rest is discarded
    bool bye = false;
    bool ended = false;              // refused or failed: nothing more is posted or tested
    bool closed = false;
  };

  /// Caller's thread, s.mutex held: connects to `peer`, knocks and makes the bounce slots, once.
  void ensureConnected(int peer, Sending& s);
  /// Proxy thread: accepts the comm of a peer that knocked; true when it moved.
  bool tryAccept(int from, Receiving& r);
  /// Registers `bounce` with `comm` (the proxy held, or on the proxy thread).
  ncclResult_t registerBounce(void* comm, Bounce& bounce);
  /// Caller's thread: throws when `peer` is known to have vanished (its control path ended).
  void checkPeerAlive(int peer);
  /// Caller's thread: writes h (and its payload) as messages into peer's send slots.
  void write(int peer, const FrameHeader& h, const void* payload);
  /// Caller's thread: waits for a free send slot (the operation's mutex held); throws when the
  /// path broke or the communicator was aborted.
  void waitForSlot(int peer, Sending& s);
  /// Proxy thread: posts and completes what it can on peer's comms; true when anything moved.
  bool pumpSend(int peer, Sending& s);
  bool pumpReceive(int from, Receiving& r);
  /// Proxy thread: message r.done has arrived (a header or a piece of payload).
  void received(int from, Receiving& r);
  /// Proxy thread: the header in slot bytes arrived; false after ending the path.
  bool acceptHeader(int from, Receiving& r, const FrameHeader& h);
  /// Ends the path from `from` (waits on it fail with `why`).
  void endFrom(int from, Receiving& r, const std::string& why, bool warn);
  void breakTo(int peer, Sending& s, const std::string& why);
  /// Proxy thread, once the end was asked for: closes each comm that has nothing in flight and
  /// has said (sending) or heard (receiving) goodbye; true when all are closed.
  bool closeFinished();
  /// "net plugin NAME: CALL returned RESULT", for reasons.
  std::string callFailed(const char* call, int result) const;

  const int rank_, nRanks_, contexts_;
  const uint64_t commHash_;
  const uint32_t* abortWord_;
  std::shared_ptr<plugin::NetSession> session_;
  const std::vector<int> devices_;
  std::function<void(int, int)> arrive_;
  std::chrono::seconds timeout_{30};
  std::unique_ptr<std::atomic<bool>[]> knocked_;  // by rank: it connected (set by control_'s pump)
  // by rank: when a wait first saw its control path ended (steady clock, ns; 0: not yet)
  std::unique_ptr<std::atomic<int64_t>[]> controlLostAt_;
  std::unique_ptr<Links> control_;  // liveness, and the knocks that ask for an accept (after knocked_: it writes there)
  std::atomic<uint64_t> bounceBytes_{0};
  std::vector<std::unique_ptr<Sending>> send_;     // by rank: null unless linked
  std::vector<std::unique_ptr<Receiving>> recv_;   // by rank: null unless linked
  bool attached_ = false;
  bool orphaned_ = false;
  std::atomic<bool> closing_{false};   // the destructor asked the proxy to close the comms
  std::atomic<bool> released_{false};  // they are closed
  mutable LostPeers lost_;  // (a wait that sees the control path ended marks it)
  mutable std::mutex reasonMutex_;  // the Sending whys
  WindowTable windows_;
  std::atomic<uint64_t> arrivals_{0};
};

}  // namespace braid::transport::onesided
