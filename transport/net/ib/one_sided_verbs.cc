#include "transport/net/ib/one_sided_verbs.h"

#include "braid_config.h"
#include "core/status.h"

#if BRAID_HAVE_IBVERBS_HEADERS

#include <arpa/inet.h>
#include <fcntl.h>
#include <sched.h>

#include <cerrno>
#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "bootstrap/bootstrap.h"
#include "core/log.h"
#include "core/process.h"
#include "transport/net/ib/verbs.h"

namespace braid::transport::onesided {

namespace {

constexpr int kSendDepth = 64;  // work requests in flight to one peer (every one signaled)
constexpr int kRecvDepth = 64;  // receives posted per peer for its immediates
constexpr int kStagingSlots = 4;
constexpr uint64_t kSlotBytes = 512 << 10;
constexpr uint64_t kMaxWrite = uint64_t{1} << 30;        // one zero-copy work request's bytes
constexpr uint64_t kMaxWindowBytes = uint64_t{1} << 48;  // what a peer's record may claim
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
constexpr int kMaxContexts = 1 << 16;  // the immediate's low 16 bits
constexpr int kQuietPassesToArm = 64;  // proxy passes without an arrival before asking for an event

/// A window as its owner publishes it to the origins (bootstrap allgather).
struct WindowRecord {
  uint64_t id;
  uint64_t addr;
  uint64_t size;
  uint32_t rkey;
  uint32_t registered;  // 0: its owner's NIC refused the registration
};

/// A rank's verdict on its own setup, so that a rank that failed fails every rank at once.
struct Verdict {
  int32_t failed;
  char why[252];
};

uint32_t immediateOf(int ctx, uint16_t sequence) { return (uint32_t{sequence} << 16) | static_cast<uint32_t>(ctx); }

/// A peer's window as the origin knows it.
struct RemoteWindow {
  uint64_t addr, size;
  uint32_t rkey;
};

/// One of this rank's windows: its region, and the peers' windows published with it (forgotten
/// when it is withdrawn: ncclCommWindowDeregister is collective in NCCL).
struct OwnWindow {
  ibv_mr* mr;
  std::vector<uint64_t> peerIds;  // by rank
};

/// One linked peer: the queue pair to it, its send completions, the staging ring.
struct Peer {
  // Origin side: the calling threads, under `mutex`.
  std::mutex mutex;
  ibv_qp* qp = nullptr;
  ibv_cq* sendCq = nullptr;
  char* staging = nullptr;  // kStagingSlots x kSlotBytes, registered on first use
  ibv_mr* stagingMr = nullptr;
  uint64_t posted = 0, completed = 0;  // work requests
  uint64_t slotFreeAt[kStagingSlots] = {};  // `completed` at which each staging slot was read
  uint64_t nextSlot = 0;
  uint16_t sequenceOut = 0;
  std::string failure;  // the queue pair broke: why (every later operation fails with it)
  // Target side: the proxy thread only.
  uint16_t sequenceIn = 0;
  IbEndpoint local{};
};

class VerbsCarrier final : public Carrier, public proxy::Pump {
 public:
  VerbsCarrier(const VerbsSetup& s, const std::vector<bool>& linked)
      : setup_(s), lost_(s.nRanks), peers_(s.nRanks) {
    for (int r = 0; r < s.nRanks; ++r) {
      if (linked[r] && r != s.rank) peers_[r] = std::make_unique<Peer>();
    }
  }
  ~VerbsCarrier() override;
  VerbsCarrier(const VerbsCarrier&) = delete;
  VerbsCarrier& operator=(const VerbsCarrier&) = delete;

  void connect(bootstrap::Bootstrap& channel, const std::vector<bool>& linked, net::SocketAddress listenAt,
               std::chrono::seconds timeout);

  bool linked(int peer) const override { return peer >= 0 && peer < setup_.nRanks && peers_[peer] != nullptr; }
  void publishWindow(uint64_t id, void* buffer, uint64_t size, Settle settle) override;
  void withdrawWindow(uint64_t id) override;
  void put(int peer, uint64_t window, uint64_t offset, const void* data, uint64_t bytes, int ctx) override;
  void signal(int peer, int ctx) override;
  bool lost(int peer) const override {
    if (marked(peer)) return true;
    // A waiting thread's probe may see the control link end first; the proxy marks the peer
    // lost only after reaping what came before, so it is woken to do that now (it sleeps on the
    // completion channel, not on a timer).
    if (control_ != nullptr && control_->lost(peer)) proxy::kick();
    return false;
  }
  std::string lostReason(int peer) const override { return lost_.reason(peer); }
  uint64_t arrivals() const override { return arrivals_.load(std::memory_order_relaxed); }

  // proxy::Pump: the completion channel of the receive completion queue (the control links
  // are a pump of their own): the proxy sleeps until a completion lands, no polling timer.
  void pollSet(std::vector<pollfd>* fds) override {
    if (events_ != nullptr && !orphaned_) fds->push_back(pollfd{events_->fd, POLLIN, 0});
  }
  bool progress(const pollfd* polled) override;
  bool needsPolling() const override { return events_ == nullptr || !armed_; }
  void orphan() override { orphaned_ = true; }
  void broke(const std::string& why) override {
    for (int r = 0; r < setup_.nRanks; ++r)
      if (linked(r)) markLost(r, "the one-sided verbs path failed: " + why, true);
  }

 private:
  /// Opens the device, the completion queues and a queue pair (INIT) per linked peer.
  void createQueuePairs();
  /// The completion channel of the receive queue; without one (the library refuses) the proxy
  /// polls the queue, events_ staying null.
  void openChannel();
  /// Connects each linked peer's queue pair to the endpoint it sent, and posts its receives.
  void connectQueuePairs(const std::vector<IbEndpoint>& theirs);
  /// Every rank's `problem` ("" none) by allgather; throws the first one.
  void agree(bootstrap::Bootstrap& channel, const std::string& problem, const char* step);

  /// Origin side (peer's mutex held): throws when the path to `peer` is broken.
  void checkUsable(int peer, Peer& p);
  /// Posts one signaled work request: an RDMA write of `sge` (null: zero bytes) to `remote`,
  /// with the immediate `imm` when given.
  void post(int peer, Peer& p, const ibv_sge* sge, uint64_t remote, uint32_t rkey, const uint32_t* imm);
  /// Reaps send completions until `p.completed` reaches `count`; throws when one failed, the
  /// communicator is aborted, or the peer is lost while the writes are outstanding.
  void waitCompleted(int peer, Peer& p, uint64_t count);
  /// Reaps what the send completion queue holds; false when a completion failed (p.failure).
  bool reap(int peer, Peer& p);
  void writeStaged(int peer, Peer& p, const char* data, uint64_t bytes, uint64_t remote, uint32_t rkey);
  void writeDirect(int peer, Peer& p, const char* data, uint64_t bytes, ibv_mr* source, uint64_t remote,
                   uint32_t rkey);

  /// Proxy thread: takes the completion channel's events (each arms the queue once).
  void takeEvents();
  /// Proxy thread: reaps the receive completion queue; false when polling it failed (then
  /// every peer is lost).
  bool reapArrivals(bool* moved);
  /// Proxy thread: one receive completion.
  void received(const ibv_wc& wc);
  /// Whether `peer` is marked lost (what the proxy decided).
  bool marked(int peer) const { return lost_.lost(peer); }
  void markLost(int peer, const std::string& why, bool warn);

  VerbsSetup setup_;
  const ib::Verbs* verbs_ = nullptr;
  std::shared_ptr<ib::Device> device_;
  ib::Port port_;
  int gidIndex_ = 0;
  std::string where_;  // "mlx5_0 port 1"
  ibv_cq* recvCq_ = nullptr;
  ibv_comp_channel* events_ = nullptr;  // readable once a completion lands on an armed recvCq_
  bool armed_ = false;  // (proxy thread) recvCq_ asked for its next completion's event
  int quietPasses_ = 0;  // (proxy thread) passes since the last arrival
  std::unordered_map<uint32_t, int> peerOfQp_;  // queue pair number -> rank
  bootstrap::Bootstrap* channel_ = nullptr;
  std::unique_ptr<Links> control_;  // liveness only: hellos, goodbyes, closed sockets
  bool attached_ = false;
  bool orphaned_ = false;
  LostPeers lost_;
  std::vector<std::unique_ptr<Peer>> peers_;  // by rank: null unless linked
  // Puts read the records (shared); publish and withdraw change them (exclusive).
  std::shared_mutex recordsMutex_;
  std::map<uint64_t, OwnWindow> own_;
  std::vector<std::map<uint64_t, RemoteWindow>> remote_;  // by rank
  std::atomic<uint64_t> arrivals_{0};
};

VerbsCarrier::~VerbsCarrier() {
  if (attached_) proxy::detach(this);
  if (orphaned_) return;  // (a forked child: the queue pairs are the parent's)
  // What was posted reaches the peers before the goodbye on the control links (bounded: a
  // peer that is gone fails the writes, or the deadline passes).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (int r = 0; r < setup_.nRanks; ++r) {
    if (peers_[r] == nullptr || peers_[r]->qp == nullptr) continue;
    Peer& p = *peers_[r];
    std::lock_guard<std::mutex> lock(p.mutex);
    while (p.failure.empty() && p.completed < p.posted && std::chrono::steady_clock::now() < deadline) {
      if (reap(r, p)) sched_yield();
    }
  }
  control_.reset();
  for (auto& peer : peers_) {
    if (peer == nullptr) continue;
    if (peer->qp != nullptr) verbs_->destroyQp(peer->qp);
    if (peer->sendCq != nullptr) verbs_->destroyCq(peer->sendCq);
    if (peer->stagingMr != nullptr) verbs_->deregMr(peer->stagingMr);
    std::free(peer->staging);
  }
  for (auto& [id, window] : own_) verbs_->deregMr(window.mr);
  if (recvCq_ != nullptr) verbs_->destroyCq(recvCq_);  // (every event taken was acknowledged)
  if (events_ != nullptr) verbs_->destroyCompChannel(events_);
}

void VerbsCarrier::connect(bootstrap::Bootstrap& channel, const std::vector<bool>& linked,
                           net::SocketAddress listenAt, std::chrono::seconds timeout) {
  channel_ = &channel;
  remote_.resize(setup_.nRanks);
  std::string problem;
  try {
    if (setup_.contexts > kMaxContexts) {
      fail(ncclInvalidUsage, "one-sided over verbs carries the context in 16 bits; numRmaCtx is %d",
           setup_.contexts);
    }
    createQueuePairs();
  } catch (const std::exception& e) {
    problem = e.what();
  }
  std::vector<IbEndpoint> mine(setup_.nRanks), theirs(setup_.nRanks);
  for (int r = 0; r < setup_.nRanks; ++r)
    if (problem.empty() && this->linked(r)) mine[r] = peers_[r]->local;
  channel.allToAll(mine.data(), theirs.data(), sizeof(IbEndpoint));
  if (problem.empty()) {
    try {
      connectQueuePairs(theirs);
    } catch (const std::exception& e) {
      problem = e.what();
    }
  }
  agree(channel, problem, "setting up its queue pairs");  // (also: every queue pair receives from here on)
  control_ = std::make_unique<Links>(setup_.rank, setup_.nRanks, setup_.contexts, setup_.commHash, setup_.abortWord,
                                     [](int, int) {});  // (no operation travels on the control links)
  control_->open(channel, linked, listenAt, 0, timeout);  // (liveness: its listener answers while the peer lives)
  proxy::attach(this);
  attached_ = true;
  BRAID_INFO(log::kInit | log::kNet, "one-sided: rank %d reaches its linked peers by RDMA over %s%s", setup_.rank,
             where_.c_str(), port_.roce ? " (RoCE)" : "");
}

void VerbsCarrier::createQueuePairs() {
  std::string why;
  verbs_ = ib::loadVerbs(setup_.verbs.library, &why);
  if (verbs_ == nullptr) fail(ncclSystemError, "one-sided over verbs: %s", why.c_str());
  const std::vector<ib::Port> ports = ib::usablePorts(*verbs_, setup_.verbs.hca);
  if (ports.empty()) fail(ncclSystemError, "one-sided over verbs: %s reports no usable port", verbs_->library.c_str());
  port_ = ports.front();  // (NCCL_IB_HCA picks another)
  where_ = port_.device + " port " + std::to_string(port_.port);
  device_ = ib::openDevice(*verbs_, port_.device);
  gidIndex_ = ib::chooseGidIndex(*device_, port_, setup_.verbs.gidIndex, setup_.verbs.gpuDirect.sysRoot);
  ibv_gid gid{};
  if (verbs_->queryGid(device_->context(), static_cast<uint8_t>(port_.port), gidIndex_, &gid) != 0) {
    fail(ncclSystemError, "one-sided over verbs: GID index %d of %s cannot be read", gidIndex_, where_.c_str());
  }
  int linkedCount = 0;
  for (auto& p : peers_) linkedCount += p != nullptr;
  openChannel();
  recvCq_ = verbs_->createCq(device_->context(), kRecvDepth * linkedCount + 1, nullptr, events_, 0);
  if (recvCq_ == nullptr) fail(ncclSystemError, "one-sided over verbs: cannot create a completion queue on %s", where_.c_str());
  for (int r = 0; r < setup_.nRanks; ++r) {
    if (!linked(r)) continue;
    Peer& p = *peers_[r];
    p.sendCq = verbs_->createCq(device_->context(), kSendDepth + 1, nullptr, nullptr, 0);
    if (p.sendCq == nullptr) fail(ncclSystemError, "one-sided over verbs: cannot create a completion queue on %s", where_.c_str());
    ibv_qp_init_attr init{};
    init.send_cq = p.sendCq;
    init.recv_cq = recvCq_;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = kSendDepth;
    init.cap.max_recv_wr = kRecvDepth;
    init.cap.max_send_sge = init.cap.max_recv_sge = 1;
    p.qp = verbs_->createQp(device_->pd(), &init);
    if (p.qp == nullptr) fail(ncclSystemError, "one-sided over verbs: cannot create a queue pair on %s", where_.c_str());
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = static_cast<uint8_t>(port_.port);
    a.qp_access_flags = kAccess;
    const int rc = verbs_->modifyQp(p.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc != 0) fail(ncclSystemError, "one-sided over verbs: a queue pair on %s refused INIT (%s)", where_.c_str(), strerror(rc));
    p.local.qpn = p.qp->qp_num;
    p.local.psn = static_cast<uint32_t>(process::random64() & 0xffffff);
    p.local.lid = port_.lid;
    p.local.port = static_cast<uint8_t>(port_.port);
    p.local.roce = port_.roce ? 1 : 0;
    std::memcpy(p.local.gid, gid.raw, 16);
    p.local.mtu = static_cast<uint8_t>(port_.activeMtu);
    peerOfQp_[p.local.qpn] = r;
  }
}

void VerbsCarrier::openChannel() {
  // Arrivals wake the proxy through a completion channel (its descriptor non-blocking: the
  // proxy takes events without waiting) instead of the proxy polling the queue on a timer.
  events_ = verbs_->createCompChannel(device_->context());
  const int flags = events_ != nullptr ? fcntl(events_->fd, F_GETFL) : -1;
  if (flags >= 0 && fcntl(events_->fd, F_SETFL, flags | O_NONBLOCK) == 0) return;
  BRAID_INFO(log::kInit | log::kNet,
             "one-sided: no completion channel on %s (%s): the proxy polls for arrivals (within 1 ms when idle)",
             where_.c_str(), strerror(errno));
  if (events_ != nullptr) verbs_->destroyCompChannel(events_);
  events_ = nullptr;
}

void VerbsCarrier::connectQueuePairs(const std::vector<IbEndpoint>& theirs) {
  const ib::QpAttributes q{setup_.verbs.serviceLevel, setup_.verbs.trafficClass, setup_.verbs.ackTimeout,
                           setup_.verbs.retryCount};
  for (int r = 0; r < setup_.nRanks; ++r) {
    if (!linked(r)) continue;
    Peer& p = *peers_[r];
    const IbEndpoint& e = theirs[r];
    if (e.qpn == 0 || e.qpn > 0xffffff || e.psn > 0xffffff || e.mtu < IBV_MTU_256 || e.mtu > IBV_MTU_4096) {
      fail(ncclRemoteError, "one-sided over verbs: rank %d sent an invalid queue pair (number %u, PSN %u, MTU %u)", r,
           e.qpn, e.psn, e.mtu);
    }
    if ((e.roce != 0) != port_.roce) {
      fail(ncclInvalidUsage, "one-sided over verbs: rank %d's port is %s and this rank's (%s) %s: choose ports of one "
           "link layer with NCCL_IB_HCA", r, e.roce ? "RoCE" : "InfiniBand", where_.c_str(),
           port_.roce ? "RoCE" : "InfiniBand");
    }
    const std::string err = ib::connectQueuePair(*verbs_, p.qp, port_, gidIndex_, q, p.local, e);
    if (!err.empty()) fail(ncclSystemError, "one-sided over verbs: rank %d cannot reach rank %d from %s: %s", setup_.rank, r, where_.c_str(), err.c_str());
    for (int i = 0; i < kRecvDepth; ++i) {
      ibv_recv_wr wr{};
      ibv_recv_wr* bad = nullptr;
      if (ibv_post_recv(p.qp, &wr, &bad) != 0) fail(ncclSystemError, "one-sided over verbs: cannot post receives on %s", where_.c_str());
    }
  }
}

void VerbsCarrier::agree(bootstrap::Bootstrap& channel, const std::string& problem, const char* step) {
  std::vector<Verdict> all(setup_.nRanks);
  Verdict& mine = all[setup_.rank];
  mine.failed = problem.empty() ? 0 : 1;
  std::snprintf(mine.why, sizeof mine.why, "%s", problem.c_str());
  channel.allGather(all.data(), sizeof(Verdict));
  for (int r = 0; r < setup_.nRanks; ++r) {
    if (all[r].failed == 0) continue;
    all[r].why[sizeof all[r].why - 1] = '\0';
    fail(r == setup_.rank ? ncclSystemError : ncclRemoteError, "rank %d failed %s: %s", r, step, all[r].why);
  }
}

// ---- windows ----

void VerbsCarrier::publishWindow(uint64_t id, void* buffer, uint64_t size, Settle settle) {
  // (an RDMA write lands without this rank's knowing where: there is no moment to settle it; the
  // CUDA backend's relay takes TCP links where the network is verbs)
  if (settle) fail(ncclInternalError, "the verbs carrier cannot settle puts into window id %#llx", (unsigned long long)id);
  const int n = setup_.nRanks, me = setup_.rank;
  std::vector<WindowRecord> all(n);
  ibv_mr* mr = orphaned_ ? nullptr : verbs_->regMr(device_->pd(), buffer, size, kAccess);
  const int error = errno;
  all[me] = WindowRecord{id, reinterpret_cast<uint64_t>(buffer), size, mr != nullptr ? mr->rkey : 0, mr != nullptr};
  try {
    channel_->allGather(all.data(), sizeof(WindowRecord));
    for (int r = 0; r < n; ++r) {
      if (all[r].registered == 0) {
        if (r == me) {
          fail(ncclSystemError, "registering the window's %" PRIu64 " bytes at %p with %s for RDMA failed (%s)", size,
               buffer, where_.c_str(), strerror(error));
        }
        fail(ncclRemoteError, "rank %d could not register its part of the window with its NIC (see its warning)", r);
      }
      const WindowRecord& w = all[r];
      if (linked(r) && (w.size != size || w.size > kMaxWindowBytes || w.addr + w.size < w.addr)) {
        fail(ncclRemoteError, "rank %d published a window of %" PRIu64 " bytes at %#" PRIx64
             " for RDMA; this rank's is %" PRIu64 " bytes: refused", r, w.size, w.addr, size);
      }
    }
  } catch (...) {
    if (mr != nullptr) verbs_->deregMr(mr);
    throw;
  }
  std::unique_lock<std::shared_mutex> lock(recordsMutex_);
  OwnWindow& own = own_[id];
  if (own.mr != nullptr) verbs_->deregMr(own.mr);  // (the same id twice: the newer one stands)
  own.mr = mr;
  own.peerIds.assign(n, 0);
  for (int r = 0; r < n; ++r) {
    if (!linked(r)) continue;
    own.peerIds[r] = all[r].id;
    remote_[r][all[r].id] = RemoteWindow{all[r].addr, all[r].size, all[r].rkey};
  }
}

void VerbsCarrier::withdrawWindow(uint64_t id) {
  std::unique_lock<std::shared_mutex> lock(recordsMutex_);  // (waits for puts reading from it)
  const auto it = own_.find(id);
  if (it == own_.end()) return;
  // Deregistered: when this returns the NIC writes no byte into the memory any more.
  if (!orphaned_) verbs_->deregMr(it->second.mr);
  for (int r = 0; r < setup_.nRanks; ++r)
    if (linked(r)) remote_[r].erase(it->second.peerIds[r]);
  own_.erase(it);
}

// ---- the origin ----

void VerbsCarrier::put(int peer, uint64_t window, uint64_t offset, const void* data, uint64_t bytes, int ctx) {
  if (!linked(peer)) fail(ncclInternalError, "one-sided over verbs: rank %d is not linked to rank %d", setup_.rank, peer);
  if (ctx < 0 || ctx >= setup_.contexts) fail(ncclInvalidArgument, "ctx is %d; the communicator has %d contexts", ctx, setup_.contexts);
  std::shared_lock<std::shared_mutex> records(recordsMutex_);
  const auto it = remote_[peer].find(window);
  if (it == remote_[peer].end()) {
    fail(ncclInvalidUsage, "rank %d published no window with id %#" PRIx64 " for RDMA to this rank (deregistered?)",
         peer, window);
  }
  const RemoteWindow w = it->second;
  if (offset > w.size || bytes > w.size - offset) {
    fail(ncclInvalidArgument, "the put of %" PRIu64 " bytes at offset %" PRIu64 " does not fit rank %d's window of %" PRIu64
         " bytes (as it published it): refused at the origin, nothing sent", bytes, offset, peer, w.size);
  }
  // A source inside one of this rank's windows is already registered: no copy.
  ibv_mr* source = nullptr;
  const auto from = reinterpret_cast<uint64_t>(data);
  for (const auto& [ownId, own] : own_) {
    const auto base = reinterpret_cast<uint64_t>(own.mr->addr);
    if (bytes > 0 && from >= base && from - base <= own.mr->length && bytes <= own.mr->length - (from - base)) source = own.mr;
  }
  Peer& p = *peers_[peer];
  std::lock_guard<std::mutex> lock(p.mutex);
  checkUsable(peer, p);
  if (bytes > 0 && source != nullptr) {
    writeDirect(peer, p, static_cast<const char*>(data), bytes, source, w.addr + offset, w.rkey);
  } else if (bytes > 0) {
    writeStaged(peer, p, static_cast<const char*>(data), bytes, w.addr + offset, w.rkey);
  }
  const uint32_t imm = immediateOf(ctx, p.sequenceOut++);
  post(peer, p, nullptr, 0, 0, &imm);
  if (source != nullptr) waitCompleted(peer, p, p.posted);  // (the caller may change its window from here)
}

void VerbsCarrier::signal(int peer, int ctx) {
  if (!linked(peer)) fail(ncclInternalError, "one-sided over verbs: rank %d is not linked to rank %d", setup_.rank, peer);
  if (ctx < 0 || ctx >= setup_.contexts) fail(ncclInvalidArgument, "ctx is %d; the communicator has %d contexts", ctx, setup_.contexts);
  Peer& p = *peers_[peer];
  std::lock_guard<std::mutex> lock(p.mutex);
  checkUsable(peer, p);
  const uint32_t imm = immediateOf(ctx, p.sequenceOut++);
  post(peer, p, nullptr, 0, 0, &imm);
}

void VerbsCarrier::checkUsable(int peer, Peer& p) {
  if (orphaned_) fail(ncclInvalidUsage, "one-sided over verbs: this process is a fork of the one that made the queue pairs");
  reap(peer, p);
  if (!p.failure.empty()) fail(ncclRemoteError, "%s", p.failure.c_str());
}

void VerbsCarrier::writeStaged(int peer, Peer& p, const char* data, uint64_t bytes, uint64_t remote, uint32_t rkey) {
  if (p.staging == nullptr) {
    p.staging = static_cast<char*>(std::aligned_alloc(4096, kStagingSlots * kSlotBytes));
    if (p.staging == nullptr) fail(ncclSystemError, "one-sided over verbs: out of memory for a staging ring");
    p.stagingMr = verbs_->regMr(device_->pd(), p.staging, kStagingSlots * kSlotBytes, IBV_ACCESS_LOCAL_WRITE);
    if (p.stagingMr == nullptr) {
      std::free(p.staging);
      p.staging = nullptr;
      fail(ncclSystemError, "one-sided over verbs: registering a staging ring on %s failed (%s)", where_.c_str(),
           strerror(errno));
    }
  }
  for (uint64_t done = 0; done < bytes; done += kSlotBytes) {
    const uint64_t n = std::min(kSlotBytes, bytes - done);
    const uint64_t slot = p.nextSlot++ % kStagingSlots;
    waitCompleted(peer, p, p.slotFreeAt[slot]);  // (the NIC has read what the slot held)
    char* into = p.staging + slot * kSlotBytes;
    std::memcpy(into, data + done, n);
    const ibv_sge sge{reinterpret_cast<uint64_t>(into), static_cast<uint32_t>(n), p.stagingMr->lkey};
    post(peer, p, &sge, remote + done, rkey, nullptr);
    p.slotFreeAt[slot] = p.posted;
  }
}

void VerbsCarrier::writeDirect(int peer, Peer& p, const char* data, uint64_t bytes, ibv_mr* source, uint64_t remote,
                               uint32_t rkey) {
  for (uint64_t done = 0; done < bytes; done += kMaxWrite) {
    const uint64_t n = std::min(kMaxWrite, bytes - done);
    const ibv_sge sge{reinterpret_cast<uint64_t>(data + done), static_cast<uint32_t>(n), source->lkey};
    post(peer, p, &sge, remote + done, rkey, nullptr);
  }
}

void VerbsCarrier::post(int peer, Peer& p, const ibv_sge* sge, uint64_t remote, uint32_t rkey, const uint32_t* imm) {
  if (p.posted - p.completed >= kSendDepth) waitCompleted(peer, p, p.posted - kSendDepth + 1);
  ibv_send_wr wr{};
  wr.wr_id = p.posted;
  wr.sg_list = const_cast<ibv_sge*>(sge);
  wr.num_sge = sge != nullptr ? 1 : 0;
  wr.opcode = imm != nullptr ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (imm != nullptr) wr.imm_data = htonl(*imm);
  wr.wr.rdma.remote_addr = remote;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(p.qp, &wr, &bad);
  if (rc != 0) {
    p.failure = "one-sided over verbs: posting an RDMA write to rank " + std::to_string(peer) + " on " + where_ +
                " failed (" + strerror(rc) + ")";
    fail(ncclSystemError, "%s", p.failure.c_str());
  }
  ++p.posted;
}

bool VerbsCarrier::reap(int peer, Peer& p) {
  ibv_wc wc[16];
  const int n = ibv_poll_cq(p.sendCq, 16, wc);
  for (int i = 0; i < n; ++i) {
    if (wc[i].status == IBV_WC_SUCCESS) {
      ++p.completed;
      continue;
    }
    if (!p.failure.empty()) continue;  // (the first failure says why; the rest are flushed)
    char text[400];
    if (wc[i].status == IBV_WC_REM_ACCESS_ERR) {
      std::snprintf(text, sizeof text,
                    "rank %d refused an RDMA write from rank %d (remote access error on %s): its window was "
                    "deregistered, or the write fell outside it; the path to rank %d is broken",
                    peer, setup_.rank, where_.c_str(), peer);
    } else {
      std::snprintf(text, sizeof text,
                    "an RDMA write from rank %d to rank %d failed on %s: \"%s\" (status %d, vendor error %#x)%s",
                    setup_.rank, peer, where_.c_str(), verbs_->wcStatusStr(wc[i].status), static_cast<int>(wc[i].status),
                    wc[i].vendor_err, ib::peerFault(wc[i].status) ? ": its process ended or the network failed" : "");
    }
    p.failure = text;
  }
  if (n < 0) p.failure = "one-sided over verbs: polling the completion queue on " + where_ + " failed";
  return n == 0 && p.failure.empty();
}

void VerbsCarrier::waitCompleted(int peer, Peer& p, uint64_t count) {
  while (p.completed < count) {
    if (!reap(peer, p)) {
      if (!p.failure.empty()) fail(ncclRemoteError, "%s", p.failure.c_str());
      continue;
    }
    if (setup_.abortWord != nullptr && __atomic_load_n(setup_.abortWord, __ATOMIC_ACQUIRE) != 0) {
      fail(ncclInvalidUsage, "the communicator was aborted while writing to rank %d", peer);
    }
    if (lost(peer)) fail(ncclRemoteError, "writing to rank %d: %s", peer, lostReason(peer).c_str());
    sched_yield();
  }
}

// ---- the target (proxy thread) ----

bool VerbsCarrier::progress(const pollfd* polled) {
  if (orphaned_) return false;
  if (events_ != nullptr && (polled[0].revents & POLLIN) != 0) takeEvents();
  bool moved = false;
  if (!reapArrivals(&moved)) return true;
  quietPasses_ = moved ? 0 : quietPasses_ + 1;
  if (events_ != nullptr && !armed_ && quietPasses_ >= kQuietPassesToArm) {
    // Notification is one-shot: ask for the next completion's event once arrivals pause (while
    // they come, the busy proxy finds them without an event's system calls), then reap once
    // more, as a completion that landed before the request raises none. Until it is armed the
    // pump needs the proxy's passes (needsPolling).
    if (ibv_req_notify_cq(recvCq_, 0) != 0) {
      broke("arming the receive completion queue's notification on " + where_ + " failed");
      return true;
    }
    armed_ = true;
    if (!reapArrivals(&moved)) return true;
  }
  // A control link that ended loses its peer only now, after every completion that came
  // before: what the peer sent before it left still counts.
  for (int r = 0; r < setup_.nRanks; ++r) {
    if (linked(r) && !marked(r) && control_->lost(r)) {
      markLost(r, control_->lostReason(r), false);
      moved = true;
    }
  }
  return moved;
}

void VerbsCarrier::takeEvents() {
  // One queue on the channel, armed once: at most one event (non-blocking: -1 when none).
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  if (verbs_->getCqEvent(events_, &cq, &context) != 0) return;
  verbs_->ackCqEvents(cq, 1);  // (destroying the queue waits for every event's acknowledgement)
  armed_ = false;
}

bool VerbsCarrier::reapArrivals(bool* moved) {
  ibv_wc wc[32];
  for (int round = 0; round < 4; ++round) {
    const int n = ibv_poll_cq(recvCq_, 32, wc);
    if (n < 0) {
      broke("polling the receive completion queue on " + where_ + " failed");
      return false;
    }
    for (int i = 0; i < n; ++i) received(wc[i]);
    *moved |= n > 0;
    if (n < 32) break;
  }
  return true;
}

void VerbsCarrier::received(const ibv_wc& wc) {
  const auto it = peerOfQp_.find(wc.qp_num);
  if (it == peerOfQp_.end()) return;
  const int from = it->second;
  if (marked(from)) return;
  char text[300];
  if (wc.status != IBV_WC_SUCCESS) {
    std::snprintf(text, sizeof text, "the RDMA path from rank %d failed on %s: a receive completed with \"%s\" "
                  "(status %d): its process ended or the network failed", from, where_.c_str(),
                  verbs_->wcStatusStr(wc.status), static_cast<int>(wc.status));
    return markLost(from, text, true);
  }
  if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM) return;
  Peer& p = *peers_[from];
  const uint32_t imm = ntohl(wc.imm_data);
  const int ctx = static_cast<int>(imm & 0xffff);
  const auto sequence = static_cast<uint16_t>(imm >> 16);
  if (ctx >= setup_.contexts) {
    std::snprintf(text, sizeof text, "rank %d's signal names ctx %d; this communicator has %d contexts", from, ctx,
                  setup_.contexts);
    return markLost(from, text, true);
  }
  if (sequence != p.sequenceIn) {
    std::snprintf(text, sizeof text, "rank %d's signal carries sequence %u where %u was due: an operation was lost",
                  from, sequence, p.sequenceIn);
    return markLost(from, text, true);
  }
  ++p.sequenceIn;
  setup_.arrive(from, ctx);  // (release: the writes before the immediate are in the window)
  arrivals_.fetch_add(1, std::memory_order_relaxed);
  ibv_recv_wr wr{};
  ibv_recv_wr* bad = nullptr;
  if (ibv_post_recv(p.qp, &wr, &bad) != 0) markLost(from, "cannot post a receive on " + where_, true);
}

void VerbsCarrier::markLost(int peer, const std::string& why, bool warn) {
  if (warn) BRAID_WARN("one-sided: rank %d: %s", setup_.rank, why.c_str());
  lost_.mark(peer, why);
}

}  // namespace

std::unique_ptr<Carrier> connectVerbs(const VerbsSetup& setup, bootstrap::Bootstrap& channel,
                                      const std::vector<bool>& linked, net::SocketAddress listenAt,
                                      std::chrono::seconds timeout) {
  auto carrier = std::make_unique<VerbsCarrier>(setup, linked);
  carrier->connect(channel, linked, listenAt, timeout);
  return carrier;
}

bool overVerbs(const Carrier& carrier) {
  return dynamic_cast<const VerbsCarrier*>(&carrier) != nullptr;
}

}  // namespace braid::transport::onesided

#else  // built without the verbs headers

namespace braid::transport::onesided {

std::unique_ptr<Carrier> connectVerbs(const VerbsSetup&, bootstrap::Bootstrap&, const std::vector<bool>&,
                                      net::SocketAddress, std::chrono::seconds) {
  fail(ncclInvalidUsage, "one-sided over verbs: Braid was built without the verbs headers (libibverbs-dev)");
}

bool overVerbs(const Carrier&) {
  return false;
}

}  // namespace braid::transport::onesided

#endif
