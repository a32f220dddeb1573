#include "transport/net/socket/socket_transport.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/log.h"
#include "core/status.h"
#include "proxy/proxy.h"

namespace braid::transport::socket {

namespace {

constexpr uint32_t kHelloMagic = 0x484e5242;  // "BRNH"
constexpr uint32_t kFrameMagic = 0x464e5242;  // "BRNF"
constexpr uint32_t kWireVersion = 1;
constexpr int kMaxSockets = 64;

/// What the sender presents on each socket it opens.
struct Hello {
  uint32_t magic;
  uint32_t version;
  uint64_t nonce;
  uint64_t commHash;
  int32_t from;
  int32_t to;
  uint32_t index;
  uint32_t count;
};
static_assert(sizeof(Hello) == 40);

enum FrameType : uint32_t { kData = 1, kAnnounce = 2, kFault = 3, kBye = 4 };
enum FrameFlags : uint32_t { kFrameLL = 1, kFrameSig = 2 };

struct FrameHeader {
  uint32_t magic;
  uint32_t type;
  uint64_t step;       ///< kData: the FIFO step
  uint32_t bytes;      ///< payload bytes after the header
  uint32_t flags;      ///< FrameFlags
  uint64_t reserved;
  kernels::SigSlot sig;  ///< kData with kFrameSig: the step's signature slot; kAnnounce: sig.sig
};
static_assert(sizeof(FrameHeader) == 64 && std::is_trivially_copyable_v<FrameHeader>);

/// One end's FIFO memory, on this process's heap.
class LocalMemory {
 public:
  explicit LocalMemory(uint64_t bytes) : bytes_((bytes + 4095) / 4096 * 4096) {
    memory_ = static_cast<char*>(std::aligned_alloc(4096, bytes_));
    if (memory_ == nullptr) fail(ncclSystemError, "cannot allocate %llu bytes of FIFO memory", (unsigned long long)bytes);
    std::memset(memory_, 0, bytes_);
  }
  ~LocalMemory() { std::free(memory_); }
  LocalMemory(const LocalMemory&) = delete;
  LocalMemory& operator=(const LocalMemory&) = delete;
  char* get() const { return memory_; }

 private:
  uint64_t bytes_;
  char* memory_;
};

/// Writes one frame (header, then payload) to a non-blocking socket, as far as it goes.
class FrameWriter {
 public:
  bool busy() const { return done_ < total_; }
  void start(const FrameHeader& h, const char* payload) {
    header_ = h;
    payload_ = payload;
    total_ = sizeof(FrameHeader) + h.bytes;
    done_ = 0;
  }
  /// Bytes written (0 when the socket is full); -1 when the connection is broken.
  ssize_t pump(int fd) {
    if (!busy()) return 0;
    iovec iov[2];
    int n = 0;
    if (done_ < sizeof(FrameHeader)) {
      iov[n++] = {reinterpret_cast<char*>(&header_) + done_, sizeof(FrameHeader) - done_};
      if (header_.bytes > 0) iov[n++] = {const_cast<char*>(payload_), header_.bytes};
    } else {
      const size_t off = done_ - sizeof(FrameHeader);
      iov[n++] = {const_cast<char*>(payload_) + off, header_.bytes - off};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    const ssize_t w = ::sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w < 0) return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? 0 : -1;
    done_ += static_cast<size_t>(w);
    return w;
  }
  const FrameHeader& header() const { return header_; }

 private:
  FrameHeader header_{};
  const char* payload_ = nullptr;
  size_t total_ = 0;
  size_t done_ = 0;
};

/// Reads frames from a non-blocking socket: the header, then the payload into wherever the
/// owner decided once it saw the header.
struct FrameReader {
  FrameHeader header{};
  size_t headerDone = 0;
  char* payload = nullptr;  ///< null until the owner accepts the header
  size_t payloadDone = 0;

  bool headerComplete() const { return headerDone == sizeof(FrameHeader); }
  void reset() {
    headerDone = 0;
    payload = nullptr;
    payloadDone = 0;
  }
};

/// Reads up to size bytes: >0 read, 0 nothing yet, -1 closed or broken.
ssize_t readSome(int fd, void* into, size_t size) {
  if (size == 0) return 0;
  const ssize_t r = ::recv(fd, into, size, MSG_DONTWAIT);
  if (r > 0) return r;
  if (r == 0) return -1;
  return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? 0 : -1;
}

FrameHeader frame(uint32_t type) {
  FrameHeader h{};
  h.magic = kFrameMagic;
  h.type = type;
  return h;
}

/// What both ends' pumps share: the sockets, the control frames (announcement, fault, bye)
/// and the way a broken connection is reported.
class EndPump : public proxy::Pump {
 public:
  EndPump(const FifoSizes& sizes, bool isSend, int rank, int peer, std::string peerName)
      : memory_(sizes.bytes()), sizes_(sizes), isSend_(isSend), rank_(rank), peer_(peer), peerName_(std::move(peerName)) {}

  /// The FIFO memory of this end.
  char* base() const { return memory_.get(); }

  void pollSet(std::vector<pollfd>* fds) override {
    polledAt_.assign(sockets_.size(), -1);
    if (broken_) return;
    const size_t base = fds->size();  // progress() gets the entries from here on
    for (size_t k = 0; k < sockets_.size(); ++k) {
      if (closed_[k]) continue;
      // A reader whose frame waits for a free slot leaves the data in the socket: waking for
      // it would only spin.
      const bool waiting = readers_[k].headerComplete() && readers_[k].payload == nullptr;
      const bool reads = !isSend_ || k == 0;  // a sender reads control frames on socket 0 only
      const short events = static_cast<short>((reads && !waiting ? POLLIN : 0) | (writers_[k].busy() ? POLLOUT : 0));
      if (events == 0) continue;  // even then ppoll would report a hang-up, and spin on it
      polledAt_[k] = static_cast<int>(fds->size() - base);
      fds->push_back({sockets_[k].fd(), events, 0});
    }
  }
  void bindHandle(const kernels::ConnHandle& h) { conn_ = h; }
  void setFaultBoxes(FaultBox* mine, FaultBox* theirs) {
    mine_ = mine;
    theirs_ = theirs;
  }

  /// Before detach: whether this end may say goodbye. A sender first waits until every step
  /// its kernel published is in a socket (the kernel counts a step done once it is in the
  /// FIFO), the connection breaks, or nothing has moved for 1 s (a receiver that stopped
  /// reading). No goodbye when steps were left behind or the communicator was aborted: the
  /// peer then sees a lost connection, which is the truth.
  bool drain(const uint32_t* abortFlag) {
    auto aborted = [&] { return abortFlag != nullptr && kernels::loadAcquire(const_cast<uint32_t*>(abortFlag)) != 0; };
    if (orphaned_ || broken_ || aborted()) return false;
    if (!isSend_) return true;
    uint64_t head = kernels::loadAcquire(conn_.head);
    auto lastMove = std::chrono::steady_clock::now();
    while (head < kernels::loadAcquire(conn_.tail)) {
      if (broken_ || aborted()) return false;
      if (std::chrono::steady_clock::now() - lastMove > std::chrono::seconds(1)) {
        BRAID_WARN("rank %d: %llu step(s) to rank %d were never sent: the receiver stopped reading", rank_,
                   static_cast<unsigned long long>(kernels::loadAcquire(conn_.tail) - head), peer_);
        return false;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      const uint64_t now = kernels::loadAcquire(conn_.head);
      if (now != head) head = now, lastMove = std::chrono::steady_clock::now();
    }
    return true;
  }

  /// Before detach, on the destroying thread: the proxy sends the goodbye on socket 0 after
  /// whatever frame is in progress there; waits (at most 1 s) until it is in the socket.
  void sayGoodbye() {
    if (sockets_.empty()) return;  // a receiver whose sender never connected
    bye_.store(kByeWanted, std::memory_order_release);
    proxy::kick();
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (bye_.load(std::memory_order_acquire) != kByeDone && !broken_ && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }

  /// After detach: no more writes; reads (a bounded amount of) what the peer sent and nobody
  /// will read, since closing with unread data resets the connection and could discard what
  /// the peer has yet to read.
  void close() {
    if (orphaned_) return;
    char sink[4096];
    for (net::Socket& sock : sockets_) {
      if (!sock.valid()) continue;
      ::shutdown(sock.fd(), SHUT_WR);
      for (int i = 0; i < 64 && readSome(sock.fd(), sink, sizeof sink) > 0; ++i) {
      }
    }
  }

  /// In a forked child: these sockets are the parent's too. Closes this process's copies (no
  /// shutdown, which would end the parent's connection) and never writes or reads again.
  void orphan() override {
    orphaned_ = true;
    for (net::Socket& sock : sockets_) sock.close();
    orphanMore();
  }

 protected:
  void adoptSockets(std::vector<net::Socket> sockets) {
    sockets_ = std::move(sockets);
    writers_.assign(sockets_.size(), FrameWriter{});
    closed_.assign(sockets_.size(), false);
    readers_.assign(sockets_.size(), FrameReader{});
  }

  /// The connection broke or spoke nonsense: the peer's fault box says so (unless the peer
  /// said goodbye, or already sent its own reason). Nothing moves on this end afterwards.
  void lost(const std::string& why, bool protocolError) {
    if (broken_) return;
    broken_ = true;
    if (byeReceived_ && !protocolError) return;
    if (kernels::loadAcquire(&theirs_->raised) != 0) return;
    theirs_->rank = peer_;
    theirs_->code = static_cast<uint32_t>(ncclRemoteError);
    snprintf(theirs_->text, sizeof theirs_->text, "the network connection %s rank %d (%s) %s",
             isSend_ ? "to" : "from", peer_, peerName_.c_str(), why.c_str());
    kernels::storeRelease(&theirs_->raised, protocolError ? kFaultRaised : kFaultLost);
    BRAID_WARN("rank %d: %s", rank_, theirs_->text);
  }

  virtual void orphanMore() {}

  /// Socket 0, when idle and asked to: the goodbye; true when it started one.
  bool startBye() {
    if (bye_.load(std::memory_order_acquire) != kByeWanted) return false;
    writers_[0].start(frame(kBye), nullptr);
    bye_.store(kByeSending, std::memory_order_release);
    return true;
  }
  /// After socket 0's writer ran: the goodbye is out once its frame is.
  void noteByeWritten() {
    if (!writers_[0].busy() && bye_.load(std::memory_order_relaxed) == kByeSending) {
      bye_.store(kByeDone, std::memory_order_release);
    }
  }

  /// Socket 0, when idle: this end's own fault notice, once.
  bool startFault() {
    if (faultSent_ || kernels::loadAcquire(&mine_->raised) != kFaultRaised) return false;
    faultSent_ = true;
    FrameHeader h = frame(kFault);
    h.bytes = sizeof(FaultBox);
    std::memcpy(&faultOut_, mine_, sizeof(FaultBox));
    writers_[0].start(h, reinterpret_cast<const char*>(&faultOut_));
    return true;
  }

  /// A control frame's header arrived on socket k: where its payload goes, or false for a
  /// frame this end does not expect (a protocol error).
  bool acceptControl(FrameReader& r) {
    if (r.header.type == kFault && r.header.bytes == sizeof(FaultBox)) {
      r.payload = reinterpret_cast<char*>(&faultIn_);
      return true;
    }
    if ((r.header.type == kBye || r.header.type == kAnnounce) && r.header.bytes == 0) {
      r.payload = reinterpret_cast<char*>(&faultIn_);  // nothing to read
      return true;
    }
    return false;
  }

  /// A control frame is complete.
  void deliverControl(const FrameHeader& h) {
    if (h.type == kBye) {
      byeReceived_ = true;
    } else if (h.type == kFault) {
      if (kernels::loadAcquire(&theirs_->raised) != 0) return;
      theirs_->rank = peer_;  // whoever it names, the notice comes from this peer
      theirs_->code = faultIn_.code;
      std::memcpy(theirs_->text, faultIn_.text, sizeof theirs_->text);
      theirs_->text[sizeof theirs_->text - 1] = '\0';
      kernels::storeRelease(&theirs_->raised, kFaultRaised);
    } else if (h.type == kAnnounce && !isSend_ && h.sig.sig.seq != 0) {
      writeAnnouncement(conn_.announce, h.sig.sig);
    }
  }

  /// Whether ppoll saw socket k readable (or ended) in this pass; a reader stalled on a busy
  /// slot tries again on every pass, as the kernel frees slots without a sound.
  bool readable(int k) const {
    if (readers_[k].headerComplete() && readers_[k].payload == nullptr) return true;
    const int at = polledAt_[k];
    return at >= 0 && (polled_[at].revents & (POLLIN | POLLHUP | POLLERR)) != 0;
  }

  /// Socket k reached its end. The control socket (0) decides: after the peer's goodbye that
  /// is its orderly close, before it a lost connection. A data socket just stops: its data up
  /// to the end has been read, and its peer's goodbye (or loss) shows on socket 0.
  void socketEnded(int k, const char* why) {
    closed_[k] = true;
    if (k == 0 && !byeReceived_) lost(why, false);
  }

  /// Reads what socket k has; `data` handles the header of a data frame (false: not now).
  /// Returns whether anything moved.
  template <typename OnData, typename OnDone>
  bool readFrames(int k, OnData onData, OnDone onDone) {
    bool moved = false;
    FrameReader& r = readers_[k];
    if (!readable(k)) return false;
    for (int frames = 0; frames < 4 && !broken_ && !closed_[k]; ++frames) {
      if (!r.headerComplete()) {
        const ssize_t n = readSome(sockets_[k].fd(), reinterpret_cast<char*>(&r.header) + r.headerDone,
                                   sizeof(FrameHeader) - r.headerDone);
        if (n < 0) {
          socketEnded(k, "closed unexpectedly (the process died, or its network failed)");
          return true;
        }
        if (n == 0) return moved;
        moved = true;
        r.headerDone += static_cast<size_t>(n);
        if (!r.headerComplete()) return moved;
        if (r.header.magic != kFrameMagic) {
          lost("sent a frame without Braid's marker (a corrupted stream, or not Braid)", true);
          return true;
        }
      }
      if (r.payload == nullptr) {
        if (r.header.type == kData) {
          if (!onData(k, r)) return moved;  // not acceptable yet (slot busy) or an error
        } else if (!acceptControl(r)) {
          lost("sent a frame of type " + std::to_string(r.header.type) + " with " + std::to_string(r.header.bytes) +
                   " bytes, which this end does not expect",
               true);
          return true;
        }
      }
      if (r.payloadDone < r.header.bytes) {
        const ssize_t n = readSome(sockets_[k].fd(), r.payload + r.payloadDone, r.header.bytes - r.payloadDone);
        if (n < 0) {
          socketEnded(k, "closed in the middle of a frame (the process died, or its network failed)");
          return true;
        }
        if (n == 0) return moved;
        moved = true;
        r.payloadDone += static_cast<size_t>(n);
        if (r.payloadDone < r.header.bytes) return moved;
      }
      const FrameHeader h = r.header;
      r.reset();
      if (h.type == kData) {
        onDone(k, h);
      } else {
        deliverControl(h);
      }
      moved = true;
    }
    return moved;
  }

  /// Pumps socket k's writer; false once the connection broke.
  bool write(int k, bool* moved) {
    const ssize_t w = writers_[k].pump(sockets_[k].fd());
    if (w < 0) {
      lost("broke while sending", false);
      return false;
    }
    if (w > 0) *moved = true;
    return true;
  }

  LocalMemory memory_;
  FifoSizes sizes_;
  bool isSend_;
  int rank_;
  int peer_;
  std::string peerName_;
  kernels::ConnHandle conn_{};
  FaultBox* mine_ = nullptr;    // written by this rank's watchdog
  FaultBox* theirs_ = nullptr;  // the peer's, as this end learns it
  std::vector<net::Socket> sockets_;
  std::vector<FrameWriter> writers_;
  std::vector<FrameReader> readers_;
  std::vector<bool> closed_;  // per socket: its end was read
  std::vector<int> polledAt_;  // per socket: its entry in this pass's ppoll set, or -1
  const pollfd* polled_ = nullptr;  // this pass's entries (valid during progress)
  std::atomic<bool> broken_{false};  // read by drain() on the destroying thread
  static constexpr int kByeNone = 0, kByeWanted = 1, kByeSending = 2, kByeDone = 3;
  std::atomic<int> bye_{kByeNone};  // asked for by sayGoodbye(), sent by the proxy
  bool orphaned_ = false;
  bool byeReceived_ = false;
  bool faultSent_ = false;
  FaultBox faultOut_{};
  FaultBox faultIn_{};
};

uint64_t capacity(const FifoSizes& sizes, bool ll) {
  return ll ? uint64_t(sizes.llStepLines) * sizeof(kernels::LLLine) : sizes.simpleStepBytes;
}

/// The sender's end: forwards each step its kernel publishes, then frees the slot.
class SendPump final : public EndPump {
 public:
  SendPump(const FifoSizes& sizes, int rank, int peer, std::string peerName, std::vector<net::Socket> sockets)
      : EndPump(sizes, true, rank, peer, std::move(peerName)) {
    adoptSockets(std::move(sockets));
    for (size_t k = 0; k < sockets_.size(); ++k) next_.push_back(k);
  }

  bool progress(const pollfd* polled) override {
    polled_ = polled;
    if (broken_) return false;
    bool moved = false;
    // The receiver only ever sends control frames (its fault notice, its goodbye).
    moved |= readFrames(0, [this](int, FrameReader&) { lost("sent data to a sender", true); return false; },
                        [](int, const FrameHeader&) {});
    if (broken_) return true;
    const uint64_t tail = kernels::loadAcquire(conn_.tail);
    const int n = static_cast<int>(sockets_.size());
    for (int k = 0; k < n && !broken_; ++k) {
      FrameWriter& w = writers_[k];
      if (!w.busy() && k == 0) {
        if (!startFault()) startAnnounce();
      }
      if (!w.busy() && next_[k] < tail) startData(k);
      if (!w.busy() && k == 0) startBye();  // drain() made sure no data is left
      if (!write(k, &moved)) return true;
      if (k == 0) noteByeWritten();
      if (!w.busy() && w.header().type == kData && inFlight_[k]) {
        inFlight_[k] = false;
        sent_[w.header().step % kernels::kSteps] = w.header().step + 1;
        next_[k] += n;
        while (sent_[head_ % kernels::kSteps] == head_ + 1) ++head_;
        kernels::storeRelease(conn_.head, head_);  // the slot is in the socket: reusable
        moved = true;
      }
    }
    return moved;
  }

 private:
  void startAnnounce() {
    kernels::OpSignature sig;
    if (!readAnnouncement(conn_.announce, &sig) || sig.seq == announced_) return;
    announced_ = sig.seq;
    FrameHeader h = frame(kAnnounce);
    h.sig.sig = sig;
    writers_[0].start(h, nullptr);
  }

  void startData(int k) {
    const uint64_t step = next_[k];
    const uint64_t slot = step % kernels::kSteps;
    const uint64_t info = kernels::loadRelaxed(conn_.sizes + slot);
    const bool ll = (info & kernels::kStepLL) != 0;
    const uint64_t bytes = info & 0xffffffffu;
    if (bytes > capacity(sizes_, ll)) {
      lost("was to carry a step of " + std::to_string(bytes) + " bytes, more than a slot holds (internal error)", true);
      return;
    }
    FrameHeader h = frame(kData);
    h.step = step;
    h.bytes = static_cast<uint32_t>(bytes);
    h.flags = ll ? uint32_t{kFrameLL} : 0u;
    const kernels::SigSlot& sig = conn_.sigs[slot];
    if (kernels::loadAcquire(const_cast<uint64_t*>(&sig.stamp)) == step + 1) {
      h.flags |= kFrameSig;
      h.sig.stamp = step + 1;
      h.sig.sig.seq = kernels::loadRelaxed(const_cast<uint64_t*>(&sig.sig.seq));
      h.sig.sig.words[0] = kernels::loadRelaxed(const_cast<uint64_t*>(&sig.sig.words[0]));
      h.sig.sig.words[1] = kernels::loadRelaxed(const_cast<uint64_t*>(&sig.sig.words[1]));
    }
    const char* payload = ll ? reinterpret_cast<const char*>(conn_.ll + slot * conn_.llStepLines)
                             : conn_.simple + slot * conn_.simpleStepBytes;
    writers_[k].start(h, payload);
    inFlight_[k] = true;
  }

  std::vector<uint64_t> next_;  // per socket: the next step it carries
  std::array<bool, kMaxSockets> inFlight_{};
  std::array<uint64_t, kernels::kSteps> sent_{};  // per slot: step + 1 once in the socket
  uint64_t head_ = 0;
  uint64_t announced_ = 0;
};

/// The receiver's end: accepts the sender's sockets, then lands each step in its slot once
/// the kernel has freed it, and publishes tail in step order.
class RecvPump final : public EndPump {
 public:
  RecvPump(const FifoSizes& sizes, int rank, int peer, std::string peerName, net::Socket listener, uint64_t nonce,
           uint64_t commHash, int nSockets, std::chrono::seconds timeout)
      : EndPump(sizes, false, rank, peer, std::move(peerName)),
        listener_(std::move(listener)),
        nonce_(nonce),
        commHash_(commHash),
        expected_(nSockets),
        deadline_(std::chrono::steady_clock::now() + timeout),
        timeout_(timeout) {
    accepted_.resize(nSockets);
  }

  void pollSet(std::vector<pollfd>* fds) override {
    if (!listener_.valid()) return EndPump::pollSet(fds);
    fds->push_back({listener_.fd(), POLLIN, 0});
    for (const Pending& p : pending_) fds->push_back({p.socket.fd(), POLLIN, 0});
  }

  bool progress(const pollfd* polled) override {
    polled_ = polled;
    if (broken_) return false;
    if (listener_.valid()) return progressAccept();
    bool moved = false;
    const int n = static_cast<int>(sockets_.size());
    for (int k = 0; k < n && !broken_; ++k) {
      moved |= readFrames(
          k, [this](int s, FrameReader& r) { return placeData(s, r); },
          [this](int s, const FrameHeader& h) { landData(s, h); });
    }
    if (!broken_ && !writers_[0].busy() && !startFault()) startBye();
    if (!broken_ && write(0, &moved)) noteByeWritten();
    return moved;
  }

 private:
  struct Pending {
    net::Socket socket;
    Hello hello{};
    size_t done = 0;
    std::chrono::steady_clock::time_point deadline;  ///< for the whole hello
  };
  static constexpr size_t kMaxPending = 64;
  static constexpr std::chrono::seconds kHelloTime{5};

  void orphanMore() override {
    listener_.close();
    pending_.clear();
  }

  bool progressAccept() {
    bool moved = false;
    const auto now = std::chrono::steady_clock::now();
    for (net::Socket s = listener_.tryAccept(); s.valid(); s = listener_.tryAccept()) {
      moved = true;
      if (pending_.size() >= kMaxPending) continue;  // a flood of strangers: dropped at once
      pending_.push_back(Pending{std::move(s), {}, 0, now + kHelloTime});
    }
    for (auto it = pending_.begin(); it != pending_.end();) {
      const ssize_t r = readSome(it->socket.fd(), reinterpret_cast<char*>(&it->hello) + it->done, sizeof(Hello) - it->done);
      if (r > 0) it->done += static_cast<size_t>(r), moved = true;
      const bool late = it->done < sizeof(Hello) && now > it->deadline;
      if (r < 0 || late || (it->done == sizeof(Hello) && !admit(*it))) {
        it = pending_.erase(it);  // closes it: not our sender, or gone
        continue;
      }
      it = it->done == sizeof(Hello) ? pending_.erase(it) : it + 1;
    }
    if (connected_ == expected_) {
      listener_.close();
      pending_.clear();
      adoptSockets(std::move(accepted_));
      peerName_ = sockets_[0].peerAddress().toString();
      staging_.assign(sockets_.size(), std::vector<char>(capacity(sizes_, true)));
      for (size_t k = 0; k < sockets_.size(); ++k) next_.push_back(k);
      BRAID_INFO(log::kNet, "rank %d: %d socket(s) from rank %d (%s) connected", rank_, expected_, peer_, peerName_.c_str());
      return true;
    }
    if (std::chrono::steady_clock::now() > deadline_) {
      listener_.close();
      lost("never connected (waited " + std::to_string(timeout_.count()) + " s for " + std::to_string(expected_) +
               " socket(s), " + std::to_string(connected_) + " arrived)",
           true);
      return true;
    }
    return moved;
  }

  /// A complete hello: the sender's socket `index`, or a stranger (dropped, with a warning).
  bool admit(Pending& p) {
    const Hello& h = p.hello;
    const bool ok = h.magic == kHelloMagic && h.version == kWireVersion && h.nonce == nonce_ &&
                    h.commHash == commHash_ && h.from == peer_ && h.to == rank_ &&
                    h.count == static_cast<uint32_t>(expected_) && h.index < h.count && !accepted_[h.index].valid();
    if (!ok) {
      BRAID_WARN("rank %d: dropped a connection from %s that did not present this connection's credentials", rank_,
                 p.socket.peerAddress().toString().c_str());
      return false;
    }
    accepted_[h.index] = std::move(p.socket);
    ++connected_;
    return true;
  }

  /// The header of step h.step arrived on socket k: once its slot is free, where it lands.
  bool placeData(int k, FrameReader& r) {
    const FrameHeader& h = r.header;
    const bool ll = (h.flags & kFrameLL) != 0;
    const bool badSig = (h.flags & kFrameSig) != 0 && h.sig.stamp != h.step + 1;
    if (h.step != next_[k] || h.bytes > capacity(sizes_, ll) || (ll && h.bytes % sizeof(kernels::LLLine) != 0) || badSig) {
      lost("sent step " + std::to_string(h.step) + " of " + std::to_string(h.bytes) + " bytes on socket " +
               std::to_string(k) + " where step " + std::to_string(next_[k]) + " of at most " +
               std::to_string(capacity(sizes_, ll)) + " bytes was due",
           true);
      return false;
    }
    if (kernels::loadAcquire(conn_.head) + kernels::kSteps <= h.step) return false;  // the kernel still reads it
    const uint64_t slot = h.step % kernels::kSteps;
    r.payload = ll ? staging_[k].data() : conn_.simple + slot * conn_.simpleStepBytes;
    return true;
  }

  /// Step h.step is here: its signature, its LL lines (8-byte stores: data and flag together),
  /// then tail, in step order across the sockets.
  void landData(int k, const FrameHeader& h) {
    const uint64_t slot = h.step % kernels::kSteps;
    if (h.flags & kFrameSig) {
      kernels::SigSlot& sig = conn_.sigs[slot];
      kernels::storeRelaxed(&sig.sig.seq, h.sig.sig.seq);
      kernels::storeRelaxed(&sig.sig.words[0], h.sig.sig.words[0]);
      kernels::storeRelaxed(&sig.sig.words[1], h.sig.sig.words[1]);
      kernels::storeRelease(&sig.stamp, h.sig.stamp);
    }
    if (h.flags & kFrameLL) {
      const uint64_t* from = reinterpret_cast<const uint64_t*>(staging_[k].data());
      uint64_t* to = reinterpret_cast<uint64_t*>(conn_.ll + slot * conn_.llStepLines);
      for (uint64_t i = 0; i < h.bytes / 8; ++i) kernels::storeRelease(to + i, from[i]);
    }
    arrived_[slot] = h.step + 1;
    next_[k] += sockets_.size();
    while (arrived_[tail_ % kernels::kSteps] == tail_ + 1) ++tail_;
    kernels::storeRelease(conn_.tail, tail_);
  }

  net::Socket listener_;
  uint64_t nonce_;
  uint64_t commHash_;
  int expected_;
  int connected_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  std::chrono::seconds timeout_;
  std::vector<Pending> pending_;
  std::vector<net::Socket> accepted_;
  std::vector<std::vector<char>> staging_;  // per socket: LL lines until they are complete
  std::vector<uint64_t> next_;
  std::array<uint64_t, kernels::kSteps> arrived_{};
  uint64_t tail_ = 0;
};

/// The FIFO memory of a network end, as the connector and watchdog see it. Owns the pump,
/// which the proxy drives from creation until destruction.
class NetFifo final : public FifoMemory {
 public:
  NetFifo(const FifoSizes& sizes, std::unique_ptr<EndPump> pump, bool isSend, const uint32_t* abortFlag)
      : FifoMemory(sizes), pump_(std::move(pump)), abortFlag_(abortFlag) {
    pump_->bindHandle(handle(&unusedStep_));
    pump_->setFaultBoxes(faultBox(isSend), faultBox(!isSend));
    proxy::attach(pump_.get());
  }
  ~NetFifo() override {
    if (pump_->drain(abortFlag_)) pump_->sayGoodbye();  // the proxy still runs the pump for both
    proxy::detach(pump_.get());
    pump_->close();
  }
  char* base() const override { return pump_->base(); }

 private:
  std::unique_ptr<EndPump> pump_;
  const uint32_t* abortFlag_;
  uint64_t unusedStep_ = 0;
};

uint64_t randomNonce() {
  std::random_device device;
  return (uint64_t(device()) << 32) ^ device();
}

}  // namespace

std::unique_ptr<FifoMemory> createReceiver(const FifoSizes& sizes, const Settings& settings, int peer, Descriptor* out) {
  if (settings.nSockets < 1 || settings.nSockets > kMaxSockets) {
    fail(ncclInvalidArgument, "socket transport: %d sockets per connection is outside 1..%d (NCCL_SOCKET_NTHREADS x "
                              "NCCL_NSOCKS_PERTHREAD)", settings.nSockets, kMaxSockets);
  }
  net::SocketAddress at = settings.listenAt;
  at.setPort(0);
  net::Socket listener = net::Socket::listen(at, 64);
  std::memset(out, 0, sizeof(*out));
  out->kind = Kind::kSocket;
  out->ownerPid = static_cast<int32_t>(getpid());
  out->bytes = sizes.bytes();
  out->sizes = sizes;
  out->listen = listener.localAddress().pack();
  out->nSockets = static_cast<uint32_t>(settings.nSockets);
  out->nonce = randomNonce();
  auto pump = std::make_unique<RecvPump>(sizes, settings.rank, peer, "", std::move(listener), out->nonce,
                                         settings.commHash, settings.nSockets, settings.timeout);
  return std::make_unique<NetFifo>(sizes, std::move(pump), false, settings.abortFlag);
}

std::unique_ptr<FifoMemory> connectSender(const Descriptor& d, const Settings& settings, int peer) {
  if (d.nSockets < 1 || d.nSockets > kMaxSockets || d.bytes != d.sizes.bytes()) {
    fail(ncclInternalError, "rank %d sent a socket-transport descriptor with %u sockets and %llu bytes", peer,
         d.nSockets, static_cast<unsigned long long>(d.bytes));
  }
  const net::SocketAddress to = net::SocketAddress::unpack(d.listen);
  const auto deadline = net::Clock::now() + settings.timeout;
  std::vector<net::Socket> sockets;
  for (uint32_t i = 0; i < d.nSockets; ++i) {
    net::Socket s = net::Socket::connect(to, deadline, nullptr);
    const Hello hello{kHelloMagic, kWireVersion, d.nonce, settings.commHash, settings.rank, peer, i, d.nSockets};
    s.sendAll(&hello, sizeof(hello), deadline, nullptr);
    sockets.push_back(std::move(s));
  }
  BRAID_INFO(log::kNet, "rank %d: connected %u socket(s) to rank %d at %s", settings.rank, d.nSockets, peer,
             to.toString().c_str());
  auto pump = std::make_unique<SendPump>(d.sizes, settings.rank, peer, to.toString(), std::move(sockets));
  return std::make_unique<NetFifo>(d.sizes, std::move(pump), true, settings.abortFlag);
}

}  // namespace braid::transport::socket
