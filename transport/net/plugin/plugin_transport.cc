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
#include "transport/net/net_end.h"
#include "transport/net/plugin/plugin_end.h"

namespace braid::transport::netplugin {

namespace {

using namespace detail;  // NOLINT: the ends' shared part (plugin_end.h)

/// The sender's end: posts each published step's record and payload; frees the slot when the
/// payload has left.
class SendEnd final : public PluginEnd {
 public:
  SendEnd(const FifoSizes& sizes, const Settings& s, int peer, const Descriptor& d) : PluginEnd(sizes, true, s, peer) {
    requests_.reserve(kMaxRequests);
    peerGpuSlots_ = d.netSlotsOnGpu != 0;
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
        record->reserved = together(*record) ? kInlinePayload : 0;
        char* behind = inlinePayload(record);  // (a Simple step in host memory is there already)
        if (record->reserved == kInlinePayload && payload_ != behind) std::memcpy(behind, payload_, record->bytes);
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

  /// Whether step h's payload travels in its record's message: LL and LL128 lines always
  /// (copied behind the record: their slots have no room in front), a Simple step when its
  /// slots are in host memory at both ends (the kernel wrote it right behind the record).
  bool together(const FrameHeader& h) const {
    if (h.bytes == 0) return false;
    return (h.flags & kFrameFlagged) != 0 || (gpuSlots_ == nullptr && !peerGpuSlots_);
  }

  enum Stage { kNone, kRecord, kPayload };
  Stage stage_ = kNone;  // of step next_: what is to be posted next
  const char* payload_ = nullptr;
  bool peerGpuSlots_ = false;  // the receiver's Simple slots are in GPU memory (its descriptor)
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
  bool slotsOnGpu() const { return gpuSlots_ != nullptr; }

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
          if (!inlineAllowed(h)) return true;
          arrived_.push_back(Arrival{r.step, nullptr});
        } else if (h.bytes > 0) {
          payloadDue_ = true;
        } else {
          arrived_.push_back(Arrival{r.step, nullptr});
        }
      } else {
        void* flush = nullptr;
        if (needsFlush_ && (h.flags & kFrameFlagged) == 0) {  // (a Simple step, in GPU memory)
          char* at = kernels::simpleSlot(conn_, r.step);
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

  /// A payload that came in its record's message is in place: a Simple step's in its slot (the
  /// envelope's room), LL and LL128 lines behind the record, landed from there. False after
  /// reporting one that cannot come so here (a Simple step, where the slots are in GPU memory).
  bool inlineAllowed(const FrameHeader& h) {
    if ((h.flags & kFrameFlagged) != 0 || gpuSlots_ == nullptr) return true;
    lost("sent step " + std::to_string(h.step) + " of " + std::to_string(h.bytes) + " bytes inline through net plugin " +
             session_->name() + ", which this end cannot take",
         true);
    return false;
  }

  /// Step h (its record, in its envelope) is here: its signature, its LL lines from behind the
  /// record, then tail.
  void land(FrameHeader& h) {
    landStep(h, inlinePayload(&h));
    landed_ = h.step + 1;
    kernels::storeRelease(conn_.tail, landed_);
    if (trace_.armed()) trace_.stepLanded(h.step, h.bytes);
  }

  /// The next receive: a due payload, else the next record once its slot is free.
  bool post() {
    bool moved = false;
    while (!broken_ && !failing_ && static_cast<int>(requests_.size()) + flushing_ < kMaxRequests) {
      void* handle = nullptr;
      if (payloadDue_) {
        const uint64_t step = nextRecord_ - 1;
        FrameHeader& h = *envelope(step);
        char* into = (h.flags & kFrameFlagged) ? inlinePayload(&h) : kernels::simpleSlot(conn_, step);
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
        // While armed, the step's ProxyStep begins with its receive (RecvWait, as NCCL's: its
        // bytes are known when the record arrives), once the step the kernel freed in its slot
        // has ended; the receive is its NetPlugin event's parent.
        void* parent = nullptr;
        if (trace_.armed()) {
          trace_.stepsDone(freed);
          trace_.stepTaken(nextRecord_, 0);
          parent = trace_.netParent(nextRecord_);
        }
        const size_t bytes = envelopeBytes(sizes_);  // (the record, and the payload that may follow it)
        if (!ok(session_->irecv(comm_, record, bytes, kTag, mhandle_, parent, &handle), "irecv")) {
          return true;
        }
        if (handle == nullptr) break;
        requests_.push_back(Request{handle, nextRecord_, false, false, bytes});
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
  out->netSlotsOnGpu = pump->slotsOnGpu() ? 1 : 0;
  return std::make_unique<NetFifo>(sizes, std::move(pump), false, settings.abortFlag);
}

std::unique_ptr<FifoMemory> connectSender(const Descriptor& d, const Settings& settings, int peer) {
  if (d.nSockets != 1 || d.bytes != d.sizes.bytes()) {
    fail(ncclInternalError, "rank %d sent a net-plugin descriptor with %u sockets and %llu bytes", peer, d.nSockets,
         static_cast<unsigned long long>(d.bytes));
  }
  const uint64_t biggest = envelopeBytes(d.sizes);
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
