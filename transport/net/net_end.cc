#include "transport/net/net_end.h"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/log.h"
#include "core/process.h"
#include "core/status.h"

namespace braid::transport::netend {

FrameHeader frame(uint32_t type) {
  FrameHeader h{};
  h.magic = kFrameMagic;
  h.type = type;
  return h;
}

uint64_t capacity(const FifoSizes& sizes, uint32_t frameFlags) {
  if (frameFlags & kFrameLL) return uint64_t(sizes.llStepLines) * sizeof(kernels::LLLine);
  if (frameFlags & kFrameLL128) return uint64_t(sizes.ll128StepLines) * sizeof(kernels::LL128Line);
  return sizes.simpleStepBytes;
}

uint64_t stagingCapacity(const FifoSizes& sizes) {
  return std::max(capacity(sizes, kFrameLL), capacity(sizes, kFrameLL128));
}

net::Socket describeReceiver(Kind kind, const FifoSizes& sizes, net::SocketAddress listenAt, uint32_t nSockets,
                             Descriptor* out) {
  listenAt.setPort(0);
  net::Socket listener = net::Socket::listen(listenAt, 64);
  std::memset(out, 0, sizeof(*out));
  out->kind = kind;
  out->ownerPid = static_cast<int32_t>(getpid());
  out->bytes = sizes.bytes();
  out->sizes = sizes;
  out->listen = listener.localAddress().pack();
  out->nSockets = nSockets;
  out->nonce = process::random64();
  return listener;
}

ssize_t readSome(int fd, void* into, size_t size) {
  if (size == 0) return 0;
  const ssize_t r = ::recv(fd, into, size, MSG_DONTWAIT);
  if (r > 0) return r;
  if (r == 0) return -1;
  return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? 0 : -1;
}

// ---- LocalMemory, FrameWriter ----

LocalMemory::LocalMemory(uint64_t bytes) : bytes_((bytes + 4095) / 4096 * 4096) {
  memory_ = static_cast<char*>(std::aligned_alloc(4096, bytes_));
  if (memory_ == nullptr) fail(ncclSystemError, "cannot allocate %llu bytes of FIFO memory", (unsigned long long)bytes);
  std::memset(memory_, 0, bytes_);
}

LocalMemory::~LocalMemory() {
  if (!abandoned_) std::free(memory_);
}

void FrameWriter::start(const FrameHeader& h, const char* payload) {
  header_ = h;
  payload_ = payload;
  total_ = sizeof(FrameHeader) + h.bytes;
  done_ = 0;
}

ssize_t FrameWriter::pump(int fd) {
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

// ---- Acceptor ----

namespace {
constexpr size_t kMaxPending = 64;
/// How long a connection may stay silent before a newcomer may take its place.
constexpr std::chrono::milliseconds kEvictAfter{1000};
constexpr std::chrono::seconds kHelloTime{5};
}  // namespace

Acceptor::Acceptor(int rank, int peer, net::Socket listener, uint64_t nonce, uint64_t commHash, int nSockets,
                   std::chrono::seconds timeout)
    : rank_(rank),
      peer_(peer),
      listener_(std::move(listener)),
      nonce_(nonce),
      commHash_(commHash),
      expected_(nSockets),
      deadline_(std::chrono::steady_clock::now() + timeout),
      timeout_(timeout) {
  accepted_.resize(nSockets);
}

void Acceptor::pollSet(std::vector<pollfd>* fds) const {
  fds->push_back({listener_.fd(), static_cast<short>(full_ ? 0 : POLLIN), 0});
  for (const Pending& p : pending_) fds->push_back({p.socket.fd(), POLLIN, 0});
}

Acceptor::State Acceptor::progress(bool* moved) {
  const auto now = std::chrono::steady_clock::now();
  full_ = false;
  for (;;) {
    // A flood of strangers: one silent for kEvictAfter makes room for a newcomer; with none
    // such, accepting waits for this pass's reads (a real sender's hello follows its connect at
    // once, so it is never the one closed).
    if (pending_.size() >= kMaxPending) {
      auto silent = std::find_if(pending_.begin(), pending_.end(), [&](const Pending& p) {
        return p.done == 0 && now - (p.deadline - kHelloTime) >= kEvictAfter;
      });
      if (silent == pending_.end()) {
        full_ = true;
        break;
      }
      pending_.erase(silent);
    }
    net::Socket s = listener_.tryAccept();
    if (!s.valid()) break;
    *moved = true;
    pending_.push_back(Pending{std::move(s), {}, 0, now + kHelloTime});
  }
  for (auto it = pending_.begin(); it != pending_.end();) {
    const ssize_t r = readSome(it->socket.fd(), reinterpret_cast<char*>(&it->hello) + it->done, sizeof(Hello) - it->done);
    if (r > 0) it->done += static_cast<size_t>(r), *moved = true;
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
    *moved = true;
    return State::kComplete;
  }
  if (std::chrono::steady_clock::now() > deadline_) {
    listener_.close();
    pending_.clear();
    *moved = true;
    return State::kTimedOut;
  }
  return State::kWaiting;
}

std::string Acceptor::timeoutText() const {
  return "never connected (waited " + std::to_string(timeout_.count()) + " s for " + std::to_string(expected_) +
         " socket(s), " + std::to_string(connected_) + " arrived)";
}

std::vector<net::Socket> Acceptor::takeSockets() { return std::move(accepted_); }

void Acceptor::orphan() {
  listener_.close();
  pending_.clear();
}

bool Acceptor::admit(Pending& p) {
  const Hello& h = p.hello;
  const bool ok = h.magic == kHelloMagic && h.version == kWireVersion && h.nonce == nonce_ && h.commHash == commHash_ &&
                  h.from == peer_ && h.to == rank_ && h.count == static_cast<uint32_t>(expected_) &&
                  h.index < h.count && !accepted_[h.index].valid();
  if (!ok) {
    BRAID_WARN_STRANGER("rank %d: dropped a connection from %s that did not present this connection's credentials", rank_,
               p.socket.peerAddress().toString().c_str());
    return false;
  }
  if (h.index == 0) first_ = h;
  accepted_[h.index] = std::move(p.socket);
  ++connected_;
  return true;
}

// ---- EndPump ----

EndPump::EndPump(const FifoSizes& sizes, uint64_t extraBytes, bool isSend, int rank, int peer, std::string peerName)
    : memory_((sizes.bytes() + 63) / 64 * 64 + extraBytes),
      extraOffset_((sizes.bytes() + 63) / 64 * 64),
      sizes_(sizes),
      isSend_(isSend),
      rank_(rank),
      peer_(peer),
      peerName_(std::move(peerName)) {}

void EndPump::pollSet(std::vector<pollfd>* fds) {
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

bool EndPump::drain(const uint32_t* abortFlag) {
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

void EndPump::sayGoodbye() {
  if (sockets_.empty()) return;  // a receiver whose sender never connected
  bye_.store(kByeWanted, std::memory_order_release);
  proxy::kick();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (bye_.load(std::memory_order_acquire) != kByeDone && !broken_ && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::microseconds(50));
}

void EndPump::close() {
  if (orphaned_) return;
  char sink[4096];
  for (net::Socket& sock : sockets_) {
    if (!sock.valid()) continue;
    ::shutdown(sock.fd(), SHUT_WR);
    for (int i = 0; i < 64 && readSome(sock.fd(), sink, sizeof sink) > 0; ++i) {
    }
  }
}

void EndPump::orphan() {
  orphaned_ = true;
  for (net::Socket& sock : sockets_) sock.close();
  orphanMore();
}

void EndPump::adoptSockets(std::vector<net::Socket> sockets) {
  sockets_ = std::move(sockets);
  writers_.assign(sockets_.size(), FrameWriter{});
  closed_.assign(sockets_.size(), false);
  readers_.assign(sockets_.size(), FrameReader{});
}

void EndPump::lost(const std::string& why, bool protocolError, ncclResult_t code) {
  if (broken_) return;
  broken_ = true;
  if (byeReceived_ && !protocolError) return;
  if (kernels::loadAcquire(&theirs_->raised) != 0) return;
  theirs_->rank = peer_;
  theirs_->code = static_cast<uint32_t>(code);
  snprintf(theirs_->text, sizeof theirs_->text, "the network connection %s rank %d (%s) %s", isSend_ ? "to" : "from",
           peer_, peerName_.c_str(), why.c_str());
  kernels::storeRelease(&theirs_->raised, protocolError ? kFaultRaised : kFaultLost);
  BRAID_WARN("rank %d: %s", rank_, theirs_->text);
}

bool EndPump::startBye() {
  if (bye_.load(std::memory_order_acquire) != kByeWanted) return false;
  writers_[0].start(frame(kBye), nullptr);
  bye_.store(kByeSending, std::memory_order_release);
  return true;
}

void EndPump::noteByeWritten() {
  if (!writers_[0].busy() && bye_.load(std::memory_order_relaxed) == kByeSending) {
    bye_.store(kByeDone, std::memory_order_release);
  }
}

bool EndPump::startFault() {
  if (faultSent_ || kernels::loadAcquire(&mine_->raised) != kFaultRaised) return false;
  faultSent_ = true;
  FrameHeader h = frame(kFault);
  h.bytes = sizeof(FaultBox);
  std::memcpy(&faultOut_, mine_, sizeof(FaultBox));
  writers_[0].start(h, reinterpret_cast<const char*>(&faultOut_));
  return true;
}

bool EndPump::startAnnounce() {
  kernels::OpSignature sig;
  if (!readAnnouncement(conn_.announce, &sig) || sig.seq == announced_) return false;
  const auto now = std::chrono::steady_clock::now();
  if (sig.seq != pendingAnnounce_) {
    pendingAnnounce_ = sig.seq;
    pendingSince_ = now;
  }
  if (now - pendingSince_ < kAnnounceDelay) return false;
  announced_ = sig.seq;
  FrameHeader h = frame(kAnnounce);
  h.sig.sig = sig;
  writers_[0].start(h, nullptr);
  return true;
}

bool EndPump::acceptControl(FrameReader& r) {
  if (r.header.type == kFault && r.header.bytes == sizeof(FaultBox)) {
    r.payload = reinterpret_cast<char*>(&faultIn_);
    return true;
  }
  const bool empty = r.header.type == kBye || r.header.type == kAnnounce || (r.header.type == kReady && isSend_);
  if (empty && r.header.bytes == 0) {
    r.payload = reinterpret_cast<char*>(&faultIn_);  // nothing to read
    return true;
  }
  return false;
}

void EndPump::deliverControl(const FrameHeader& h) {
  if (h.type == kBye) {
    byeReceived_ = true;
    // The peer's communicator is going away: a wait on it that is still running fails.
    if (kernels::loadAcquire(&theirs_->raised) != 0) return;
    theirs_->rank = peer_;
    theirs_->code = static_cast<uint32_t>(ncclRemoteError);
    snprintf(theirs_->text, sizeof theirs_->text, "rank %d (%s) closed its end of the connection (its communicator "
             "was destroyed)", peer_, peerName_.c_str());
    kernels::storeRelease(&theirs_->raised, kFaultLeft);
  } else if (h.type == kReady) {
    readyReceived_ = true;
    readyStep_ = std::max(readyStep_, h.step);
    endAsked_ = endAsked_ || h.reserved == kReadyEnding;
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

bool EndPump::readable(int k) const {
  if (readers_[k].headerComplete() && readers_[k].payload == nullptr) return true;
  const int at = polledAt_[k];
  return at >= 0 && (polled_[at].revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}

void EndPump::socketEnded(int k, const char* why) {
  closed_[k] = true;
  if (k == 0 && !byeReceived_) lost(why, false);
}

bool EndPump::readControl() {
  return readFrames(0, [this](int, FrameReader&) { lost("sent data on the control socket", true); return false; },
                    [](int, const FrameHeader&) {});
}

namespace {
std::atomic<uint64_t> referenceStepCount{0}, directStepCount{0};
}  // namespace

uint64_t referenceSteps() { return referenceStepCount.load(std::memory_order_relaxed); }
uint64_t directSteps() { return directStepCount.load(std::memory_order_relaxed); }
void noteDirectStep() { directStepCount.fetch_add(1, std::memory_order_relaxed); }

bool EndPump::stepHeader(uint64_t step, FrameHeader* h, const char** payload, bool* byReference) {
  const uint64_t slot = step % kernels::kSteps;
  const uint64_t info = kernels::loadRelaxed(conn_.sizes + slot);
  const uint32_t kind = (info & kernels::kStepLL) ? kFrameLL : (info & kernels::kStepLL128) ? kFrameLL128 : 0u;
  const uint64_t bytes = info & 0xffffffffu;
  if (bytes > capacity(sizes_, kind)) {
    lost("was to carry a step of " + std::to_string(bytes) + " bytes, more than a slot holds (internal error)", true,
         ncclInternalError);
    return false;
  }
  const char* referenced = nullptr;
  if (info & kernels::kStepReference) {
    if (!acceptsReferences_ || kind != 0) {
      lost("was to carry a step by reference, which this transport cannot (internal error)", true, ncclInternalError);
      return false;
    }
    std::memcpy(&referenced, kernels::simpleSlot(conn_, step), sizeof referenced);
    referenceStepCount.fetch_add(1, std::memory_order_relaxed);
  }
  *h = frame(kData);
  h->step = step;
  h->bytes = static_cast<uint32_t>(bytes);
  h->flags = kind;
  const kernels::SigSlot& sig = conn_.sigs[slot];
  if (kernels::loadAcquire(const_cast<uint64_t*>(&sig.stamp)) == step + 1) {
    h->flags |= kFrameSig;
    h->sig.stamp = step + 1;
    h->sig.sig.seq = kernels::loadRelaxed(const_cast<uint64_t*>(&sig.sig.seq));
    h->sig.sig.words[0] = kernels::loadRelaxed(const_cast<uint64_t*>(&sig.sig.words[0]));
    h->sig.sig.words[1] = kernels::loadRelaxed(const_cast<uint64_t*>(&sig.sig.words[1]));
  }
  if (byReference != nullptr) *byReference = referenced != nullptr;
  *payload = referenced != nullptr ? referenced
             : kind == kFrameLL      ? reinterpret_cast<const char*>(conn_.ll + slot * conn_.llStepLines)
             : kind == kFrameLL128 ? reinterpret_cast<const char*>(conn_.ll128 + slot * conn_.ll128StepLines)
                                   : kernels::simpleSlot(conn_, step);
  return true;
}

bool EndPump::checkStep(const FrameHeader& h, uint64_t due, const std::string& how, bool consistent) {
  const uint32_t kind = h.flags & kFrameFlagged;
  const uint64_t line = kind == kFrameLL ? sizeof(kernels::LLLine) : kind == kFrameLL128 ? sizeof(kernels::LL128Line) : 1;
  const bool badSig = (h.flags & kFrameSig) != 0 && h.sig.stamp != h.step + 1;
  if (consistent && h.magic == kFrameMagic && h.type == kData && h.step == due && kind != kFrameFlagged &&
      h.bytes <= capacity(sizes_, kind) && h.bytes % line == 0 && !badSig) {
    return true;
  }
  lost("sent step " + std::to_string(h.step) + " of " + std::to_string(h.bytes) + " bytes " + how + " where step " +
           std::to_string(due) + " of at most " + std::to_string(capacity(sizes_, kind)) + " bytes was due",
       true);
  return false;
}

void EndPump::landStep(const FrameHeader& h, const char* staging) {
  const uint64_t slot = h.step % kernels::kSteps;
  if (h.flags & kFrameSig) {
    kernels::SigSlot& sig = conn_.sigs[slot];
    kernels::storeRelaxed(&sig.sig.seq, h.sig.sig.seq);
    kernels::storeRelaxed(&sig.sig.words[0], h.sig.sig.words[0]);
    kernels::storeRelaxed(&sig.sig.words[1], h.sig.sig.words[1]);
    kernels::storeRelease(&sig.stamp, h.sig.stamp);
  }
  if (h.flags & kFrameFlagged) {  // in order, each word with release: an LL128 line's flag (its last word) after its data
    const auto* from = reinterpret_cast<const uint64_t*>(staging);
    auto* to = (h.flags & kFrameLL) ? reinterpret_cast<uint64_t*>(conn_.ll + slot * conn_.llStepLines)
                                    : reinterpret_cast<uint64_t*>(conn_.ll128 + slot * conn_.ll128StepLines);
    for (uint64_t i = 0; i < h.bytes / 8; ++i) kernels::storeRelease(to + i, from[i]);
  }
  // The step's description, as the sender's kernel wrote it: read by a receive by reference
  // (Simple), otherwise by nothing but a profiler plugin's trace (proxy/op_trace.h).
  kernels::storeRelaxed(conn_.sizes + slot, h.bytes | ((h.flags & kFrameLL)      ? kernels::kStepLL
                                                       : (h.flags & kFrameLL128) ? kernels::kStepLL128
                                                                                 : 0));
}

bool EndPump::write(int k, bool* moved) {
  const ssize_t w = writers_[k].pump(sockets_[k].fd());
  if (w < 0) {
    lost("broke while sending", false);
    return false;
  }
  if (w > 0) *moved = true;
  return true;
}

// ---- NetFifo ----

NetFifo::NetFifo(const FifoSizes& sizes, std::unique_ptr<EndPump> pump, bool isSend, const uint32_t* abortFlag)
    : FifoMemory(sizes), pump_(std::move(pump)), abortFlag_(abortFlag) {
  pump_->bindHandle(handle(true));
  pump_->setAbortFlag(abortFlag);
  pump_->setFaultBoxes(faultBox(isSend), faultBox(!isSend));
  proxy::attach(pump_.get());
}

NetFifo::~NetFifo() {
  const bool orderly = pump_->drain(abortFlag_);
  if (orderly) pump_->sayGoodbye();  // the proxy still runs the pump for these
  pump_->finish(orderly);
  proxy::detach(pump_.get());
  pump_->close();
}

}  // namespace braid::transport::netend
