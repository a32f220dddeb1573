#include "transport/net/ib/ib_transport.h"

#include "braid_config.h"
#include "core/status.h"

#if BRAID_HAVE_IBVERBS_HEADERS

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/interfaces.h"
#include "core/log.h"
#include "core/process.h"
#include "topology/pci_path.h"
#include "transport/net/ib/verbs.h"
#include "transport/net/net_end.h"

namespace braid::transport::ib {

namespace {

using namespace netend;  // NOLINT: the shared end machinery is this file's vocabulary

constexpr int kCqEntries = 256;
constexpr int kSendWrs = 64;  // at most kSteps steps of 2 writes, and one credit write, in flight
constexpr int kRecvWrs = 2 * kernels::kSteps;
constexpr uint64_t kCreditWr = ~uint64_t{0};
constexpr uint64_t kPayloadWr = ~uint64_t{0} - 1;
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

// Each end's memory after its FIFO (both ends have the same FIFO layout, so a sender computes
// the receiver's addresses from its own offsets).
constexpr uint64_t kCreditOffset = 0;   // sender: the receiver's head, written by RDMA; receiver: its source
constexpr uint64_t kRecordOffset = 64;  // kSteps 64-byte step records: the sender's sources, the receiver's landing
constexpr uint64_t kStagingOffset = kRecordOffset + kernels::kSteps * sizeof(FrameHeader);  // receiver: LL steps

static_assert(sizeof(IbEndpoint) <= sizeof(Hello::extra));

uint64_t extraBytes(const FifoSizes& sizes, bool isSend) {
  return kStagingOffset + (isSend ? 0 : kernels::kSteps * stagingCapacity(sizes));
}

const Verbs& verbsOf(const Settings& s) {
  std::string why;
  const Verbs* v = loadVerbs(s.library, &why);
  if (v == nullptr) fail(ncclSystemError, "NET/IB: %s", why.c_str());
  return *v;
}

/// The port a connection uses, its device (opened) and GID index; `planned` when it is the
/// topology's choice.
struct Choice {
  Port port;
  std::shared_ptr<Device> device;
  int gidIndex = 0;
  bool planned = false;
  int index = 0;  ///< the port's place among the usable ones (a profiler's network device id)
};

/// The topology's port (s.port) when it is usable and of link layer `roce` (when >= 0: 1 RoCE,
/// 0 InfiniBand); otherwise ports[hint mod n], or the first after it of that link layer.
Choice choose(const Settings& s, int roce) {
  const Verbs& v = verbsOf(s);
  const std::vector<Port> ports = usablePorts(v, s.hca);
  if (ports.empty()) {
    fail(ncclSystemError, "NET/IB: rank %d has no active port%s%s", s.rank,
         s.hca.empty() ? "" : " that NCCL_IB_HCA allows: NCCL_IB_HCA=", s.hca.c_str());
  }
  auto fits = [roce](const Port& p) { return roce < 0 || p.roce == (roce == 1); };
  auto make = [&](const Port& p, bool planned) {
    Choice c{p, openDevice(v, p.device), 0, planned, static_cast<int>(&p - ports.data())};
    c.gidIndex = chooseGidIndex(*c.device, p, s.gidIndex);
    return c;
  };
  if (!s.port.empty()) {
    for (const Port& p : ports)
      if (p.device + ":" + std::to_string(p.port) == s.port && fits(p)) return make(p, true);
    BRAID_INFO(log::kNet, "NET/IB: %s: rank %d cannot use the topology's port %s (%s); choosing by number", s.what.c_str(),
               s.rank, s.port.c_str(), roce >= 0 ? "not active, left out or of another link layer than the peer's"
                                                 : "not active or left out by NCCL_IB_HCA");
  }
  const size_t n = ports.size();
  for (size_t i = 0; i < n; ++i) {
    const Port& p = ports[(static_cast<size_t>(std::max(s.portHint, 0)) + i) % n];
    if (fits(p)) return make(p, false);
  }
  fail(ncclSystemError, "NET/IB: rank %d has no active %s port to reach its peer's%s%s", s.rank,
       roce == 1 ? "RoCE" : "InfiniBand", s.hca.empty() ? "" : " (NCCL_IB_HCA=", s.hca.empty() ? "" : (s.hca + ")").c_str());
}

/// Whether an end on `port` keeps its Simple slots in GPU memory (GPU Direct RDMA by dma-buf,
/// with no flush: this transport makes none); when not, `why` says why (empty for the host
/// backend, which has no GPU).
bool gdrWanted(const Settings& s, const Verbs& v, const Port& port, bool receiving, std::string* why) {
  why->clear();
  const GpuDirectPolicy& p = s.gpuDirect;
  if (p.allocator == nullptr) return false;
  if (!p.dmabuf) {
    *why = "NCCL_DMABUF_ENABLE=0";
    return false;
  }
  if (v.regDmabufMr == nullptr) {
    *why = v.library + " lacks ibv_reg_dmabuf_mr";
    return false;
  }
  const GpuDirectChoice c = chooseGpuDirect(p, topo::ibDeviceChain(port.device, p.sysRoot), receiving, false, false);
  *why = c.why;
  return c.slotsOnGpu;
}

/// What both ends share: the device, the registered memory, the completion queue and the
/// queue pair, and how a failed completion is reported.
class IbEnd : public EndPump {
 public:
  IbEnd(const FifoSizes& sizes, bool isSend, const Settings& s, int peer, Choice choice)
      : EndPump(sizes, extraBytes(sizes, isSend), isSend, s.rank, peer, ""),
        v_(choice.device->verbs()),
        device_(std::move(choice.device)),
        port_(choice.port),
        gidIndex_(choice.gidIndex),
        deviceIndex_(choice.index),
        settings_(s),
        where_(port_.device + " port " + std::to_string(port_.port)),
        why_(s.what + (choice.planned ? ", the topology's port" : ", port by number")) {
    // The proxy thread runs best near the device it drives (when sysfs knows its node).
    proxy::preferCpus(net::cpusNearRdmaDevice(port_.device, s.gpuDirect.sysRoot), port_.device);
    tracesSteps_ = true;  // (profiler plugins: proxy/op_trace.h)
    try {
      setUp();
    } catch (...) {
      tearDown();
      throw;
    }
  }
  ~IbEnd() override { tearDown(); }

  /// Where the Simple slots are, for the peer's RDMA writes: their address and rkey.
  uint64_t slotsAddress() const {
    return reinterpret_cast<uint64_t>(gpuSlots_ != nullptr ? gpuSlots_ : base() + fifoControlBytes());
  }
  uint32_t slotsRkey() const { return gpuMr_ != nullptr ? gpuMr_->rkey : mr_->rkey; }
  FifoMemory::DeviceData gpuSlots() const override {
    if (gpuSlots_ == nullptr) return {};
    return {gpuSlots_, uint64_t(kernels::kSteps) * sizes_.simpleStepBytes};
  }

 protected:
  /// This end's queue pair, with `addr` (the memory the peer writes to) and the region's rkey.
  IbEndpoint endpoint(const char* addr) const {
    IbEndpoint e = local_;
    e.addr = reinterpret_cast<uint64_t>(addr);
    return e;
  }

  /// RTR then RTS towards the peer's queue pair; "" or what failed.
  std::string connectQp(const IbEndpoint& r) {
    const QpAttributes q{settings_.serviceLevel, settings_.trafficClass, settings_.ackTimeout, settings_.retryCount};
    return connectQueuePair(v_, qp_, port_, gidIndex_, q, local_, r);
  }

  /// Reaps completions; true when any came.
  bool pollCq() {
    ibv_wc wc[16];
    bool moved = false;
    for (int round = 0; round < 4 && !broken_; ++round) {
      const int n = ibv_poll_cq(cq_, 16, wc);
      if (n < 0) {
        lost("failed on " + where_ + ": polling its completion queue failed", true, ncclSystemError);
        return true;
      }
      moved |= n > 0;
      for (int i = 0; i < n && !broken_; ++i) {
        if (wc[i].status != IBV_WC_SUCCESS) {
          completionFailed(wc[i]);
        } else {
          completed(wc[i]);
        }
      }
      if (n < 16) break;
    }
    return moved;
  }

  /// A successful completion.
  virtual void completed(const ibv_wc& wc) = 0;

  /// Posts one RDMA write (with an immediate value when `imm` is set); false after reporting.
  bool postWrite(uint64_t wrId, const void* from, uint32_t bytes, uint64_t remote, uint32_t rkey, bool signaled,
                 const uint32_t* imm, ibv_send_wr* before = nullptr) {
    ibv_sge sge{reinterpret_cast<uint64_t>(from), bytes, mr_->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wrId;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = imm != nullptr ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
    wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
    if (imm != nullptr) wr.imm_data = htonl(*imm);
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* first = &wr;
    if (before != nullptr) before->next = &wr, first = before;
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(qp_, first, &bad);
    if (rc != 0) {
      lost("failed on " + where_ + ": posting an RDMA write failed (" + strerror(rc) + ")", true, ncclSystemError);
      return false;
    }
    return true;
  }

  bool postRecv() {
    ibv_recv_wr wr{};
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(qp_, &wr, &bad) == 0;
  }

  const Verbs& v_;
  std::shared_ptr<Device> device_;
  Port port_;
  int gidIndex_;
  int deviceIndex_;
  Settings settings_;
  std::string where_;  // "mlx5_0 port 1"
  std::string why_;    // "ring3, the topology's port": the connection and how its port was chosen
  ibv_mr* mr_ = nullptr;
  ibv_mr* gpuMr_ = nullptr;    // GPU Direct RDMA: the Simple slots' region
  char* gpuSlots_ = nullptr;   // GPU Direct RDMA: the Simple slots (the allocator's device memory)
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  IbEndpoint local_{};

 private:
  void setUp() {
    mr_ = device_->registerMemory(base(), memory_.bytes(), kAccess);
    setUpGdr();
    cq_ = v_.createCq(device_->context(), kCqEntries, nullptr, nullptr, 0);
    if (cq_ == nullptr) fail(ncclSystemError, "NET/IB: cannot create a completion queue on %s (%s)", where_.c_str(), strerror(errno));
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = cq_;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = kSendWrs;
    init.cap.max_recv_wr = kRecvWrs;
    init.cap.max_send_sge = init.cap.max_recv_sge = 1;
    qp_ = v_.createQp(device_->pd(), &init);
    if (qp_ == nullptr) fail(ncclSystemError, "NET/IB: cannot create a queue pair on %s (%s)", where_.c_str(), strerror(errno));
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = static_cast<uint8_t>(port_.port);
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
    const int rc = v_.modifyQp(qp_, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc != 0) fail(ncclSystemError, "NET/IB: moving a queue pair on %s to INIT failed (%s)", where_.c_str(), strerror(rc));
    ibv_gid gid{};
    if (v_.queryGid(device_->context(), static_cast<uint8_t>(port_.port), gidIndex_, &gid) != 0) {
      fail(ncclSystemError, "NET/IB: GID index %d of %s cannot be read (NCCL_IB_GID_INDEX=%d)", gidIndex_, where_.c_str(),
           settings_.gidIndex);
    }
    local_.qpn = qp_->qp_num;
    local_.psn = static_cast<uint32_t>(process::random64() & 0xffffff);
    local_.lid = port_.lid;
    local_.port = static_cast<uint8_t>(port_.port);
    local_.roce = port_.roce ? 1 : 0;
    std::memcpy(local_.gid, gid.raw, 16);
    local_.mtu = static_cast<uint8_t>(port_.activeMtu);
    local_.rkey = mr_->rkey;
  }

  /// Moves the Simple slots into GPU memory registered with the NIC, where gdrWanted says so;
  /// where the device or the library then refuses, they stay in host memory (said at INFO).
  void setUpGdr() {
    std::string why;
    const bool wanted = gdrWanted(settings_, v_, port_, !isSend_, &why);
    const uint64_t bytes = uint64_t(kernels::kSteps) * sizes_.simpleStepBytes;
    // The sender's NIC only reads its slots; the receiver's is written by the peer's.
    const int access = isSend_ ? IBV_ACCESS_LOCAL_WRITE : kAccess;
    int fd = -1;
    if (wanted) {
      try {
        gpuSlots_ = static_cast<char*>(settings_.gpuDirect.allocator->allocateData(bytes, true));
        uint64_t offset = 0;
        fd = settings_.gpuDirect.allocator->dmabufFd(gpuSlots_, bytes, &offset);
        if (fd < 0) fail(ncclSystemError, "the device cannot export its memory as dma-buf");
        gpuMr_ = device_->registerDmabuf(fd, offset, bytes, gpuSlots_, access);
      } catch (const std::exception& e) {  // (out of GPU memory, say: the host's slots serve)
        why = e.what();
      }
      if (fd >= 0) ::close(fd);
      if (gpuMr_ == nullptr && gpuSlots_ != nullptr) {
        settings_.gpuDirect.allocator->freeData(gpuSlots_);
        gpuSlots_ = nullptr;
      }
    }
    slots_ = gpuSlots_;
    if (settings_.gpuDirect.allocator != nullptr) {
      BRAID_INFO(log::kNet, "NET/IB: rank %d %s rank %d on %s: %s%s", settings_.rank, isSend_ ? "->" : "<-", peer_,
                 where_.c_str(), gpuSlots_ != nullptr ? "GPU Direct RDMA (dma-buf)" : "Simple steps stage in host memory: ",
                 gpuSlots_ != nullptr ? "" : why.c_str());
    }
  }

  void tearDown() {
    if (qp_ != nullptr) v_.destroyQp(qp_);
    if (cq_ != nullptr) v_.destroyCq(cq_);
    if (mr_ != nullptr) device_->release(mr_);
    if (gpuMr_ != nullptr) device_->release(gpuMr_);
    if (gpuSlots_ != nullptr) settings_.gpuDirect.allocator->freeData(gpuSlots_);
    qp_ = nullptr;
    cq_ = nullptr;
    mr_ = nullptr;
    gpuMr_ = nullptr;
    gpuSlots_ = nullptr;
  }

  void completionFailed(const ibv_wc& wc) {
    if (byeReceived_) {  // the peer said goodbye and took its queue pair down: no failure
      broken_ = true;
      return;
    }
    char text[200];
    snprintf(text, sizeof text, "failed on %s: %s completed with \"%s\" (status %d, vendor error 0x%x)", where_.c_str(),
             wc.opcode & IBV_WC_RECV ? "a receive" : "an RDMA write", v_.wcStatusStr(wc.status),
             static_cast<int>(wc.status), wc.vendor_err);
    lost(text, true, peerFault(wc.status) ? ncclRemoteError : ncclSystemError);
  }
};

/// The sender's end: writes each published step into the receiver's memory while the credits
/// say its slot is free there; frees its own slot when the write has completed.
class SendEnd final : public IbEnd {
 public:
  SendEnd(const FifoSizes& sizes, const Settings& s, int peer, const Descriptor& d)
      : IbEnd(sizes, true, s, peer, choose(s, d.ib.roce)), remote_(d.ib), remoteSlots_(d.ibSlots),
        remoteSlotsRkey_(d.ibSlotsRkey) {
    const std::string err = connectQp(remote_);
    if (!err.empty()) {
      fail(ncclSystemError, "NET/IB: rank %d cannot reach rank %d's queue pair from %s: %s", s.rank, peer,
           where_.c_str(), err.c_str());
    }
    const net::SocketAddress to = net::SocketAddress::unpack(d.listen);
    const auto deadline = net::Clock::now() + s.timeout;
    net::Socket sock = net::Socket::connect(to, deadline, s.abortFlag);  // (abort ends the retries)
    Hello hello{kHelloMagic, kWireVersion, d.nonce, s.commHash, s.rank, peer, 0, 1, {}};
    const IbEndpoint mine = endpoint(extra() + kCreditOffset);
    std::memcpy(hello.extra, &mine, sizeof mine);
    sock.sendAll(&hello, sizeof(hello), deadline, s.abortFlag);
    peerName_ = to.toString();
    std::vector<net::Socket> sockets;
    sockets.push_back(std::move(sock));
    adoptSockets(std::move(sockets));
    BRAID_INFO(log::kNet, "NET/IB: rank %d -> rank %d over %s%s (%s), queue pair %u -> %u (control %s)", s.rank, peer,
               where_.c_str(), port_.roce ? " (RoCE)" : "", why_.c_str(), local_.qpn, remote_.qpn, peerName_.c_str());
  }

  bool progress(const pollfd* polled) override {
    polled_ = polled;
    if (broken_) return false;
    bool moved = readControl();  // the receiver's ready, fault notice and goodbye
    if (!broken_) moved |= pollCq();
    if (!broken_ && readyReceived_) moved |= postSteps();
    if (broken_) return true;
    if (!writers_[0].busy() && !startFault() && !startAnnounce()) startBye();  // drain() made sure no data is left
    if (write(0, &moved)) noteByeWritten();
    return moved;
  }

 private:
  void completed(const ibv_wc& wc) override {
    if (wc.wr_id != head_) {
      lost("failed on " + where_ + ": the write of step " + std::to_string(wc.wr_id) + " completed where step " +
               std::to_string(head_) + " was due (internal error)",
           true, ncclInternalError);
      return;
    }
    netEvents_.stop(head_);  // (its writes are done)
    kernels::storeRelease(conn_.head, ++head_);  // the data has left: the slot is reusable
    if (trace_.armed()) trace_.stepsDone(head_);
  }

  bool postSteps() {
    const uint64_t tail = kernels::loadAcquire(conn_.tail);
    const uint64_t credit = kernels::loadAcquire(reinterpret_cast<uint64_t*>(extra() + kCreditOffset));
    bool moved = false;
    while (!broken_ && next_ < tail && next_ < credit + kernels::kSteps) {
      postStep(next_++);
      moved = true;
    }
    return moved;
  }

  /// The payload (when there is one) and then the record with the step as immediate value.
  void postStep(uint64_t step) {
    const uint64_t slot = step % kernels::kSteps;
    FrameHeader* record = reinterpret_cast<FrameHeader*>(extra() + kRecordOffset) + slot;
    const char* payload = nullptr;
    if (!stepHeader(step, record, &payload)) return;
    if (trace_.armed()) trace_.stepTaken(step, record->bytes);  // (done once its writes complete)
    const bool staged = (record->flags & kFrameFlagged) != 0;
    const uint32_t bytes = record->bytes;
    // Simple data from this end's slot (GPU memory with GPU Direct RDMA) into the receiver's
    // (likewise); LL lines from host memory into the receiver's staging.
    const uint64_t remotePayload = staged ? remote_.addr + extraOffset_ + kStagingOffset + slot * stagingCapacity(sizes_)
                                          : remoteSlots_ + slot * sizes_.simpleStepBytes;
    const uint64_t remoteRecord = remote_.addr + extraOffset_ + kRecordOffset + slot * sizeof(FrameHeader);
    const uint32_t imm = static_cast<uint32_t>(step);
    ibv_sge payloadSge{reinterpret_cast<uint64_t>(payload), bytes, staged || gpuMr_ == nullptr ? mr_->lkey : gpuMr_->lkey};
    ibv_send_wr payloadWr{};
    payloadWr.wr_id = kPayloadWr;
    payloadWr.sg_list = &payloadSge;
    payloadWr.num_sge = 1;
    payloadWr.opcode = IBV_WR_RDMA_WRITE;
    payloadWr.wr.rdma.remote_addr = remotePayload;
    payloadWr.wr.rdma.rkey = staged ? remote_.rkey : remoteSlotsRkey_;
    if (!postWrite(step, record, sizeof(FrameHeader), remoteRecord, remote_.rkey, true, &imm,
                   bytes > 0 ? &payloadWr : nullptr)) {
      return;
    }
    if (trace_.armed()) {  // (a profiler's NetPlugin events: a work request each, until the step's completion)
      if (bytes > 0) netEvents_.startIb(trace_, step, 0, deviceIndex_, kPayloadWr, IBV_WR_RDMA_WRITE, qp_->qp_num, bytes);
      netEvents_.startIb(trace_, step, 1, deviceIndex_, step, IBV_WR_RDMA_WRITE_WITH_IMM, qp_->qp_num,
                         sizeof(FrameHeader));
    }
  }

  IbEndpoint remote_;
  uint64_t remoteSlots_;      // the receiver's Simple slots
  uint32_t remoteSlotsRkey_;
  uint64_t next_ = 0;  // the next step to post
  uint64_t head_ = 0;  // steps whose writes completed
  proxy::OwnNetEvents netEvents_;
};

/// The receiver's end: accepts the sender's control socket and queue pair, then checks and
/// publishes each step as its record arrives, and sends credits back.
class RecvEnd final : public IbEnd {
 public:
  RecvEnd(const FifoSizes& sizes, const Settings& s, int peer, net::Socket listener, uint64_t nonce)
      : IbEnd(sizes, false, s, peer, choose(s, -1)),
        acceptor_(s.rank, peer, std::move(listener), nonce, s.commHash, 1, s.timeout) {
    for (int i = 0; i < kRecvWrs; ++i)
      if (!postRecv()) fail(ncclSystemError, "NET/IB: cannot post receives on %s", where_.c_str());
  }

  IbEndpoint endpoint() const { return IbEnd::endpoint(base()); }

  void pollSet(std::vector<pollfd>* fds) override {
    if (!acceptor_.listening()) return EndPump::pollSet(fds);
    acceptor_.pollSet(fds);
  }

  bool progress(const pollfd* polled) override {
    polled_ = polled;
    if (broken_) return false;
    if (acceptor_.listening()) return progressAccept();
    bool moved = readControl();  // the sender's announcement, fault notice and goodbye
    if (!broken_) moved |= pollCq();
    if (!broken_) moved |= sendCredit();
    if (trace_.armed()) trace_.stepsDone(kernels::loadAcquire(conn_.head));  // (freed by the kernel)
    if (broken_) return true;
    if (!writers_[0].busy() && !startFault()) startBye();
    if (write(0, &moved)) noteByeWritten();
    return moved;
  }

 private:
  void orphanMore() override { acceptor_.orphan(); }

  bool progressAccept() {
    bool moved = false;
    const Acceptor::State state = acceptor_.progress(&moved);
    if (state == Acceptor::State::kTimedOut) {
      lost(acceptor_.timeoutText(), true);
    } else if (state == Acceptor::State::kComplete) {
      adoptSockets(acceptor_.takeSockets());
      peerName_ = sockets_[0].peerAddress().toString();
      std::memcpy(&remote_, acceptor_.hello().extra, sizeof remote_);
      const std::string err = connectQp(remote_);
      if (!err.empty()) {
        lost("failed on " + where_ + ": " + err, true, ncclSystemError);
      } else {
        startReady();  // the sender writes from now on
        BRAID_INFO(log::kNet, "NET/IB: rank %d <- rank %d over %s%s (%s), queue pair %u <- %u (control %s)", rank_,
                   peer_, where_.c_str(), port_.roce ? " (RoCE)" : "", why_.c_str(), local_.qpn, remote_.qpn,
                   peerName_.c_str());
      }
    }
    return moved;
  }

  void completed(const ibv_wc& wc) override {
    if (wc.wr_id == kCreditWr) {
      creditInFlight_ = false;
    } else if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
      land(ntohl(wc.imm_data));
      if (!broken_ && !postRecv()) lost("failed on " + where_ + ": cannot post a receive", true, ncclSystemError);
    }
  }

  /// The record of the step whose immediate value is `imm` has landed, after its payload:
  /// check it, then its signature, its LL lines (8-byte stores: data and flag together), tail.
  void land(uint32_t imm) {
    const uint64_t step = next_;
    const uint64_t slot = step % kernels::kSteps;
    const FrameHeader h = reinterpret_cast<const FrameHeader*>(extra() + kRecordOffset)[slot];
    if (!checkStep(h, step, "by RDMA (immediate " + std::to_string(imm) + ")", imm == static_cast<uint32_t>(step))) return;
    if (kernels::loadAcquire(conn_.head) + kernels::kSteps <= step) {
      lost("wrote step " + std::to_string(step) + " into a slot this end's kernel still reads", true);
      return;
    }
    if (trace_.armed()) trace_.stepTaken(step, h.bytes);  // (the record comes last: the step is whole)
    landStep(h, extra() + kStagingOffset + slot * stagingCapacity(sizes_));
    next_ = step + 1;
    kernels::storeRelease(conn_.tail, next_);
    if (trace_.armed()) trace_.stepLanded(step, h.bytes);
  }

  /// The kernel's head, when it moved, into the sender's credit word (one write at a time).
  bool sendCredit() {
    if (creditInFlight_) return false;
    const uint64_t head = kernels::loadAcquire(conn_.head);
    if (head == creditSent_) return false;
    auto* source = reinterpret_cast<uint64_t*>(extra() + kCreditOffset);
    *source = head;
    if (!postWrite(kCreditWr, source, sizeof(uint64_t), remote_.addr, remote_.rkey, true, nullptr)) return true;
    creditInFlight_ = true;
    creditSent_ = head;
    return true;
  }

  Acceptor acceptor_;
  IbEndpoint remote_{};
  uint64_t next_ = 0;  // the next step due
  uint64_t creditSent_ = 0;
  bool creditInFlight_ = false;
};

}  // namespace

bool available(const Settings& settings, std::string* why, std::string* what) {
  const Verbs* v = loadVerbs(settings.library, why);
  if (v == nullptr) return false;
  const std::vector<Port> ports = usablePorts(*v, settings.hca);
  if (ports.empty()) {
    *why = settings.library + " reports no active port" +
           (settings.hca.empty() ? std::string() : " that NCCL_IB_HCA=" + settings.hca + " allows");
    return false;
  }
  what->clear();
  for (size_t i = 0; i < ports.size(); ++i) {
    *what += (i ? " " : "") + std::string("[") + std::to_string(i) + "]" + ports[i].device + ":" +
             std::to_string(ports[i].port) + (ports[i].roce ? "/RoCE" : "/IB");
  }
  return true;
}

std::unique_ptr<FifoMemory> createReceiver(const FifoSizes& sizes, const Settings& settings, int peer, Descriptor* out) {
  net::Socket listener = netend::describeReceiver(Kind::kIb, sizes, settings.listenAt, 1, out);
  auto pump = std::make_unique<RecvEnd>(sizes, settings, peer, std::move(listener), out->nonce);
  out->ib = pump->endpoint();
  out->ibSlots = pump->slotsAddress();
  out->ibSlotsRkey = pump->slotsRkey();
  return std::make_unique<NetFifo>(sizes, std::move(pump), false, settings.abortFlag);
}

std::unique_ptr<FifoMemory> connectSender(const Descriptor& d, const Settings& settings, int peer) {
  if (d.nSockets != 1 || d.bytes != d.sizes.bytes()) {
    fail(ncclInternalError, "rank %d sent a verbs-transport descriptor with %u sockets and %llu bytes", peer, d.nSockets,
         static_cast<unsigned long long>(d.bytes));
  }
  auto pump = std::make_unique<SendEnd>(d.sizes, settings, peer, d);
  return std::make_unique<NetFifo>(d.sizes, std::move(pump), true, settings.abortFlag);
}

}  // namespace braid::transport::ib

#else  // built without the verbs headers

namespace braid::transport::ib {

bool available(const Settings&, std::string* why, std::string*) {
  *why = "Braid was built without the verbs headers (libibverbs-dev)";
  return false;
}

std::unique_ptr<FifoMemory> createReceiver(const FifoSizes&, const Settings&, int, Descriptor*) {
  fail(ncclInvalidUsage, "NET/IB: Braid was built without the verbs headers (libibverbs-dev)");
}

std::unique_ptr<FifoMemory> connectSender(const Descriptor&, const Settings&, int) {
  fail(ncclInvalidUsage, "NET/IB: Braid was built without the verbs headers (libibverbs-dev)");
}

}  // namespace braid::transport::ib

#endif
