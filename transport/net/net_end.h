// What the network transports share: one end of a connection between hosts, driven by the
// process's proxy thread, with its own FIFO memory and a TCP control socket to the peer.
//
// The socket transport (transport/net/socket) carries everything over TCP: its data sockets
// are this control socket and more of its kind. The verbs transport (transport/net/ib) moves
// data by RDMA and keeps one such socket for the rest: the receiver's "ready", the sender's
// announcement of the collective it is in, each end's fault notice, the goodbye, and the
// connection's end (a peer whose socket closes without goodbye is lost).
//
// Setup on the TCP side: the receiver listens on this rank's bootstrap interface and sends its
// address and a random nonce over the bootstrap channel (itself authenticated by the
// communicator's secret). The sender connects and presents a Hello (the nonce, the
// communicator hash, both ranks, the socket's index, and 64 bytes of the transport's own);
// anything else that connects is dropped with a warning.
//
// Wire: a 64-byte frame header (type, step, payload bytes, flags, signature) then the payload.
// Every length is checked before a byte of payload is read; a frame that does not fit is a
// protocol error, reported like a broken connection. A data frame's length lands as its step's
// size, which the receiving kernel checks exactly (kernels::checkStepBytes). Both ends must have
// the same byte order.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/socket.h"
#include "core/status.h"
#include "proxy/op_trace.h"
#include "proxy/proxy.h"
#include "transport/fifo.h"

namespace braid::transport::netend {

constexpr uint32_t kHelloMagic = 0x484e5242;  // "BRNH"
constexpr uint32_t kFrameMagic = 0x464e5242;  // "BRNF"
constexpr uint32_t kWireVersion = 2;
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
  char extra[64];  ///< the transport's own (the verbs transport: the sender's queue pair)
};
static_assert(sizeof(Hello) == 104 && std::is_trivially_copyable_v<Hello>);

enum FrameType : uint32_t { kData = 1, kAnnounce = 2, kFault = 3, kBye = 4, kReady = 5 };
enum FrameFlags : uint32_t { kFrameLL = 1, kFrameSig = 2, kFrameLL128 = 4 };
/// A receiver's kReady whose `reserved` is this asks the sender to end its data path now (the
/// net plugin transport: the sender's end record completes the receive the receiver has posted).
constexpr uint64_t kReadyEnding = 1;
/// The protocols whose lines carry their own flags: staged on arrival, landed word by word.
constexpr uint32_t kFrameFlagged = kFrameLL | kFrameLL128;

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

/// A header of `type`, the rest zero.
FrameHeader frame(uint32_t type);

/// Payload bytes one slot holds: of LL lines (frameFlags has kFrameLL), LL128 lines
/// (kFrameLL128) or Simple data.
uint64_t capacity(const FifoSizes& sizes, uint32_t frameFlags);
/// The most one staged step (LL or LL128) holds.
uint64_t stagingCapacity(const FifoSizes& sizes);

/// A network receiver's start, the same for every network transport: listens on `listenAt`'s
/// address (any port) and fills `out` with the transport's kind, this process, the FIFO sizes,
/// that address, nSockets and a fresh nonce; the rest of `out` zero. Returns the listener.
net::Socket describeReceiver(Kind kind, const FifoSizes& sizes, net::SocketAddress listenAt, uint32_t nSockets,
                             Descriptor* out);

/// Reads up to size bytes from a non-blocking socket: >0 read, 0 nothing yet, -1 closed or broken.
ssize_t readSome(int fd, void* into, size_t size);

/// Data steps this process's senders have written by reference (from the user's buffer) and
/// its receivers have read straight into an offered buffer (kernels/algorithms/send_recv.h),
/// for tests; noteDirectStep counts one of the latter.
uint64_t referenceSteps();
uint64_t directSteps();
void noteDirectStep();

/// One end's FIFO memory (and `extraBytes` after it for the transport), on this process's heap.
class LocalMemory {
 public:
  explicit LocalMemory(uint64_t bytes);
  ~LocalMemory();
  LocalMemory(const LocalMemory&) = delete;
  LocalMemory& operator=(const LocalMemory&) = delete;
  char* get() const { return memory_; }
  uint64_t bytes() const { return bytes_; }
  /// Never freed: a net plugin may still write into it (a comm left open with a receive posted).
  /// The memory stays where it is, so addresses into it (an end's records) stay valid.
  void abandon() { abandoned_ = true; }

 private:
  uint64_t bytes_;
  char* memory_;
  bool abandoned_ = false;
};

/// Writes one frame (header, then payload) to a non-blocking socket, as far as it goes.
class FrameWriter {
 public:
  bool busy() const { return done_ < total_; }
  void start(const FrameHeader& h, const char* payload);
  /// Bytes written (0 when the socket is full); -1 when the connection is broken.
  ssize_t pump(int fd);
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

/// The receiver's listening socket until its sender's sockets have all arrived with the right
/// Hello; strangers (garbage, a truncated or forged hello, a flood, a hello slower than 5 s)
/// are dropped with a warning. Proxy thread only.
class Acceptor {
 public:
  Acceptor(int rank, int peer, net::Socket listener, uint64_t nonce, uint64_t commHash, int nSockets,
           std::chrono::seconds timeout);
  bool listening() const { return listener_.valid(); }
  void pollSet(std::vector<pollfd>* fds) const;
  enum class State { kWaiting, kComplete, kTimedOut };
  /// Accepts and reads hellos without blocking; `moved` is set when anything happened.
  State progress(bool* moved);
  /// After kComplete: the sender's sockets in index order, and its hello (socket 0's).
  std::vector<net::Socket> takeSockets();
  const Hello& hello() const { return first_; }
  /// What a kTimedOut report says.
  std::string timeoutText() const;
  /// In a forked child: let go of the parent's sockets.
  void orphan();

 private:
  struct Pending {
    net::Socket socket;
    Hello hello{};
    size_t done = 0;
    std::chrono::steady_clock::time_point deadline;  ///< for the whole hello
  };
  bool admit(Pending& p);

  int rank_;
  int peer_;
  net::Socket listener_;
  uint64_t nonce_;
  uint64_t commHash_;
  int expected_;
  int connected_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  std::chrono::seconds timeout_;
  bool full_ = false;  // kMaxPending wait and none may be closed: accepting waits
  std::vector<Pending> pending_;
  std::vector<net::Socket> accepted_;
  Hello first_{};
};

/// What both ends' pumps of every network transport share: the sockets, the control frames
/// (announcement, fault, bye, ready) and the way a broken connection is reported.
class EndPump : public proxy::Pump {
 public:
  EndPump(const FifoSizes& sizes, uint64_t extraBytes, bool isSend, int rank, int peer, std::string peerName);

  /// The FIFO memory of this end; the transport's extra bytes follow at extra().
  char* base() const { return memory_.get(); }
  char* extra() const { return memory_.get() + extraOffset_; }
  /// The Simple slots when the transport keeps them apart (GPU Direct RDMA; the net plugin
  /// transport's room for records), else null.
  char* slots() const { return slots_; }
  /// Bytes from one of those slots to the next; 0: simpleStepBytes.
  uint32_t slotStride() const { return slotStride_; }
  /// The Simple slots' device memory (GPU Direct RDMA), if this end keeps them there.
  virtual FifoMemory::DeviceData gpuSlots() const { return {}; }

  void pollSet(std::vector<pollfd>* fds) override;
  /// The profiler plugin's view of this end's steps (proxy/op_trace.h), when this pump
  /// reports them (tracesSteps_); else null.
  proxy::OpTrace* trace() { return tracesSteps_ ? &trace_ : nullptr; }
  void bindHandle(const kernels::ConnHandle& h) { conn_ = h; }
  /// The communicator's abort flag: once it is raised, an end stops touching users' buffers
  /// (steps by reference, receives landing in an offered buffer).
  void setAbortFlag(const uint32_t* flag) { abortFlag_ = flag; }
  void setFaultBoxes(FaultBox* mine, FaultBox* theirs) {
    mine_ = mine;
    theirs_ = theirs;
  }

  /// Before detach: whether this end may say goodbye. A sender first waits until every step
  /// its kernel published has left (head reached tail), the connection breaks, or nothing has
  /// moved for 1 s (a receiver that stopped reading). No goodbye when steps were left behind or
  /// the communicator was aborted: the peer then sees a lost connection, which is the truth.
  bool drain(const uint32_t* abortFlag);
  /// Before detach, on the destroying thread: the proxy sends the goodbye on socket 0 after
  /// whatever frame is in progress there; waits (at most 1 s) until it is in the socket.
  void sayGoodbye();
  /// Before detach, on the destroying thread, after drain (and sayGoodbye when drain allowed
  /// it, `orderly`): lets the transport end its data path on the proxy thread (the net plugin
  /// transport completes its requests and closes its comms there), waiting a bounded time.
  virtual void finish(bool orderly) { (void)orderly; }
  /// After detach: no more writes; reads (a bounded amount of) what the peer sent and nobody
  /// will read, since closing with unread data resets the connection and could discard what
  /// the peer has yet to read.
  virtual void close();
  /// In a forked child: these sockets are the parent's too. Closes this process's copies (no
  /// shutdown, which would end the parent's connection) and never writes or reads again.
  void orphan() override;
  void broke(const std::string& why) override { lost(why, true, ncclSystemError); }

 protected:
  void adoptSockets(std::vector<net::Socket> sockets);

  /// The connection broke or spoke nonsense: the peer's fault box says so, with `code`
  /// (unless the peer said goodbye, or already sent its own reason). Nothing moves on this end
  /// afterwards. A protocol error (or another failure that is certain) fails at once; a mere
  /// loss only while an operation runs. (Virtual: the net plugin transport defers a loss of
  /// the control socket while its data path still moves.)
  virtual void lost(const std::string& why, bool protocolError, ncclResult_t code = ncclRemoteError);

  virtual void orphanMore() {}

  /// Socket 0, when idle and asked to: the goodbye; true when it started one.
  bool startBye();
  /// After socket 0's writer ran: the goodbye is out once its frame is.
  void noteByeWritten();
  /// Socket 0, when idle: this end's own fault notice, once.
  bool startFault();
  /// Socket 0, when idle (sender): the kernel's announcement, once it has stood unchanged for
  /// kAnnounceDelay. A collective that ends sooner needs none (its data steps carry their
  /// signatures), which keeps a frame and its syscalls off every small collective; one that
  /// waits is announced within about a millisecond more.
  bool startAnnounce();
  static constexpr std::chrono::microseconds kAnnounceDelay{1000};
  /// Socket 0 (receiver): "ready", once.
  void startReady() { writers_[0].start(frame(kReady), nullptr); }

  /// Reads what socket k has; `onData` handles the header of a data frame (false: not now),
  /// `onDone` a complete data frame. Returns whether anything moved.
  template <typename OnData, typename OnDone>
  bool readFrames(int k, OnData onData, OnDone onDone);
  /// Reads control frames only from socket 0 (data there is a protocol error).
  bool readControl();

  /// Sender: the header of data step `step` as the kernel published it (size, protocol, and its
  /// signature when the kernel wrote one), and where its payload lies (its slot, or the
  /// sender's buffer for a step by reference: kStepReference, said in *byReference); false
  /// after reporting a size that does not fit a slot, or a reference where acceptsReferences_
  /// is false.
  bool stepHeader(uint64_t step, FrameHeader* h, const char** payload, bool* byReference = nullptr);
  /// Receiver: whether h is step `due`, fits a slot and carries a consistent signature (and
  /// `consistent` holds); false after reporting what arrived `how` ("on socket 2", ...).
  bool checkStep(const FrameHeader& h, uint64_t due, const std::string& how, bool consistent = true);
  /// Receiver: step h's signature (when it carries one), then its LL lines from `staging`
  /// with 8-byte release stores (data and flag together), then its description in conn.sizes
  /// (bytes and protocol). Tail is the caller's.
  void landStep(const FrameHeader& h, const char* staging);

  /// Pumps socket k's writer; false once the connection broke.
  bool write(int k, bool* moved);

  LocalMemory memory_;
  char* slots_ = nullptr;  // see slots()
  uint32_t slotStride_ = 0;  // see slotStride()
  uint64_t extraOffset_;
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
  bool acceptsReferences_ = false;  // sender: steps by reference may come (the socket transport)
  const uint32_t* abortFlag_ = nullptr;
  bool aborted() const { return abortFlag_ != nullptr && kernels::loadRelaxed(const_cast<uint32_t*>(abortFlag_)) != 0; }
  bool orphaned_ = false;
  bool byeReceived_ = false;
  bool readyReceived_ = false;
  uint64_t readyStep_ = 0;  // the largest step a "ready" carried (the plugin transport: steps landed)
  bool endAsked_ = false;   // a "ready" carried kReadyEnding
  bool faultSent_ = false;
  uint64_t announced_ = 0;
  uint64_t pendingAnnounce_ = 0;  // the announcement seen last, not sent yet, and since when
  std::chrono::steady_clock::time_point pendingSince_{};
  FaultBox faultOut_{};
  FaultBox faultIn_{};
  proxy::OpTrace trace_;  // armed while a profiler plugin watches an operation on this end
  bool tracesSteps_ = false;  // the subclass reports its steps to trace_

 private:
  bool acceptControl(FrameReader& r);
  void deliverControl(const FrameHeader& h);
  bool readable(int k) const;
  void socketEnded(int k, const char* why);
};

/// The FIFO memory of a network end, as the connector and watchdog see it. Owns the pump,
/// which the proxy drives from creation until destruction.
class NetFifo final : public FifoMemory {
 public:
  NetFifo(const FifoSizes& sizes, std::unique_ptr<EndPump> pump, bool isSend, const uint32_t* abortFlag);
  ~NetFifo() override;
  char* base() const override { return pump_->base(); }
  char* data() const override { return pump_->slots() != nullptr ? pump_->slots() : FifoMemory::data(); }
  proxy::OpTrace* opTrace() const override { return pump_->trace(); }
  DeviceData deviceData() const override { return pump_->gpuSlots(); }
  uint32_t simpleStride() const override {
    return pump_->slotStride() != 0 ? pump_->slotStride() : sizes_.simpleStepBytes;
  }
  /// (where the host memory keeps them, whether or not the Simple slots moved)
  char* lineSlots() const override {
    return base() + fifoControlBytes() + uint64_t(kernels::kSteps) * sizes_.simpleStepBytes;
  }

 private:
  std::unique_ptr<EndPump> pump_;
  const uint32_t* abortFlag_;
};

// ---- template definition ----

template <typename OnData, typename OnDone>
bool EndPump::readFrames(int k, OnData onData, OnDone onDone) {
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

}  // namespace braid::transport::netend
