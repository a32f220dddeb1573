#include "transport/net/socket/socket_transport.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "core/log.h"
#include "core/process.h"
#include "core/status.h"
#include "kernels/algorithms/send_recv.h"
#include "transport/net/net_end.h"

namespace braid::transport::socket {

namespace {

using namespace netend;  // NOLINT: the shared end machinery is this file's vocabulary

class SendPump final : public EndPump {
 public:
  SendPump(const FifoSizes& sizes, int rank, int peer, std::string peerName, std::vector<net::Socket> sockets)
      : EndPump(sizes, 0, true, rank, peer, std::move(peerName)) {
    adoptSockets(std::move(sockets));
    for (size_t k = 0; k < sockets_.size(); ++k) next_.push_back(k);
    acceptsReferences_ = true;  // the host's sends: written from the user's buffer (send_recv.h)
    tracesSteps_ = true;
  }

  bool progress(const pollfd* polled) override {
    polled_ = polled;
    if (broken_) return false;
    bool moved = false;
    moved |= readControl();  // the receiver only ever sends its fault notice and its goodbye
    if (broken_) return true;
    const uint64_t tail = kernels::loadAcquire(conn_.tail);
    const int n = static_cast<int>(sockets_.size());
    if (aborted() && (std::find(referenced_.begin(), referenced_.begin() + n, true) != referenced_.begin() + n ||
                      pendingReference(tail))) {
      broken_ = true;  // the buffers those steps point into are their users' again (send_recv.h)
      return true;
    }
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
        referenced_[k] = false;
        netEvents_.stop(w.header().step);  // (the frame is in the socket)
        sent_[w.header().step % kernels::kSteps] = w.header().step + 1;
        next_[k] += n;
        while (sent_[head_ % kernels::kSteps] == head_ + 1) ++head_;
        kernels::storeRelease(conn_.head, head_);  // the slot is in the socket: reusable
        if (trace_.armed()) trace_.stepsDone(head_);
        moved = true;
      }
    }
    return moved;
  }

 private:
  void startData(int k) {
    FrameHeader h;
    const char* payload = nullptr;
    bool byReference = false;
    if (!stepHeader(next_[k], &h, &payload, &byReference)) return;
    writers_[k].start(h, payload);
    if (trace_.armed()) {
      trace_.stepTaken(next_[k], h.bytes);
      netEvents_.startSocket(trace_, next_[k], 0, sockets_[static_cast<size_t>(k)].fd(), 0, h.bytes);
    }
    inFlight_[k] = true;
    referenced_[k] = byReference;
  }

  /// Whether a step published but not yet started is by reference.
  bool pendingReference(uint64_t tail) const {
    for (uint64_t step : next_)
      for (uint64_t s = step; s < tail; s += next_.size())
        if (kernels::loadRelaxed(conn_.sizes + s % kernels::kSteps) & kernels::kStepReference) return true;
    return false;
  }

  std::vector<uint64_t> next_;  // per socket: the next step it carries
  std::array<bool, kMaxSockets> inFlight_{};
  std::array<bool, kMaxSockets> referenced_{};  // per socket: its frame in flight is by reference
  std::array<uint64_t, kernels::kSteps> sent_{};  // per slot: step + 1 once in the socket
  uint64_t head_ = 0;
  proxy::OwnNetEvents netEvents_;  // a profiler's NetPlugin events: a frame each, while it is written
};

/// The receiver's end: accepts the sender's sockets, then lands each step in its slot once
/// the kernel has freed it, and publishes tail in step order.
class RecvPump final : public EndPump {
 public:
  RecvPump(const FifoSizes& sizes, int rank, int peer, net::Socket listener, uint64_t nonce, uint64_t commHash,
           int nSockets, std::chrono::seconds timeout)
      : EndPump(sizes, 0, false, rank, peer, ""),
        acceptor_(rank, peer, std::move(listener), nonce, commHash, nSockets, timeout) {
    tracesSteps_ = true;
  }

  void pollSet(std::vector<pollfd>* fds) override {
    if (!acceptor_.listening()) return EndPump::pollSet(fds);
    acceptor_.pollSet(fds);
  }

  bool progress(const pollfd* polled) override {
    polled_ = polled;
    if (broken_) return false;
    if (acceptor_.listening()) return progressAccept();
    bool moved = false;
    const int n = static_cast<int>(sockets_.size());
    if (aborted() && std::find_if(direct_.begin(), direct_.begin() + n, [](char* at) { return at != nullptr; }) !=
                         direct_.begin() + n) {
      broken_ = true;  // the offered buffer is its user's again (send_recv.h)
      return true;
    }
    for (int k = 0; k < n && !broken_; ++k) {
      moved |= readFrames(
          k, [this](int s, FrameReader& r) { return placeData(s, r); },
          [this](int s, const FrameHeader& h) { landData(s, h); });
    }
    if (!broken_ && !writers_[0].busy() && !startFault()) startBye();
    if (!broken_ && write(0, &moved)) noteByeWritten();
    if (trace_.armed()) trace_.stepsDone(kernels::loadAcquire(conn_.head));  // (freed by the kernel)
    return moved;
  }

 private:
  void orphanMore() override { acceptor_.orphan(); }

  bool progressAccept() {
    bool moved = false;
    const Acceptor::State state = acceptor_.progress(&moved);
    if (state == Acceptor::State::kComplete) {
      adoptSockets(acceptor_.takeSockets());
      peerName_ = sockets_[0].peerAddress().toString();
      staging_.assign(sockets_.size(), std::vector<char>(stagingCapacity(sizes_)));
      for (size_t k = 0; k < sockets_.size(); ++k) next_.push_back(k);
      BRAID_INFO(log::kNet, "rank %d: %zu socket(s) from rank %d (%s) connected", rank_, sockets_.size(), peer_,
                 peerName_.c_str());
    } else if (state == Acceptor::State::kTimedOut) {
      lost(acceptor_.timeoutText(), true);
    }
    return moved;
  }

  /// The header of step h.step arrived on socket k: once its slot is free, where it lands.
  bool placeData(int k, FrameReader& r) {
    const FrameHeader& h = r.header;
    if (!checkStep(h, next_[k], "on socket " + std::to_string(k))) return false;
    if (kernels::loadAcquire(conn_.head) + kernels::kSteps <= h.step) return false;  // the kernel still reads it
    const uint64_t slot = h.step % kernels::kSteps;
    direct_[k] = (h.flags & kFrameFlagged) == 0 && !aborted() ? offeredPlace(h) : nullptr;
    r.payload = (h.flags & kFrameFlagged) ? staging_[k].data()
                : direct_[k] != nullptr     ? direct_[k]
                                            : kernels::simpleSlot(conn_, h.step);
    if (trace_.armed()) {
      trace_.stepTaken(h.step, h.bytes);
      netEvents_.startSocket(trace_, h.step, 0, sockets_[static_cast<size_t>(k)].fd(), 1, h.bytes);
    }
    return true;
  }

  /// Where Simple step h lands in the buffer its receive offers (send_recv.h, byReference):
  /// the offer is read as a seqlock (tag, words, tag again) and must cover the whole step;
  /// null when there is none.
  char* offeredPlace(const FrameHeader& h) const {
    const uint64_t tag = kernels::loadAcquire(conn_.offer + kernels::kOfferTag);
    if (tag == 0 || h.step + 1 < tag) return nullptr;
    const uint64_t address = kernels::loadRelaxed(conn_.offer + kernels::kOfferAddress);
    const uint64_t bytes = kernels::loadRelaxed(conn_.offer + kernels::kOfferBytes);
    kernels::fenceFull();
    if (kernels::loadRelaxed(conn_.offer + kernels::kOfferTag) != tag) return nullptr;
    const uint64_t offset = (h.step + 1 - tag) * conn_.simpleStepBytes;
    if (offset >= bytes || bytes - offset < h.bytes) return nullptr;
    return reinterpret_cast<char*>(static_cast<uintptr_t>(address)) + offset;
  }

  /// Step h.step is here: its signature and LL lines, then tail, in step order across the sockets.
  void landData(int k, const FrameHeader& h) {
    landStep(h, staging_[k].data());
    if (direct_[k] != nullptr) {  // (landed in the receiver's buffer: a receive by reference reads it once tail says so)
      kernels::storeRelaxed(conn_.sizes + h.step % kernels::kSteps, h.bytes | kernels::kStepDirect);
      noteDirectStep();
    }
    direct_[k] = nullptr;
    arrived_[h.step % kernels::kSteps] = h.step + 1;
    next_[k] += sockets_.size();
    while (arrived_[tail_ % kernels::kSteps] == tail_ + 1) ++tail_;
    netEvents_.stop(h.step);  // (its payload is here)
    kernels::storeRelease(conn_.tail, tail_);
    if (trace_.armed()) trace_.stepLanded(h.step, h.bytes);
  }

  Acceptor acceptor_;
  std::vector<std::vector<char>> staging_;  // per socket: LL lines until they are complete
  std::vector<uint64_t> next_;
  std::array<char*, kMaxSockets> direct_{};  // per socket: where the frame in progress lands in an offered buffer
  std::array<uint64_t, kernels::kSteps> arrived_{};
  proxy::OwnNetEvents netEvents_;  // a profiler's NetPlugin events: a frame each, while it is read
  uint64_t tail_ = 0;
};

/// The FIFO memory of a network end, as the connector and watchdog see it. Owns the pump,
}  // namespace

std::unique_ptr<FifoMemory> createReceiver(const FifoSizes& sizes, const Settings& settings, int peer, Descriptor* out) {
  if (settings.nSockets < 1 || settings.nSockets > kMaxSockets) {
    fail(ncclInvalidArgument, "socket transport: %d sockets per connection is outside 1..%d (NCCL_SOCKET_NTHREADS x "
                              "NCCL_NSOCKS_PERTHREAD)", settings.nSockets, kMaxSockets);
  }
  net::Socket listener = netend::describeReceiver(Kind::kSocket, sizes, settings.listenAt, static_cast<uint32_t>(settings.nSockets), out);
  auto pump = std::make_unique<RecvPump>(sizes, settings.rank, peer, std::move(listener), out->nonce, settings.commHash,
                                         settings.nSockets, settings.timeout);
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
    // (the connect retries watch the abort word: ncclCommAbort returns within a poll slice)
    net::Socket s = net::Socket::connect(to, deadline, settings.abortFlag);
    const Hello hello{kHelloMagic, kWireVersion, d.nonce, settings.commHash, settings.rank, peer, i, d.nSockets, {}};
    s.sendAll(&hello, sizeof(hello), deadline, settings.abortFlag);
    sockets.push_back(std::move(s));
  }
  BRAID_INFO(log::kNet, "rank %d: connected %u socket(s) to rank %d at %s", settings.rank, d.nSockets, peer,
             to.toString().c_str());
  auto pump = std::make_unique<SendPump>(d.sizes, settings.rank, peer, to.toString(), std::move(sockets));
  return std::make_unique<NetFifo>(d.sizes, std::move(pump), true, settings.abortFlag);
}

}  // namespace braid::transport::socket
