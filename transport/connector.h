// The connections of one communicator: created lazily, the first time an algorithm needs a
// peer, through the bootstrap's tagged messages, and reused afterwards.
//
// The transport for a pair of ranks follows from where they run, as NCCL's does: threads of
// one process use transport/p2p (unless NCCL_P2P_DISABLE=1), processes of one host
// transport/shm (unless NCCL_SHM_DISABLE=1), and everything else the network transport: a net
// plugin's (transport/net/plugin) when one is loaded with devices, else IB, else Socket
// (NCCL_NET names one of them; a plugin by its name).
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include "topology/search.h"
#include "transport/fifo.h"
#include "transport/net/ib/ib_transport.h"
#include "transport/net/plugin/plugin_transport.h"
#include "transport/net/socket/socket_transport.h"

namespace braid::bootstrap {
class Bootstrap;
}

namespace braid::transport {

/// The connection sets, each with FIFOs of its own to the same peers: channel c of the
/// algorithms over every peer (set 0, channel 0, is also send/recv's; p2p FIFOs), and channel
/// c of the tree and of the grid algorithms (collective FIFOs, as the ring's).
constexpr int kSetChannels = 64;  // channels per kind (kMaxChannels)
constexpr int peerSet(int channel) { return channel; }
constexpr int treeSet(int channel) { return kSetChannels + channel; }
constexpr int gridSet(int channel) { return 2 * kSetChannels + channel; }

/// Where a peer runs relative to this rank.
struct PeerPlace {
  bool sameHost;
  bool sameProcess;
  bool sharedMemory = false;  ///< another process of this host with the same /dev/shm: the shm transport
  bool gpuReachable = false;  ///< with a GPU backend, another process: its GPU can write this rank's GPU memory
  std::string shmPrefix;      ///< how the names of its shared-memory segments start (shm::segmentPrefix)
};

struct ConnectorOptions {
  FifoSizes ring;      ///< FIFOs of collective (ring) connections
  FifoSizes p2p;       ///< FIFOs of send/recv connections
  bool shmDisabled = false;  ///< NCCL_SHM_DISABLE
  bool p2pDisabled = false;  ///< NCCL_P2P_DISABLE
  bool networkOnly = false;  ///< every peer through the network transport (tests)
  std::string net;           ///< NCCL_NET ("", IB, Socket or a net plugin's name)
  bool ibDisabled = false;   ///< NCCL_IB_DISABLE
  ib::Settings ib;           ///< the verbs transport's knobs (the rest is filled in per connection)
  /// GPU Direct RDMA's knobs and this rank's GPU, for the verbs transport and net plugins (the
  /// connector adds `allocator`).
  GpuDirectPolicy gpuDirect;
  int nSockets = 1;          ///< NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD
  uint64_t commHash = 0;     ///< presented on every network connection
  const uint32_t* abortFlag = nullptr;  ///< the communicator's abort flag
  /// The backend's FIFO memory (null: the host's): the in-process transport allocates from it,
  /// and the others' host memory is registered with it, so that the kernels reach every FIFO.
  FifoAllocator* allocator = nullptr;
  /// The network ports the topology chose for each kind of connection (empty: by number).
  topo::PortPlan ports;
};

class Connector {
 public:
  Connector(bootstrap::Bootstrap& channel, int rank, std::vector<PeerPlace> peers, ConnectorOptions options);
  ~Connector();

  /// Collective: every rank calls it with the same nChannels. Connects each ring channel
  /// (send to the next rank, receive from the previous) that is not connected yet.
  void connectRing(int nChannels);
  kernels::RingHandle ring(int channel) const;

  /// Connects what this rank's send/recv operations need. Deadlock-free when every send has its
  /// matching receive in the peer's call: descriptors for our receives go out before we wait
  /// for the descriptors of our sends. `set` keeps independent connections to the same peers
  /// (peerSet, treeSet, gridSet below).
  void connectPeers(const std::vector<int>& sendTo, const std::vector<int>& recvFrom, int set = 0);
  /// Every rank at once: connects this rank to every other both ways in `set` (those already
  /// connected stay), the descriptors moved by one bootstrap alltoall and the receivers held
  /// until a barrier says every sender has its own (2 log2 n bootstrap rounds a rank, where
  /// connectPeers to every rank takes 4(n-1) messages: 4 million at 1024 ranks).
  void connectEveryPeer(int set = 0);
  kernels::ConnHandle peerSend(int peer, int set = 0) const;
  kernels::ConnHandle peerRecv(int peer, int set = 0) const;

  /// One end of a connection: its FIFO memory (which holds this rank's step counter on it).
  struct End {
    End() = default;
    End(const End&) = delete;
    End& operator=(const End&) = delete;
    ~End() {
      if (registeredWith != nullptr) registeredWith->unregisterHost(memory->base());
    }
    std::unique_ptr<FifoMemory> memory;
    int peer = -1;
    Kind kind = Kind::kP2p;
    bool isSend = false;
    FifoAllocator* registeredWith = nullptr;  ///< the allocator memory was registered with (host memory)
    /// Which connection between this rank and `peer` in this direction, the same number at
    /// both ends: the ring channel, or kRingLinks + the send/recv set (a resume's messages
    /// name FIFOs by it).
    int link = -1;
  };
  static constexpr int kRingLinks = kSetChannels;

  /// Every connected end (ring and send/recv), in the order they were connected.
  void forEachEnd(const std::function<void(const End&)>& visit) const;
  /// At most `count` ends from the first-th on in that order, wrapping round (a bounded share
  /// of them, for a watchdog's tick on a rank with thousands); returns how many there are.
  size_t visitEnds(size_t first, size_t count, const std::function<void(const End&)>& visit) const;

  /// Whether this rank's sends still owe `peer` data: an end of the send/recv sets (peerSet)
  /// holds steps posted (tail) that the peer has not freed (head), which for a network end
  /// includes steps its proxy has not sent yet, and the oldest of them is not the first step
  /// of a collective (a collective of this rank that the peer has not joined posts there too).
  /// Ring, tree and grid ends carry collectives only. For the watchdog, which must not call a
  /// peer whose data is still on its way deadlocked.
  bool sendsPendingTo(int peer) const;

  /// The rank connection setup is waiting on now (-1: none), for the watchdog.
  int setupWaitingOn() const;
  /// The rank whose message the last timed-out wait of connection setup waited for (-1: none
  /// timed out), and how long such a wait may take (BRAID_BOOTSTRAP_TIMEOUT).
  int setupTimedOutOn() const;
  long long setupTimeoutSeconds() const;

  /// The network transport (as networkKind chooses it for the FIFO connections), for the
  /// one-sided carrier between hosts, and the verbs settings that carrier uses.
  Kind interHostKind() { return networkKind(); }
  ib::Settings oneSidedIbSettings() const { return ibSettings(Lane{"one-sided", rank_, ""}); }

  /// Whether any connection goes through the network (so the proxy thread carries it).
  bool usesNetwork() const { return usesNetwork_; }

  /// The options; tests change them before the first connection (networkOnly, say).
  ConnectorOptions& options() { return options_; }
  /// The net plugin when it carries this communicator's network (NCCL_NET's rule, chosen now if
  /// no network connection has chosen yet), else null. Throws as networkKind does.
  std::shared_ptr<plugin::NetSession> netPlugin() { return networkKind() == Kind::kPlugin ? netSession_ : nullptr; }
  /// The net plugin device the one-sided carrier's comms to and from `peer` use: the one this
  /// rank's first send/recv connection set to that peer uses (the topology's NIC near the GPU,
  /// else the peer's rank modulo the devices). Only where netPlugin() is not null.
  int oneSidedPluginDevice(int peer) const;

 private:
  /// A connection's name for the log ("ring3", "p2p0") and the RDMA port it prefers: the
  /// topology's (`port`; "" none), else `hint` spreads connections over the ports (the ring
  /// channel, or the peer's rank).
  struct Lane {
    std::string what;
    int hint = 0;
    std::string port;
  };
  /// The lanes of ring channel c's ends and of send/recv set `set`'s ends to `peer`.
  Lane ringLane(int c, bool send) const;
  Lane peerLane(int set, int peer) const;
  /// Receiver side of a new connection from `peer`: the memory, and the descriptor sent to it.
  std::unique_ptr<End> createReceiver(int peer, const FifoSizes& sizes, const Lane& lane, Descriptor* d);
  /// Sender side: checks `peer`'s descriptor against what this rank expects (transport/
  /// descriptor_check.h; `sizes` are this rank's for the connection), then takes hold of it;
  /// *ack is the answer for the peer (this rank, and where its credit line is).
  std::unique_ptr<End> importSender(int peer, const Descriptor& d, const Lane& lane, const FifoSizes& sizes,
                                    Acknowledgement* ack);
  /// Receiver side: checks the sender's answer to `mine` (checkAcknowledgement), then maps the
  /// credit line it names (shm).
  void acceptAcknowledgement(End& receiver, const Descriptor& mine, const Acknowledgement& ack, const std::string& what);
  /// The transport between this rank and `peer`.
  Kind route(int peer);
  /// The network transport of this communicator, chosen at its first network connection
  /// (NCCL_NET, NCCL_IB_DISABLE, the ports found); throws ncclInvalidUsage when NCCL_NET
  /// names one that cannot run here.
  Kind networkKind();
  /// The network transports' settings for this communicator.
  socket::Settings socketSettings() const;
  ib::Settings ibSettings(const Lane& lane) const;
  netplugin::Settings pluginSettings(const Lane& lane) const;
  /// Says at INFO (ALLOC) how many ends this rank holds and their FIFO bytes by transport.
  void logMemory(const char* after) const;
  /// Makes a new end's host memory (shared memory, a network end's copy) reachable by the
  /// backend's kernels.
  void registerEnd(End& end);
  /// Keeps a new end in `into` under key, and in ends_.
  void adopt(std::map<int, std::unique_ptr<End>>& into, int key, std::unique_ptr<End> end);

  bootstrap::Bootstrap& channel_;
  int rank_;
  std::vector<PeerPlace> peers_;
  ConnectorOptions options_;
  std::shared_ptr<plugin::NetSession> netSession_;  // the net plugin, when it carries this communicator's network
  mutable std::mutex endsMutex_;  // guards the maps' shape against forEachEnd (another thread)
  std::map<int, std::unique_ptr<End>> ringSend_, ringRecv_;  // by channel
  std::map<int, std::unique_ptr<End>> peerSend_, peerRecv_;  // by set x nRanks + peer rank
  std::vector<const End*> ends_;  // every end of the maps, in the order connected (none leaves before destruction)
  int nRanks_;
  bool usesNetwork_ = false;
  Kind networkKind_ = Kind::kP2p;  // kP2p until chosen
};

}  // namespace braid::transport
