#include "transport/connector.h"

#include <strings.h>

#include <cstring>

#include "bootstrap/bootstrap.h"
#include "core/interfaces.h"
#include "core/log.h"
#include "core/status.h"
#include "plugin/net_plugin.h"
#include "proxy/proxy.h"
#include "transport/descriptor_check.h"
#include "transport/net/plugin/plugin_end.h"
#include "transport/net/socket/socket_transport.h"
#include "transport/p2p/p2p_transport.h"
#include "transport/shm/shm_transport.h"

namespace braid::transport {

namespace {
constexpr uint32_t kRingTag = 0x52430000;     // + channel: ring descriptors
constexpr uint32_t kRingAckTag = 0x52410000;  // + channel: "mapped, you may unlink"
constexpr uint32_t kPeerTag = 0x50430000;
constexpr uint32_t kPeerAckTag = 0x50410000;

kernels::ConnHandle handleOf(const std::map<int, std::unique_ptr<Connector::End>>& ends, int key, const char* what);
}  // namespace

Connector::Connector(bootstrap::Bootstrap& channel, int rank, std::vector<PeerPlace> peers, ConnectorOptions options)
    : channel_(channel),
      rank_(rank),
      peers_(std::move(peers)),
      options_(std::move(options)),
      nRanks_(static_cast<int>(peers_.size())) {}

Connector::~Connector() = default;

Kind Connector::route(int peer) {
  const PeerPlace& place = peers_[peer];
  if (options_.networkOnly) return networkKind();
  if (place.sameProcess && !options_.p2pDisabled) return Kind::kP2p;
  if (place.sharedMemory && !options_.shmDisabled) return Kind::kShm;
  return networkKind();
}

namespace {
const char* kindName(Kind k) {
  return k == Kind::kP2p      ? "P2P/in-process"
         : k == Kind::kShm    ? "SHM"
         : k == Kind::kIb     ? "NET/IB"
         : k == Kind::kPlugin ? "NET/Plugin"
                              : "NET/Socket";
}
}  // namespace

Kind Connector::networkKind() {
  if (networkKind_ != Kind::kP2p) return networkKind_;
  const std::string& net = options_.net;
  const bool wantIb = strcasecmp(net.c_str(), "IB") == 0;
  if (!plugin::NetSession::namesBuiltin(net)) {
    // A net plugin with devices comes first, as in NCCL; NCCL_NET may name it (the topology's
    // NICs follow the same rule: plugin::NetSession::probe).
    netSession_ = plugin::NetSession::open(options_.commHash, rank_);
    if (netSession_ != nullptr && plugin::NetSession::picks(net, netSession_->name())) {
      networkKind_ = Kind::kPlugin;
      BRAID_INFO(log::kInit | log::kNet, "NET/Plugin : Using net plugin %s (v%d), %d device(s)",
                 netSession_->name().c_str(), netSession_->version(), netSession_->devices());
      return networkKind_;
    }
    if (!net.empty()) {
      fail(ncclInvalidUsage, "NCCL_NET=%s names no network transport Braid has (IB, Socket%s%s)", net.c_str(),
           netSession_ != nullptr ? ", the net plugin " : "", netSession_ != nullptr ? netSession_->name().c_str() : "");
    }
    netSession_.reset();
  }
  std::string why, ports;
  if (wantIb && options_.ibDisabled) {
    fail(ncclInvalidUsage, "NCCL_NET=IB, but NCCL_IB_DISABLE=1 turns the InfiniBand transport off");
  }
  const bool tryIb = wantIb || (net.empty() && !options_.ibDisabled);
  if (tryIb && ib::available(ibSettings(Lane{}), &why, &ports)) {
    networkKind_ = Kind::kIb;
    BRAID_INFO(log::kInit | log::kNet, "NET/IB : Using %s", ports.c_str());
  } else if (wantIb) {
    fail(ncclInvalidUsage, "NCCL_NET=IB: the InfiniBand transport cannot run here: %s", why.c_str());
  } else {
    networkKind_ = Kind::kSocket;
    BRAID_INFO(log::kInit | log::kNet, "NET/Socket : Using the socket transport%s%s", why.empty() ? "" : " (NET/IB: ",
               why.empty() ? "" : (why + ")").c_str());
  }
  return networkKind_;
}

namespace {
const std::string& entry(const std::vector<std::string>& list, int i) {
  static const std::string none;
  return list.empty() ? none : list[static_cast<size_t>(i) % list.size()];
}
}  // namespace

Connector::Lane Connector::ringLane(int c, bool send) const {
  return Lane{"ring" + std::to_string(c), c, entry(send ? options_.ports.ringOut : options_.ports.ringIn, c)};
}

Connector::Lane Connector::peerLane(int set, int peer) const {
  const char* kind = set < treeSet(0) ? "p2p" : set < gridSet(0) ? "tree" : "grid";
  const int c = set % kSetChannels;
  const std::string& port = set >= treeSet(0) && set < gridSet(0) ? entry(options_.ports.tree, c)
                                                                   : entry(options_.ports.near, peer + set);
  return Lane{kind + std::to_string(c), peer + set, port};
}

ib::Settings Connector::ibSettings(const Lane& lane) const {
  ib::Settings s = options_.ib;
  s.listenAt = channel_.peerAddress(rank_);
  s.commHash = options_.commHash;
  s.rank = rank_;
  s.timeout = channel_.timeout();
  s.abortFlag = options_.abortFlag;
  s.portHint = lane.hint;
  s.port = lane.port;
  s.what = lane.what;
  s.gpuDirect = options_.gpuDirect;
  s.gpuDirect.allocator = options_.allocator;
  return s;
}

netplugin::Settings Connector::pluginSettings(const Lane& lane) const {
  netplugin::Settings s;
  s.listenAt = channel_.peerAddress(rank_);
  s.commHash = options_.commHash;
  s.rank = rank_;
  s.timeout = channel_.timeout();
  s.abortFlag = options_.abortFlag;
  s.session = netSession_;
  s.deviceHint = lane.hint;
  s.port = lane.port;
  s.what = lane.what;
  s.gpuDirect = options_.gpuDirect;
  s.gpuDirect.allocator = options_.allocator;
  return s;
}

int Connector::oneSidedPluginDevice(int peer) const {
  return netplugin::detail::chooseDevice(pluginSettings(peerLane(0, peer)));
}

socket::Settings Connector::socketSettings() const {
  socket::Settings s;
  s.listenAt = channel_.peerAddress(rank_);
  s.nSockets = options_.nSockets;
  s.commHash = options_.commHash;
  s.rank = rank_;
  s.timeout = channel_.timeout();
  s.abortFlag = options_.abortFlag;
  // The proxy thread runs best near the NIC it serves (when sysfs knows the device's node).
  const std::string ifname = net::interfaceHolding(s.listenAt);
  proxy::preferCpus(net::cpusNearInterface(ifname), ifname);
  return s;
}

std::unique_ptr<Connector::End> Connector::createReceiver(int peer, const FifoSizes& sizes, const Lane& lane,
                                                          Descriptor* d) {
  const std::string& what = lane.what;
  auto end = std::make_unique<End>();
  const Kind kind = route(peer);
  if (kind == Kind::kP2p) {
    end->memory = p2p::create(sizes, options_.allocator, d);
  } else if (kind == Kind::kShm) {
    end->memory = shm::create(sizes, options_.allocator, !options_.p2pDisabled && peers_[peer].gpuReachable, d);
  } else if (kind == Kind::kIb) {
    end->memory = ib::createReceiver(sizes, ibSettings(lane), peer, d);
    usesNetwork_ = true;
  } else if (kind == Kind::kPlugin) {
    end->memory = netplugin::createReceiver(sizes, pluginSettings(lane), peer, d);
    usesNetwork_ = true;
  } else {
    end->memory = socket::createReceiver(sizes, socketSettings(), peer, d);
    usesNetwork_ = true;
  }
  end->peer = peer;
  end->kind = d->kind;
  registerEnd(*end);
  BRAID_INFO(log::kInit | (kind == Kind::kP2p ? log::kP2p : kind == Kind::kShm ? log::kShm : log::kNet),
             "channel %s: rank %d <- rank %d via %s", what.c_str(), rank_, peer,
             d->kind == Kind::kShm && d->dataShared ? "P2P/IPC (SHM counters, slots in GPU memory)" : kindName(kind));
  return end;
}

std::unique_ptr<Connector::End> Connector::importSender(int peer, const Descriptor& d, const Lane& lane,
                                                        const FifoSizes& sizes, Acknowledgement* ack) {
  DescriptorExpectation expected;
  expected.peer = peer;
  expected.sameProcess = peers_[peer].sameProcess;
  expected.sharedMemory = peers_[peer].sharedMemory;
  expected.sizes = sizes;
  expected.shmPrefix = peers_[peer].shmPrefix;
  expected.peerAddress = channel_.peerAddress(peer);
  const std::string wrong = checkDescriptor(d, expected);
  if (!wrong.empty()) {
    fail(ncclSystemError, "rank %d refused rank %d's descriptor for connection %s: %s", rank_, peer, lane.what.c_str(),
         wrong.c_str());
  }
  std::memset(ack, 0, sizeof(*ack));
  ack->magic = kAcknowledgementMagic;
  ack->rank = rank_;
  auto end = std::make_unique<End>();
  if (d.kind == Kind::kP2p) {
    end->memory = p2p::import(d, options_.allocator);
  } else if (d.kind == Kind::kShm) {
    end->memory = shm::import(d, options_.allocator, ack);
  } else if (d.kind == Kind::kSocket) {
    end->memory = socket::connectSender(d, socketSettings(), peer);
    usesNetwork_ = true;
  } else if (d.kind == Kind::kIb) {
    end->memory = ib::connectSender(d, ibSettings(lane), peer);
    usesNetwork_ = true;
  } else if (d.kind == Kind::kPlugin) {
    if (networkKind() != Kind::kPlugin) {
      fail(ncclInvalidUsage, "rank %d reaches rank %d through a net plugin, but this rank uses %s (NCCL_NET_PLUGIN and "
           "NCCL_NET must be the same on every rank)", peer, rank_, kindName(networkKind()));
    }
    end->memory = netplugin::connectSender(d, pluginSettings(lane), peer);
    usesNetwork_ = true;
  } else {
    fail(ncclInternalError, "rank %d sent a connection descriptor of unknown kind %u", peer, static_cast<unsigned>(d.kind));
  }
  end->peer = peer;
  end->kind = d.kind;
  end->isSend = true;
  registerEnd(*end);
  return end;
}

void Connector::acceptAcknowledgement(End& receiver, const Descriptor& mine, const Acknowledgement& ack,
                                      const std::string& what) {
  DescriptorExpectation expected;
  expected.peer = receiver.peer;
  expected.shmPrefix = peers_[receiver.peer].shmPrefix;
  const std::string wrong = checkAcknowledgement(ack, expected, receiver.kind, mine.dataShared != 0);
  if (!wrong.empty()) {
    fail(ncclSystemError, "rank %d refused rank %d's acknowledgement for connection %s: %s", rank_, receiver.peer,
         what.c_str(), wrong.c_str());
  }
  if (receiver.kind == Kind::kShm) shm::adoptCredit(*receiver.memory, ack, options_.allocator);
}

void Connector::registerEnd(End& end) {
  if (options_.allocator == nullptr || end.kind == Kind::kP2p) return;  // p2p memory came from the allocator
  options_.allocator->registerHost(end.memory->base(), end.memory->hostBytes());
  end.registeredWith = options_.allocator;
}

void Connector::logMemory(const char* after) const {
  if (!log::enabled(log::Level::Info, log::kAlloc)) return;
  uint64_t bytes[6] = {};  // by Kind
  int ends = 0;
  forEachEnd([&](const End& e) {
    bytes[static_cast<int>(e.kind) % 6] += e.memory->sizes().bytes();
    ++ends;
  });
  auto mib = [](uint64_t b) { return static_cast<double>(b) / (1 << 20); };
  BRAID_INFO(log::kAlloc, "rank %d: %d connection ends after %s, FIFO memory %.1f MiB (P2P %.1f, SHM %.1f, NET %.1f; "
             "host memory is backed where touched)", rank_, ends, after,
             mib(bytes[1] + bytes[2] + bytes[3] + bytes[4] + bytes[5]), mib(bytes[static_cast<int>(Kind::kP2p)]),
             mib(bytes[static_cast<int>(Kind::kShm)]),
             mib(bytes[static_cast<int>(Kind::kSocket)] + bytes[static_cast<int>(Kind::kIb)] +
                 bytes[static_cast<int>(Kind::kPlugin)]));
}

void Connector::connectRing(int nChannels) {
  if (nRanks_ == 1) return;
  const int next = (rank_ + 1) % nRanks_;
  const int prev = (rank_ + nRanks_ - 1) % nRanks_;
  bool added = false;
  for (int c = 0; c < nChannels; ++c) {
    if (ringSend_.count(c) != 0) continue;
    added = true;
    Descriptor mine, theirs;
    auto recvEnd = createReceiver(prev, options_.ring, ringLane(c, false), &mine);
    channel_.send(prev, kRingTag + c, &mine, sizeof(mine));
    channel_.recv(next, kRingTag + c, &theirs, sizeof(theirs));
    Acknowledgement ack, theirAck;
    auto sendEnd = importSender(next, theirs, ringLane(c, true), options_.ring, &ack);
    // The receiver keeps its FIFO memory (and, for shm, its name) until the sender has taken
    // hold of it: a rank that finishes early cannot free memory its peer has yet to import.
    // The sender's answer also says where its credit line is.
    channel_.send(next, kRingAckTag + c, &ack, sizeof(ack));
    channel_.recv(prev, kRingAckTag + c, &theirAck, sizeof(theirAck));
    if (mine.kind == Kind::kShm) shm::unlinkName(mine);
    acceptAcknowledgement(*recvEnd, mine, theirAck, ringLane(c, false).what);
    adopt(ringRecv_, c, std::move(recvEnd));
    adopt(ringSend_, c, std::move(sendEnd));
  }
  if (added) logMemory("the ring");
}

kernels::RingHandle Connector::ring(int channel) const {
  kernels::RingHandle r{};
  r.nRanks = nRanks_;
  r.index = rank_;
  if (nRanks_ > 1) {
    r.send = handleOf(ringSend_, channel, "ring send");
    r.recv = handleOf(ringRecv_, channel, "ring receive");
  }
  return r;
}

void Connector::connectPeers(const std::vector<int>& sendTo, const std::vector<int>& recvFrom, int set) {
  // (One size for every peer set's connection, network or not: a collective may send to one
  // peer and receive from another in lockstep slices, kernels/algorithms/peer_transfer.h.)
  const FifoSizes& sizes = set < treeSet(0) ? options_.p2p : options_.ring;
  const uint32_t tag = kPeerTag + static_cast<uint32_t>(set), ackTag = kPeerAckTag + static_cast<uint32_t>(set);
  std::vector<std::pair<int, Descriptor>> created;
  for (int peer : recvFrom) {
    const int key = set * nRanks_ + peer;
    if (peer == rank_ || peerRecv_.count(key) != 0) continue;
    Descriptor d;
    adopt(peerRecv_, key, createReceiver(peer, sizes, peerLane(set, peer), &d));
    channel_.send(peer, tag, &d, sizeof(d));
    created.emplace_back(peer, d);
  }
  for (int peer : sendTo) {
    const int key = set * nRanks_ + peer;
    if (peer == rank_ || peerSend_.count(key) != 0) continue;
    Descriptor d;
    Acknowledgement ack;
    channel_.recv(peer, tag, &d, sizeof(d));
    adopt(peerSend_, key, importSender(peer, d, peerLane(set, peer), sizes, &ack));
    channel_.send(peer, ackTag, &ack, sizeof(ack));
  }
  for (auto& [peer, d] : created) {  // see connectRing: held until the sender has it
    Acknowledgement ack;
    channel_.recv(peer, ackTag, &ack, sizeof(ack));
    if (d.kind == Kind::kShm) shm::unlinkName(d);
    acceptAcknowledgement(*peerRecv_.at(set * nRanks_ + peer), d, ack, peerLane(set, peer).what);
  }
  if (!created.empty()) logMemory(set < treeSet(0) ? "point-to-point connections" : "tree or grid connections");
}

void Connector::connectEveryPeer(int set) {
  const FifoSizes& sizes = set < treeSet(0) ? options_.p2p : options_.ring;
  // Slot p: the descriptor of this rank's new receiver from p, or kind 0 where p already sends here.
  std::vector<Descriptor> mine(nRanks_), theirs(nRanks_);
  // Slot p: this rank's acknowledgement of p's receiver (zero where none was made), and p's.
  std::vector<Acknowledgement> acks(nRanks_), theirAcks(nRanks_);
  std::vector<int> created;
  for (int peer = 0; peer < nRanks_; ++peer) {
    mine[peer] = Descriptor{};
    const int key = set * nRanks_ + peer;
    if (peer == rank_ || peerRecv_.count(key) != 0) continue;
    adopt(peerRecv_, key, createReceiver(peer, sizes, peerLane(set, peer), &mine[peer]));
    created.push_back(peer);
  }
  channel_.allToAll(mine.data(), theirs.data(), sizeof(Descriptor));
  for (int peer = 0; peer < nRanks_; ++peer) {
    const int key = set * nRanks_ + peer;
    const bool connected = peerSend_.count(key) != 0;
    if (peer == rank_) continue;
    if (static_cast<uint32_t>(theirs[peer].kind) == 0) {  // the peer holds its receiver from before
      if (!connected) {
        fail(ncclInternalError, "rank %d has no connection to rank %d in set %d, but rank %d says it has one from it",
             rank_, peer, set, peer);
      }
      continue;
    }
    if (connected) {
      fail(ncclInternalError, "rank %d made a new receiver for rank %d in set %d, which was connected to it already",
           peer, rank_, set);
    }
    adopt(peerSend_, key, importSender(peer, theirs[peer], peerLane(set, peer), sizes, &acks[peer]));
  }
  // As connectPeers' acknowledgements: every sender has taken hold of its receiver once its
  // answer is here.
  channel_.allToAll(acks.data(), theirAcks.data(), sizeof(Acknowledgement));
  for (int peer : created) {
    if (mine[peer].kind == Kind::kShm) shm::unlinkName(mine[peer]);
    acceptAcknowledgement(*peerRecv_.at(set * nRanks_ + peer), mine[peer], theirAcks[peer], peerLane(set, peer).what);
  }
  if (!created.empty()) logMemory(set < treeSet(0) ? "point-to-point connections" : "tree or grid connections");
}

bool Connector::sendsPendingTo(int peer) const {
  if (peer < 0 || peer >= nRanks_) return false;
  std::lock_guard<std::mutex> lock(endsMutex_);
  for (int set = 0; set < kSetChannels; ++set) {
    const auto it = peerSend_.find(set * nRanks_ + peer);
    if (it == peerSend_.end()) continue;
    const FifoMemory& memory = *it->second->memory;
    // (counters in a GPU's memory are the kernels' alone: such an end is not judged here)
    if (memory.countersOnDevice()) continue;
    const kernels::ConnHandle h = memory.handle(/*isSender=*/true);
    const uint64_t head = kernels::loadAcquire(h.head);
    if (kernels::loadAcquire(h.tail) <= head) continue;
    // The oldest step the peer has not freed: a collective's first step carries its signature
    // (stamped with the step), a send's none. A collective of this rank that the peer has not
    // joined starts there; data that a send left before it would come first.
    const kernels::SigSlot& slot = h.sigs[head % kernels::kSteps];
    if (kernels::loadAcquire(&slot.stamp) == head + 1 && kernels::loadRelaxed(&slot.sig.seq) != 0) continue;
    return true;
  }
  return false;
}

int Connector::setupWaitingOn() const { return channel_.waitingOn(); }

int Connector::setupTimedOutOn() const { return channel_.timedOutOn(); }

long long Connector::setupTimeoutSeconds() const { return static_cast<long long>(channel_.timeout().count()); }

kernels::ConnHandle Connector::peerSend(int peer, int set) const {
  return handleOf(peerSend_, set * nRanks_ + peer, "send");
}
kernels::ConnHandle Connector::peerRecv(int peer, int set) const {
  return handleOf(peerRecv_, set * nRanks_ + peer, "receive");
}

namespace {
kernels::ConnHandle handleOf(const std::map<int, std::unique_ptr<Connector::End>>& ends, int key, const char* what) {
  auto it = ends.find(key);
  if (it == ends.end()) fail(ncclInternalError, "no %s connection %d", what, key);
  const FifoMemory& memory = *it->second->memory;
  if (it->second->kind == Kind::kP2p && memory.headWithCounters()) {
    fail(ncclInternalError, "%s connection %d to rank %d has no credit line: its sender has not imported it", what, key,
         it->second->peer);
  }
  kernels::ConnHandle h = memory.handle(it->second->isSend);
  h.peer = it->second->peer;
  h.transport = static_cast<uint16_t>(it->second->kind);
  return h;
}
}  // namespace

void Connector::forEachEnd(const std::function<void(const End&)>& visit) const {
  std::lock_guard<std::mutex> lock(endsMutex_);
  for (const End* end : ends_) visit(*end);
}

size_t Connector::visitEnds(size_t first, size_t count, const std::function<void(const End&)>& visit) const {
  std::lock_guard<std::mutex> lock(endsMutex_);
  const size_t n = ends_.size();
  for (size_t i = 0; i < count && i < n; ++i) visit(*ends_[(first + i) % n]);
  return n;
}

void Connector::adopt(std::map<int, std::unique_ptr<End>>& into, int key, std::unique_ptr<End> end) {
  const bool ring = &into == &ringSend_ || &into == &ringRecv_;
  end->link = ring ? key : kRingLinks + key / nRanks_;  // (a send/recv key: set x nRanks + peer)
  std::lock_guard<std::mutex> lock(endsMutex_);
  ends_.push_back(end.get());
  into[key] = std::move(end);
}

}  // namespace braid::transport
