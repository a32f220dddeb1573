#include "transport/net/plugin/plugin_transport.h"

#include <nccl_net.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <deque>
#include <thread>
#include <vector>

#include "core/log.h"
#include "core/process.h"
#include "core/status.h"
#include "plugin/net_plugin.h"
#include "proxy/proxy.h"
#include "topology/pci_path.h"
#include "transport/net/net_end.h"

namespace braid::transport::netplugin {

namespace {

using namespace netend;  // NOLINT: the shared end machinery is this file's vocabulary

constexpr int kTag = 0x42524e44;  // every message of a comm carries it ("BRND")
constexpr int kMaxRequests = plugin::kNetMaxRequests;
constexpr size_t kHandleScratch = 4096;  // what listen and connect get to write a handle into

// A step's payload of at most kInlineBytes travels in its record's message (the record, then
// the payload right after it): one isend / irecv pair per step. A bigger one follows as a
// message of its own, straight from and into its slot: a copy would cost more than a message.
constexpr uint64_t kInlineBytes = 16 * 1024;
constexpr uint64_t kInlinePayload = 1;  // FrameHeader::reserved of a record whose payload follows it
constexpr uint64_t kEnvelopeBytes = sizeof(FrameHeader) + kInlineBytes;

// Each end's memory after its FIFO: per step, its envelope (a record and its inline payload:
// the sender's source, the receiver's landing), then (receiver) the staging slots of LL and
// LL128 steps too big to be inline.
constexpr uint64_t kStagingOffset = kernels::kSteps * kEnvelopeBytes;

uint64_t extraBytes(const FifoSizes& sizes, bool isSend) {
  return kStagingOffset + (isSend ? 0 : kernels::kSteps * stagingCapacity(sizes));
}

/// The device a connection uses: the topology's (s.port, "name:port") when the plugin has it,
/// else s.deviceHint modulo the devices; *planned says which.
int chooseDevice(const Settings& s, bool* planned = nullptr) {
  const int n = s.session->devices();
  if (planned != nullptr) *planned = false;
  if (!s.port.empty()) {
    for (int dev = 0; dev < n; ++dev) {
      const plugin::NetDeviceProperties& p = s.session->properties(dev);
      if (p.name + ":" + std::to_string(p.port) != s.port) continue;
      if (planned != nullptr) *planned = true;
      return dev;
    }
    if (planned != nullptr) {
      BRAID_INFO(log::kNet, "NET/Plugin: %s: rank %d: net plugin %s has no device %s (the topology's port); choosing "
                 "by number", s.what.c_str(), s.rank, s.session->name().c_str(), s.port.c_str());
    }
  }
  return n > 0 ? (s.deviceHint % n + n) % n : 0;
}

/// How an end on device `dev` registers its Simple slots: NCCL_PTR_DMABUF or NCCL_PTR_CUDA
/// (GPU memory), or 0 (host memory, *why says why unless the backend has no GPU); *flush: a
/// receiver's steps need iflush.
int gpuSlotsType(const Settings& s, int dev, bool receiving, bool* flush, std::string* why) {
  *flush = false;
  why->clear();
  const GpuDirectPolicy& policy = s.gpuDirect;
  if (policy.allocator == nullptr) return 0;
  const plugin::NetDeviceProperties& p = s.session->properties(dev);
  const bool cuda = (p.ptrSupport & NCCL_PTR_CUDA) != 0;
  const bool dmabuf = (p.ptrSupport & NCCL_PTR_DMABUF) != 0 && policy.dmabuf && s.session->canRegisterDmaBuf();
  if (!cuda && !dmabuf) {
    *why = (p.ptrSupport & NCCL_PTR_DMABUF) == 0 ? "the device reports neither NCCL_PTR_CUDA nor NCCL_PTR_DMABUF"
           : policy.dmabuf                      ? "the device reports only NCCL_PTR_DMABUF and the plugin has no regMrDmaBuf"
                                                : "the device reports only NCCL_PTR_DMABUF and NCCL_DMABUF_ENABLE=0";
    return 0;
  }
  const GpuDirectChoice c = chooseGpuDirect(policy, topo::sysfsDeviceChain(p.pciPath, policy.sysRoot), receiving,
                                            p.forceFlush, s.session->canFlush());
  if (!c.slotsOnGpu) {
    *why = c.why + (c.why.find("flush") != std::string::npos && !s.session->canFlush() ? " (the plugin has no iflush)" : "");
    return 0;
  }
  *flush = c.needsFlush;
  return dmabuf ? NCCL_PTR_DMABUF : NCCL_PTR_CUDA;
}

const char* typeName(int type) {
  return type == NCCL_PTR_DMABUF ? "dma-buf" : type == NCCL_PTR_CUDA ? "NCCL_PTR_CUDA" : "host";
}

/// One posted request: a step's record or its payload.
struct Request {
  void* handle = nullptr;
  uint64_t step = 0;
  bool payload = false;  ///< else the record
  bool last = false;     ///< sender: the step's last message (its slot is free once it left)
  size_t bytes = 0;      ///< what was posted
};

/// What both ends share: the plugin's comm and memory registration, the requests in flight,
/// and how a failed call is reported.
class PluginEnd : public EndPump {
 public:
  PluginEnd(const FifoSizes& sizes, bool isSend, const Settings& s, int peer)
      : EndPump(sizes, extraBytes(sizes, isSend), isSend, s.rank, peer, ""),
        session_(s.session),
        device_(chooseDevice(s, &planned_)),
        what_(s.what) {
    const plugin::NetDeviceProperties& p = session_->properties(device_);
    where_ = session_->name() + " device " + std::to_string(device_) + " (" + p.name + ":" + std::to_string(p.port) +
             (planned_ ? ", the topology's port; " : ", by number; ") + what_;
    tracesSteps_ = true;  // (profiler plugins: proxy/op_trace.h)
    allocateGpuSlots(s);
  }
  ~PluginEnd() override {  // (an end that was never attached, or close() ran: see there)
    if (released_.load(std::memory_order_acquire) || orphaned_) return;
    auto held = proxy::hold();
    release();
  }

  /// On the destroying thread, before detach: asks the proxy thread to end the data path (the
  /// sender completes its sends and posts the end record; the receiver completes its receives
  /// up to that record, and asks for it) and to close the comms there once nothing is in
  /// flight. Waits for that, at most kFinishWait (kAbortWait when the end was not orderly).
  void finish(bool orderly) override {
    closing_.store(true, std::memory_order_release);
    proxy::kick();
    const auto until = std::chrono::steady_clock::now() + (orderly ? kFinishWait : kAbortWait);
    while (!released_.load(std::memory_order_acquire) && !broken_ && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  static constexpr std::chrono::milliseconds kFinishWait{2000};
  static constexpr std::chrono::milliseconds kAbortWait{500};

  /// After detach (the proxy no longer runs this end): closes what the proxy thread did not,
  /// with the proxy held (proxy::hold). A comm that still has requests the plugin did not
  /// fail is left open, and this end's memory with it, rather than closed under them: a plugin
  /// may then invalidate an endpoint that other comms share.
  void close() override {
    EndPump::close();
    if (released_.load(std::memory_order_acquire) || orphaned_) return;
    auto paused = proxy::hold();
    if (inFlight() > 0 && !failing_ && comm_ != nullptr) {
      BRAID_INFO(log::kNet, "NET/Plugin: rank %d %s rank %d (%s): %zu request(s) of net plugin %s still in flight at "
                 "close; its comm is left open", rank_, isSend_ ? "->" : "<-", peer_, what_.c_str(), inFlight(),
                 session_->name().c_str());
      comm_ = nullptr;
      mhandle_ = nullptr;
      gpuMhandle_ = nullptr;
      gpuSlots_ = nullptr;  // (left allocated: the plugin may still write there)
      memory_.abandon();
    }
    release();
  }

 protected:
  /// Step `step`'s envelope: its record, then its payload when that is inline.
  FrameHeader* envelope(uint64_t step) {
    return reinterpret_cast<FrameHeader*>(extra() + step % kernels::kSteps * kEnvelopeBytes);
  }

  /// False when r is not ncclSuccess: the failure is reported once settled (see settle).
  bool ok(ncclResult_t r, const char* call) {
    if (r == ncclSuccess) return true;
    if (!failing_) {
      failing_ = true;
      failingWhy_ = std::string(call) + " returned " + plugin::NetSession::resultText(r);
      failingCode_ = r == ncclRemoteError ? ncclRemoteError : ncclSystemError;
      failingSince_ = std::chrono::steady_clock::now();
    }
    return false;
  }

  /// The control socket ended without a goodbye (a loss, not a protocol error): an aborting
  /// peer says no goodbye, and its last steps may still be in the plugin's pipe, which runs
  /// apart from the control socket. The loss stands once the plugin has moved nothing for
  /// kDrain, or fails; what it still delivers lands meanwhile.
  void lost(const std::string& why, bool protocolError, ncclResult_t code = ncclRemoteError) override {
    if (!protocolError && !broken_ && !byeReceived_ && !lossDeferred_ && (comm_ != nullptr || isSend_)) {
      lossDeferred_ = true;
      lossWhy_ = why;
      lastMove_ = std::chrono::steady_clock::now();
      return;
    }
    EndPump::lost(why, protocolError, code);
  }

  /// Each pass while a loss is deferred: whether it now stands.
  void drainLoss(bool moved) {
    if (!lossDeferred_ || broken_) return;
    const auto now = std::chrono::steady_clock::now();
    if (moved) {
      lastMove_ = now;
    } else if (now - lastMove_ >= kDrain) {
      EndPump::lost(lossWhy_, false);
    }
  }
  static constexpr std::chrono::milliseconds kDrain{300};

  /// After a plugin call failed: nothing more is posted or tested. A peer that closed its comm
  /// after saying goodbye (which travels on the control socket, and may arrive after the
  /// plugin noticed the close) ends the connection quietly; otherwise, once kSettle has passed,
  /// the failure breaks the connection. True while failing.
  bool settle() {
    if (!failing_) return false;
    if (byeReceived_) {
      broken_ = true;
    } else if (lossDeferred_) {
      EndPump::lost(lossWhy_, false);  // the peer is gone: that is the news, not the plugin's error
    } else if (std::chrono::steady_clock::now() - failingSince_ >= kSettle) {
      failed(failingWhy_, failingCode_);
    }
    return true;
  }
  static constexpr std::chrono::milliseconds kSettle{200};

  /// The plugin broke the connection (or the interface): the peer's fault box says why, now.
  void failed(const std::string& why, ncclResult_t code = ncclSystemError) {
    lost("failed in net plugin " + session_->name() + " (device " + std::to_string(device_) + ", " + what_ +
             "): " + why,
         true, code);
  }

  /// Registers this end's memory with `comm`; throws naming the plugin (setup) or reports
  /// (proxy) when it cannot.
  ncclResult_t registerMemory(void* comm) {
    return session_->regMr(comm, memory_.get(), memory_.bytes(), NCCL_PTR_HOST, &mhandle_);
  }

  /// Registers the GPU slots (when there are any) with `comm`, as gpuType_ says.
  ncclResult_t registerGpuSlots(void* comm) {
    if (gpuSlots_ == nullptr) return ncclSuccess;
    const ncclResult_t r = gpuType_ == NCCL_PTR_DMABUF
                               ? session_->regMrDmaBuf(comm, gpuSlots_, gpuBytes(), NCCL_PTR_CUDA, dmabufOffset_, dmabuf_,
                                                       &gpuMhandle_)
                               : session_->regMr(comm, gpuSlots_, gpuBytes(), NCCL_PTR_CUDA, &gpuMhandle_);
    closeDmabuf();
    return r;
  }

  /// The call registerGpuSlots made, for messages.
  const char* gpuCall() const { return gpuType_ == NCCL_PTR_DMABUF ? "regMrDmaBuf" : "regMr (NCCL_PTR_CUDA)"; }

  /// Gives the GPU slots back (after a failed registration, or at the end); the Simple slots
  /// are the host memory's again.
  void freeGpuSlots() {
    closeDmabuf();
    if (gpuSlots_ != nullptr) gpu_.allocator->freeData(gpuSlots_);
    gpuSlots_ = nullptr;
    slots_ = nullptr;
    gpuType_ = 0;
    needsFlush_ = false;
  }

  uint64_t gpuBytes() const { return uint64_t(kernels::kSteps) * sizes_.simpleStepBytes; }

  /// The memory handle of what a step's payload moves through: a Simple slot or a staging one.
  /// (By where the slots are, not by the handle: a plugin may answer a registration with null.)
  void* payloadHandle(const FrameHeader& h) const {
    return (h.flags & kFrameFlagged) == 0 && gpuSlots_ != nullptr ? gpuMhandle_ : mhandle_;
  }

  /// Tests the oldest request; true (and *bytes) once it is done; false while it runs or after
  /// reporting a failure (broken_).
  bool oldestDone(size_t* bytes) {
    int done = 0;
    if (!ok(session_->test(requests_.front().handle, &done, bytes), "test")) return false;
    return done != 0;
  }

  void pop() {
    for (size_t i = 1; i < requests_.size(); ++i) requests_[i - 1] = requests_[i];
    requests_.pop_back();
  }

  void orphanMore() override {
    comm_ = nullptr;  // the parent's: hands off
    listenComm_ = nullptr;
    mhandle_ = nullptr;
    gpuMhandle_ = nullptr;
  }

  /// Requests posted and not yet done (the receiver adds its flushes).
  virtual size_t inFlight() const { return requests_.size(); }

  /// Each pass, last: once finish() asked and the data path has ended (`ended`, nothing in
  /// flight), closes the comms here, on the proxy thread.
  bool releaseWhenDone(bool ended) {
    if (!closing_.load(std::memory_order_acquire) || released_.load(std::memory_order_relaxed)) return false;
    if (!ended || inFlight() > 0) return false;
    release();
    return true;
  }

  /// Deregisters and closes the plugin's comms (once; never in a forked child).
  void release() {
    if (orphaned_ || released_.load(std::memory_order_relaxed)) return;
    if (mhandle_ != nullptr && comm_ != nullptr) session_->deregMr(comm_, mhandle_);
    mhandle_ = nullptr;
    if (gpuMhandle_ != nullptr && comm_ != nullptr) session_->deregMr(comm_, gpuMhandle_);
    gpuMhandle_ = nullptr;
    if (comm_ != nullptr) isSend_ ? session_->closeSend(comm_) : session_->closeRecv(comm_);
    comm_ = nullptr;
    if (listenComm_ != nullptr) session_->closeListen(listenComm_);
    listenComm_ = nullptr;
    freeGpuSlots();
    released_.store(true, std::memory_order_release);
  }

  /// Moves the Simple slots into GPU memory where gpuSlotsType says so (registered once the
  /// plugin's comm exists); a dma-buf the backend cannot export falls back to NCCL_PTR_CUDA
  /// where the device reports it.
  void allocateGpuSlots(const Settings& s) {
    gpu_ = s.gpuDirect;
    gpuType_ = gpuSlotsType(s, device_, !isSend_, &needsFlush_, &gpuWhy_);
    if (gpuType_ == 0) return;
    try {
      gpuSlots_ = static_cast<char*>(gpu_.allocator->allocateData(gpuBytes(), gpuType_ == NCCL_PTR_DMABUF));
      if (gpuType_ == NCCL_PTR_DMABUF) {
        dmabuf_ = gpu_.allocator->dmabufFd(gpuSlots_, gpuBytes(), &dmabufOffset_);
        if (dmabuf_ < 0 && (session_->properties(device_).ptrSupport & NCCL_PTR_CUDA) != 0) gpuType_ = NCCL_PTR_CUDA;
        if (dmabuf_ < 0 && gpuType_ == NCCL_PTR_DMABUF) fail(ncclSystemError, "the device cannot export its memory as dma-buf");
      }
    } catch (const std::exception& e) {  // (out of GPU memory, say: the host's slots serve)
      gpuWhy_ = e.what();
      freeGpuSlots();
      return;
    }
    slots_ = gpuSlots_;
  }

  void closeDmabuf() {
    if (dmabuf_ >= 0) ::close(dmabuf_);
    dmabuf_ = -1;
  }

  /// For the connection's log line: where the Simple slots are.
  std::string slotsText() const {
    if (gpu_.allocator == nullptr) return "";
    if (gpuSlots_ == nullptr) return "; Simple steps stage in host memory: " + gpuWhy_;
    return std::string("; Simple steps in GPU memory (") + typeName(gpuType_) + (needsFlush_ ? ", flushed by iflush)" : ")");
  }

  std::shared_ptr<plugin::NetSession> session_;
  bool planned_ = false;  // device_ is the topology's port
  int device_;
  std::string what_;
  std::string where_;  // "loopback device 1 (loop1:1, the topology's port; ring0": for the log
  void* comm_ = nullptr;
  void* listenComm_ = nullptr;
  void* mhandle_ = nullptr;
  GpuDirectPolicy gpu_;            // (its allocator gave gpuSlots_)
  char* gpuSlots_ = nullptr;       // the Simple slots in GPU memory, or null (host memory's)
  int gpuType_ = 0;                // how they are registered: NCCL_PTR_DMABUF, NCCL_PTR_CUDA
  void* gpuMhandle_ = nullptr;
  int dmabuf_ = -1;                // the slots' dma-buf until registered
  uint64_t dmabufOffset_ = 0;
  bool needsFlush_ = false;        // receiver: iflush each Simple step before publishing tail
  std::string gpuWhy_;             // why the slots are in host memory (the log)
  std::vector<Request> requests_;  // oldest first; at most kMaxRequests
  bool lossDeferred_ = false;  // the control socket ended without goodbye (see lost)
  std::string lossWhy_;
  std::chrono::steady_clock::time_point lastMove_{};
  bool failing_ = false;  // a plugin call failed (see settle)
  std::string failingWhy_;
  ncclResult_t failingCode_ = ncclSystemError;
  std::chrono::steady_clock::time_point failingSince_{};
  std::atomic<bool> closing_{false};   // finish() asked the proxy to end the data path
  std::atomic<bool> released_{false};  // the comms are closed (or left open: close)
  bool ended_ = false;  // sender: the end record is posted; receiver: it arrived
};

/// The sender's end: posts each published step's record and payload; frees the slot when the
/// payload has left.
class SendEnd final : public PluginEnd {
 public:
  SendEnd(const FifoSizes& sizes, const Settings& s, int peer, const Descriptor& d) : PluginEnd(sizes, true, s, peer) {
    requests_.reserve(kMaxRequests);
    const auto deadline = net::Clock::now() + s.timeout;
    // (connect may keep its state in the handle; a plugin writing past NCCL_NET_HANDLE_MAXSIZE
    // lands in the spare bytes, not on this stack)
    std::array<uint8_t, kHandleScratch> handle{};
    std::memcpy(handle.data(), d.netHandle, plugin::kNetHandleBytes);
    net::AbortSource abort(s.abortFlag);
    // The control socket's hello goes out right after the first connect call, and the receiver
    // calls accept only once it has it (RecvEnd::progressAccept): some plugins' accept blocks
    // until the connection has come (Google's FastSocket), which works under NCCL because a
    // setup round calls its senders' connect before its receivers' accept. Called from the
    // proxy thread before that, such an accept would hold the proxy, and with it the
    // proxy::hold this connect waits for, on both ranks at once.
    connectOnce(s, peer, handle.data());
    const net::SocketAddress to = net::SocketAddress::unpack(d.listen);
    net::Socket sock = net::Socket::connect(to, deadline, s.abortFlag);
    const Hello hello{kHelloMagic, kWireVersion, d.nonce, s.commHash, s.rank, peer, 0, 1, {}};
    sock.sendAll(&hello, sizeof(hello), deadline, s.abortFlag);
    while (comm_ == nullptr) {  // connect must not block: called until it gives a comm
      if (abort.raised()) fail(ncclSystemError, "NET/Plugin: rank %d: connecting to rank %d was aborted", s.rank, peer);
      if (net::Clock::now() > deadline) {
        fail(ncclSystemError, "NET/Plugin: rank %d: net plugin %s's connect to rank %d did not complete within %lld s",
             s.rank, session_->name().c_str(), peer, static_cast<long long>(s.timeout.count()));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      connectOnce(s, peer, handle.data());
    }
    auto paused = proxy::hold();
    if (const ncclResult_t r = registerMemory(comm_); r != ncclSuccess) {
      fail(ncclSystemError, "NET/Plugin: rank %d: net plugin %s cannot register %llu bytes of host memory: regMr returned %s",
           s.rank, session_->name().c_str(), static_cast<unsigned long long>(memory_.bytes()),
           plugin::NetSession::resultText(r).c_str());
    }
    if (const ncclResult_t r = registerGpuSlots(comm_); r != ncclSuccess) {
      // (the FIFO is not handed out yet: its Simple slots may still be the host memory's)
      gpuWhy_ = std::string(gpuCall()) + " of GPU memory returned " + plugin::NetSession::resultText(r);
      BRAID_INFO(log::kNet, "NET/Plugin: rank %d -> rank %d: net plugin %s (device %d, %s): %s; staging through host "
                 "memory", s.rank, peer, session_->name().c_str(), device_, s.what.c_str(), gpuWhy_.c_str());
      gpuMhandle_ = nullptr;
      freeGpuSlots();
    }
    paused.unlock();
    peerName_ = to.toString();
    std::vector<net::Socket> sockets;
    sockets.push_back(std::move(sock));
    adoptSockets(std::move(sockets));
    BRAID_INFO(log::kNet, "NET/Plugin: rank %d -> rank %d through %s; control %s)%s", s.rank, peer, where_.c_str(),
               peerName_.c_str(), slotsText().c_str());
  }

  /// One call of the plugin's connect, with the proxy paused (setup never runs concurrently
  /// with the data calls it makes on the plugin's devices); throws when it fails.
  void connectOnce(const Settings& s, int peer, void* handle) {
    ncclResult_t r;
    {
      auto paused = proxy::hold();
      r = session_->connect(device_, handle, &comm_);
    }
    if (r != ncclSuccess) {
      fail(r == ncclRemoteError ? ncclRemoteError : ncclSystemError,
           "NET/Plugin: rank %d cannot connect to rank %d through net plugin %s (device %d, %s): connect returned %s",
           s.rank, peer, session_->name().c_str(), device_, s.what.c_str(), plugin::NetSession::resultText(r).c_str());
    }
  }

  bool progress(const pollfd* polled) override {
    polled_ = polled;
    if (broken_ || released_.load(std::memory_order_relaxed)) return false;  // (closed: until detach)
    bool moved = readControl();  // the receiver's steps landed, fault notice and goodbye
    if (!broken_ && !settle()) {
      moved |= reap();
      moved |= freeSlots();
      moved |= post();
      moved |= postEnd();
      drainLoss(moved);
    }
    if (broken_) return true;
    if (!writers_[0].busy() && !startFault() && !startAnnounce()) startBye();  // drain() made sure no data is left
    if (write(0, &moved)) noteByeWritten();
    moved |= releaseWhenDone(ended_ || comm_ == nullptr);
    return moved;
  }

 private:
  /// Completed sends, oldest first: a step's slot is free once its last message left.
  bool reap() {
    bool moved = false;
    size_t bytes = 0;
    while (!failing_ && !requests_.empty() && oldestDone(&bytes)) {
      const Request r = requests_.front();
      pop();
      moved = true;
      if (r.last) sent_ = r.step + 1;
    }
    return moved;
  }

  /// A slot is free once its step has left and the receiver says it landed: a sender that
  /// ends (and exits) after its last step thus never leaves steps in the plugin's pipe.
  bool freeSlots() {
    const uint64_t head = std::min(sent_, readyStep_);
    if (head == head_) return false;
    head_ = head;
    kernels::storeRelease(conn_.head, head_);
    if (trace_.armed()) trace_.stepsDone(head_);
    return true;
  }

  /// This end closes, or the receiver said it does (its goodbye, or a "ready" with
  /// kReadyEnding): no step is begun any more.
  bool ending() const { return closing_.load(std::memory_order_acquire) || byeReceived_ || endAsked_; }

  /// Once ending, with no step half-posted and nothing in flight: the end record, a kBye
  /// record in step next_'s place. It completes the receive the receiver keeps posted for its
  /// next step, so that neither end closes its comm under a request.
  bool postEnd() {
    if (ended_ || failing_ || broken_ || comm_ == nullptr || !ending() || stage_ != kNone || !requests_.empty()) {
      return false;
    }
    FrameHeader* record = envelope(next_);
    *record = frame(kBye);
    record->step = next_;
    void* handle = nullptr;
    if (!ok(session_->isend(comm_, record, sizeof(FrameHeader), kTag, mhandle_, nullptr, &handle), "isend")) return true;
    if (handle == nullptr) return false;
    requests_.push_back(Request{handle, next_, false, false, sizeof(FrameHeader)});
    ended_ = true;
    return true;
  }

  /// Posts what the kernel published, as far as the request limit and the plugin allow.
  bool post() {
    bool moved = false;
    const uint64_t tail = kernels::loadAcquire(conn_.tail);
    while (!broken_ && !failing_ && !ended_ && next_ < tail && static_cast<int>(requests_.size()) < kMaxRequests) {
      FrameHeader* record = envelope(next_);
      if (stage_ == kNone) {
        if (ending()) break;  // (a step begun is finished: the receiver expects its payload)
        if (!stepHeader(next_, record, &payload_)) return true;
        record->reserved = inlinable(*record) ? kInlinePayload : 0;
        if (record->reserved == kInlinePayload) std::memcpy(record + 1, payload_, record->bytes);
        stepParent_ = nullptr;
        if (trace_.armed()) {
          trace_.stepTaken(next_, record->bytes);  // (until the receiver says it landed)
          stepParent_ = trace_.netParent(next_);
        }
        stage_ = kRecord;
      }
      const bool isPayload = stage_ == kPayload;
      const bool inlined = record->reserved == kInlinePayload;
      void* data = isPayload ? const_cast<char*>(payload_) : static_cast<void*>(record);
      const size_t bytes = isPayload ? record->bytes : sizeof(FrameHeader) + (inlined ? record->bytes : 0);
      void* handle = nullptr;
      void* mhandle = isPayload ? payloadHandle(*record) : mhandle_;
      if (!ok(session_->isend(comm_, data, bytes, kTag, mhandle, stepParent_, &handle), "isend")) return true;
      if (handle == nullptr) break;  // not now: again at the next pass
      const bool last = isPayload || inlined || record->bytes == 0;
      requests_.push_back(Request{handle, next_, isPayload, last, bytes});
      moved = true;
      if (last) {
        stage_ = kNone;
        ++next_;
      } else {
        stage_ = kPayload;
      }
    }
    return moved;
  }

  /// Whether step h's payload goes inline: small enough, and in host memory at both ends (LL
  /// and LL128 lines always are; Simple slots are unless a GPU backend may keep them on the GPU).
  bool inlinable(const FrameHeader& h) const {
    if (h.bytes == 0 || h.bytes > kInlineBytes) return false;
    return (h.flags & kFrameFlagged) != 0 || (gpuSlots_ == nullptr && gpu_.allocator == nullptr);
  }

  enum Stage { kNone, kRecord, kPayload };
  Stage stage_ = kNone;  // of step next_: what is to be posted next
  const char* payload_ = nullptr;
  void* stepParent_ = nullptr;  // step next_'s phandle while its trace is armed (else none)
  uint64_t next_ = 0;
  uint64_t sent_ = 0;  // steps whose messages have all left
  uint64_t head_ = 0;  // steps freed: sent and landed
};

/// The receiver's end: accepts the sender's comm and control socket, then receives each step's
/// record and payload in order and publishes tail.
class RecvEnd final : public PluginEnd {
 public:
  RecvEnd(const FifoSizes& sizes, const Settings& s, int peer, net::Socket listener, uint64_t nonce, uint8_t* handle)
      : PluginEnd(sizes, false, s, peer),
        acceptor_(s.rank, peer, std::move(listener), nonce, s.commHash, 1, s.timeout),
        deadline_(std::chrono::steady_clock::now() + s.timeout),
        timeout_(s.timeout) {
    requests_.reserve(kMaxRequests);
    std::array<uint8_t, kHandleScratch> scratch{};  // (see SendEnd: a plugin that writes too much)
    ncclResult_t r;
    {
      auto paused = proxy::hold();  // (setup never concurrent with the proxy's data calls)
      r = session_->listen(device_, scratch.data(), &listenComm_);
    }
    std::memcpy(handle, scratch.data(), plugin::kNetHandleBytes);
    if (r != ncclSuccess || listenComm_ == nullptr) {
      fail(ncclSystemError, "NET/Plugin: rank %d cannot listen on net plugin %s device %d (%s): listen returned %s%s",
           s.rank, session_->name().c_str(), device_, s.what.c_str(), plugin::NetSession::resultText(r).c_str(),
           r == ncclSuccess ? " and no comm" : "");
    }
  }

  int device() const { return device_; }

  void pollSet(std::vector<pollfd>* fds) override {
    if (acceptor_.listening()) return acceptor_.pollSet(fds);
    EndPump::pollSet(fds);
  }

  bool progress(const pollfd* polled) override {
    polled_ = polled;
    if (broken_ || released_.load(std::memory_order_relaxed)) return false;  // (closed: until detach)
    if (!connected_) {
      if (releaseWhenDone(true)) return true;  // (closing before the sender came: nothing posted)
      return settle() || progressAccept();
    }
    bool moved = readControl();  // the sender's announcement, fault notice and goodbye
    if (!broken_ && !settle()) {
      moved |= reap();
      moved |= landArrived();
      moved |= post();
      drainLoss(moved);
    }
    if (broken_) return true;
    if (!writers_[0].busy() && !startFault() && !startLanded() && !startEnding()) startBye();
    if (write(0, &moved)) noteByeWritten();
    moved |= releaseWhenDone(!payloadDue_);
    if (trace_.armed()) trace_.stepsDone(kernels::loadAcquire(conn_.head));  // (freed by the kernel)
    return moved;
  }

 private:
  /// Socket 0, when idle: "ready" with the steps landed since the last one said (the sender
  /// frees its slots by them).
  bool startLanded() {
    if (landed_ == said_) return false;
    FrameHeader h = frame(kReady);
    h.step = landed_;
    writers_[0].start(h, nullptr);
    said_ = landed_;
    return true;
  }

  /// Socket 0, when idle, once this end closes with a receive posted: a "ready" with
  /// kReadyEnding, which asks the sender for its end record (that receive's completion) even
  /// when this end says no goodbye (an abort).
  bool startEnding() {
    if (endingSaid_ || ended_ || !closing_.load(std::memory_order_acquire) || requests_.empty()) return false;
    FrameHeader h = frame(kReady);
    h.step = landed_;
    h.reserved = kReadyEnding;
    writers_[0].start(h, nullptr);
    endingSaid_ = true;
    return true;
  }

  size_t inFlight() const override { return requests_.size() + static_cast<size_t>(flushing_); }

  void orphanMore() override {
    PluginEnd::orphanMore();
    acceptor_.orphan();
  }

  /// The control socket's hello, then the plugin's accept: the hello says the sender has
  /// called connect (see SendEnd), so an accept that blocks until the connection comes (as
  /// some plugins' does) blocks only while it comes.
  bool progressAccept() {
    bool moved = false;
    if (acceptor_.listening()) {
      const Acceptor::State state = acceptor_.progress(&moved);
      if (state == Acceptor::State::kTimedOut) {
        lost(acceptor_.timeoutText(), true);
        return true;
      }
      if (state == Acceptor::State::kComplete) {
        adoptSockets(acceptor_.takeSockets());
        peerName_ = sockets_[0].peerAddress().toString();
      }
    }
    if (comm_ == nullptr && !acceptor_.listening()) {
      if (!ok(session_->accept(listenComm_, &comm_), "accept")) return true;
      if (comm_ != nullptr) {
        moved = true;
        if (!ok(registerMemory(comm_), "regMr")) return true;
        if (!ok(registerGpuSlots(comm_), gpuCall())) return true;
        session_->closeListen(listenComm_);
        listenComm_ = nullptr;
      } else if (std::chrono::steady_clock::now() > deadline_) {
        failed("accept gave no connection within " + std::to_string(timeout_.count()) + " s");
        return true;
      }
    }
    if (comm_ != nullptr && !acceptor_.listening()) {
      connected_ = true;
      BRAID_INFO(log::kNet, "NET/Plugin: rank %d <- rank %d through %s; control %s)%s", rank_, peer_, where_.c_str(),
                 peerName_.c_str(), slotsText().c_str());
    }
    return moved;
  }

  /// Completed receives, oldest first: a record is checked (its payload is posted next), a
  /// payload lands.
  bool reap() {
    bool moved = false;
    size_t bytes = 0;
    while (!broken_ && !failing_ && !requests_.empty() && oldestDone(&bytes)) {
      const Request r = requests_.front();
      pop();
      moved = true;
      const FrameHeader& h = *envelope(r.step);
      // What a plugin reports of a receive's size is not needed (many never write it): the
      // record says the payload's size, and checkStep checks the record. Only a size beyond
      // what was posted (the plugin overran its buffer) is a fault.
      if (bytes != plugin::kNetSizeUnknown && bytes > r.bytes) {
        failed("step " + std::to_string(r.step) + "'s " + (r.payload ? "payload" : "record") + " arrived with " +
               std::to_string(bytes) + " bytes into a receive of " + std::to_string(r.bytes));
        return true;
      }
      if (!r.payload && h.magic == kFrameMagic && h.type == kBye && h.step == r.step) {
        ended_ = true;  // the sender's end record: nothing follows on this comm
        recordPending_ = false;
        continue;
      }
      if (!r.payload) {
        if (!checkStep(h, r.step, "through net plugin " + session_->name())) return true;
        payloadParent_ = nullptr;
        if (trace_.armed()) {
          trace_.stepTaken(r.step, h.bytes);
          payloadParent_ = trace_.netParent(r.step);
        }
        recordPending_ = false;
        if (h.reserved == kInlinePayload) {
          if (!landInline(h)) return true;
          arrived_.push_back(Arrival{r.step, nullptr});
        } else if (h.bytes > 0) {
          payloadDue_ = true;
        } else {
          arrived_.push_back(Arrival{r.step, nullptr});
        }
      } else {
        void* flush = nullptr;
        if (needsFlush_ && (h.flags & kFrameFlagged) == 0) {  // (a Simple step, in GPU memory)
          char* at = conn_.simple + r.step % kernels::kSteps * conn_.simpleStepBytes;
          if (!ok(session_->iflush(comm_, at, h.bytes, gpuMhandle_, &flush), "iflush")) return true;
          flushing_ += flush != nullptr ? 1 : 0;
        }
        arrived_.push_back(Arrival{r.step, flush});
      }
    }
    return moved;
  }

  /// Lands the steps that arrived, in order, each once its flush (if it has one) is done: only
  /// then may the kernel read what the NIC wrote into GPU memory.
  bool landArrived() {
    bool moved = false;
    while (!broken_ && !failing_ && !arrived_.empty()) {
      const Arrival a = arrived_.front();
      if (a.flush != nullptr) {
        int done = 0;
        size_t bytes = 0;
        if (!ok(session_->test(a.flush, &done, &bytes), "test (of an iflush)")) return true;
        if (done == 0) break;
        --flushing_;
      }
      arrived_.pop_front();
      land(*envelope(a.step));
      moved = true;
    }
    return moved;
  }

  /// An inline payload: a Simple step's goes to its slot now (LL and LL128 lines land from the
  /// envelope, as from staging). False after reporting one that cannot be inline here.
  bool landInline(const FrameHeader& h) {
    if (h.bytes > kInlineBytes || ((h.flags & kFrameFlagged) == 0 && gpuSlots_ != nullptr)) {
      lost("sent step " + std::to_string(h.step) + " of " + std::to_string(h.bytes) + " bytes inline through net plugin " +
               session_->name() + ", which this end cannot take",
           true);
      return false;
    }
    if ((h.flags & kFrameFlagged) == 0) {
      std::memcpy(conn_.simple + h.step % kernels::kSteps * conn_.simpleStepBytes, &h + 1, h.bytes);
    }
    return true;
  }

  /// Step h is here: its signature, its LL lines from staging (or its envelope), then tail.
  void land(const FrameHeader& h) {
    landStep(h, h.reserved == kInlinePayload ? reinterpret_cast<const char*>(&h + 1) : staging(h.step));
    landed_ = h.step + 1;
    kernels::storeRelease(conn_.tail, landed_);
    if (trace_.armed()) trace_.stepLanded(h.step, h.bytes);
  }

  char* staging(uint64_t step) { return extra() + kStagingOffset + step % kernels::kSteps * stagingCapacity(sizes_); }

  /// The next receive: a due payload, else the next record once its slot is free.
  bool post() {
    bool moved = false;
    while (!broken_ && !failing_ && static_cast<int>(requests_.size()) + flushing_ < kMaxRequests) {
      void* handle = nullptr;
      if (payloadDue_) {
        const uint64_t step = nextRecord_ - 1;
        const FrameHeader& h = *envelope(step);
        char* into = (h.flags & kFrameFlagged) ? staging(step) : conn_.simple + step % kernels::kSteps * conn_.simpleStepBytes;
        if (!ok(session_->irecv(comm_, into, h.bytes, kTag, payloadHandle(h), payloadParent_, &handle), "irecv")) return true;
        if (handle == nullptr) break;
        requests_.push_back(Request{handle, step, true, true, h.bytes});
        payloadDue_ = false;
      } else {
        if (recordPending_ || ended_) break;  // its answer decides what comes next; or nothing does
        // The slot must be free: the kernel's (head), or once closing (the kernel is gone) landed.
        const uint64_t freed = closing_.load(std::memory_order_acquire) ? landed_ : kernels::loadAcquire(conn_.head);
        if (freed + kernels::kSteps <= nextRecord_) break;
        FrameHeader* record = envelope(nextRecord_);
        // No phandle: the step's ProxyStep begins when this record arrives, and its slot may
        // still hold the step before it, whose end the kernel has just freed.
        if (!ok(session_->irecv(comm_, record, kEnvelopeBytes, kTag, mhandle_, nullptr, &handle), "irecv")) {
          return true;
        }
        if (handle == nullptr) break;
        requests_.push_back(Request{handle, nextRecord_, false, false, kEnvelopeBytes});
        recordPending_ = true;
        ++nextRecord_;
      }
      moved = true;
    }
    return moved;
  }

  Acceptor acceptor_;
  std::chrono::steady_clock::time_point deadline_;
  std::chrono::seconds timeout_;
  bool connected_ = false;
  bool recordPending_ = false;  // the record of step nextRecord_ - 1 is posted, not yet checked
  bool payloadDue_ = false;     // step nextRecord_ - 1's payload is to be posted
  void* payloadParent_ = nullptr;  // its phandle while its trace is armed (else none)
  uint64_t nextRecord_ = 0;
  /// A step whose messages are all in, waiting for its flush or for earlier steps to land.
  struct Arrival {
    uint64_t step;
    void* flush;  // its iflush request, or null (none, or done at once)
  };
  std::deque<Arrival> arrived_;  // oldest first
  int flushing_ = 0;             // flush requests in arrived_ (they count towards kMaxRequests)
  uint64_t landed_ = 0;  // steps landed (tail)
  uint64_t said_ = 0;    // landed_ as last sent to the sender
  bool endingSaid_ = false;  // the "ready" with kReadyEnding is out
};

}  // namespace

std::unique_ptr<FifoMemory> createReceiver(const FifoSizes& sizes, const Settings& settings, int peer, Descriptor* out) {
  net::Socket listener = netend::describeReceiver(Kind::kPlugin, sizes, settings.listenAt, 1, out);
  auto pump = std::make_unique<RecvEnd>(sizes, settings, peer, std::move(listener), out->nonce, out->netHandle);
  out->netDevice = pump->device();
  return std::make_unique<NetFifo>(sizes, std::move(pump), false, settings.abortFlag);
}

std::unique_ptr<FifoMemory> connectSender(const Descriptor& d, const Settings& settings, int peer) {
  if (d.nSockets != 1 || d.bytes != d.sizes.bytes()) {
    fail(ncclInternalError, "rank %d sent a net-plugin descriptor with %u sockets and %llu bytes", peer, d.nSockets,
         static_cast<unsigned long long>(d.bytes));
  }
  const uint64_t biggest = std::max<uint64_t>({d.sizes.simpleStepBytes, stagingCapacity(d.sizes), kEnvelopeBytes});
  const uint64_t limit = settings.session->properties(chooseDevice(settings)).maxP2pBytes;
  if (limit != 0 && limit < biggest) {
    fail(ncclInvalidUsage, "NET/Plugin: net plugin %s moves at most %llu bytes per transfer, less than a FIFO step's "
         "%llu (lower NCCL_BUFFSIZE)", settings.session->name().c_str(), static_cast<unsigned long long>(limit),
         static_cast<unsigned long long>(biggest));
  }
  auto pump = std::make_unique<SendEnd>(d.sizes, settings, peer, d);
  return std::make_unique<NetFifo>(d.sizes, std::move(pump), true, settings.abortFlag);
}

}  // namespace braid::transport::netplugin
