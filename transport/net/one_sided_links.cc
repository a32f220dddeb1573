#include "transport/net/one_sided_links.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cinttypes>
#include <cstring>

#include "bootstrap/bootstrap.h"
#include "core/log.h"
#include "core/process.h"
#include "core/status.h"
#include "transport/net/net_end.h"

namespace braid::transport::onesided {

namespace {

/// What a one-sided link's Hello carries in `extra`, so that a FIFO connection's listener and
/// this one never take each other's sockets for their own.
constexpr char kHelloTag[] = "braid one-sided link";

/// Where a rank listens for its peers' links, as the allgather carries it.
struct Invitation {
  net::SocketAddress::Packed listen;
  uint32_t pad;
  uint64_t nonce;
};

FrameHeader frameOf(uint32_t type, int ctx) {
  FrameHeader h{};
  h.magic = kFrameMagic;
  h.type = type;
  h.ctx = ctx;
  return h;
}

/// Payload bytes the proxy reads from one link in one pass, so that a large put does not keep
/// the other links (and the FIFO connections) waiting.
constexpr uint64_t kPassBytes = 4 << 20;

}  // namespace

std::string checkFrame(const FrameHeader& h, int from, int contexts, const WindowSpan* window) {
  char text[320];
  if (h.magic != kFrameMagic) {
    std::snprintf(text, sizeof text, "rank %d sent a frame with magic %#x (not a one-sided frame)", from,
                  h.magic);
    return text;
  }
  if (h.type != kPut && h.type != kSignal && h.type != kBye) {
    std::snprintf(text, sizeof text, "rank %d sent a frame of unknown type %u", from, h.type);
    return text;
  }
  if (h.type == kBye) return "";
  if (h.ctx < 0 || h.ctx >= contexts) {
    std::snprintf(text, sizeof text, "rank %d's signal names ctx %d; this communicator has %d contexts", from,
                  h.ctx, contexts);
    return text;
  }
  if (h.type == kSignal) return "";
  if (window == nullptr) {
    std::snprintf(text, sizeof text,
                  "rank %d's put names window id %#" PRIx64 ", which this rank has not registered", from,
                  h.window);
    return text;
  }
  if (h.offset > window->size || h.bytes > window->size - h.offset) {
    std::snprintf(text, sizeof text,
                  "rank %d's put of %" PRIu64 " bytes at offset %" PRIu64
                  " does not fit this rank's window of %" PRIu64 " bytes: refused, nothing written",
                  from, h.bytes, h.offset, window->size);
    return text;
  }
  return "";
}

Links::Links(int rank, int nRanks, int contexts, uint64_t commHash, const uint32_t* abortWord,
             std::function<void(int, int)> arrive)
    : rank_(rank),
      nRanks_(nRanks),
      contexts_(contexts),
      commHash_(commHash),
      abortWord_(abortWord),
      arrive_(std::move(arrive)),
      out_(nRanks),
      in_(nRanks),
      polledAt_(nRanks, -1),
      lost_(new std::atomic<bool>[nRanks]),
      reasons_(nRanks) {
  for (int r = 0; r < nRanks; ++r) lost_[r].store(false, std::memory_order_relaxed);
}

Links::~Links() {
  // A goodbye on every outgoing link, where it fits without waiting: the peer's waits then say
  // this communicator ended rather than that the link was lost.
  const FrameHeader bye = frameOf(kBye, 0);
  for (auto& out : out_) {
    if (out == nullptr || !out->socket.valid()) continue;
    std::lock_guard<std::mutex> lock(out->mutex);
    (void)out->socket.writeSome(&bye, sizeof bye);
    ::shutdown(out->socket.fd(), SHUT_WR);
  }
  if (attached_) proxy::detach(this);
}

void Links::connect(bootstrap::Bootstrap& channel, const std::vector<bool>& linked,
                    net::SocketAddress listenAt, std::chrono::seconds timeout) {
  listenAt.setPort(0);
  const int expected = static_cast<int>(std::count(linked.begin(), linked.end(), true));
  net::Socket listener = net::Socket::listen(listenAt, std::max(expected, 16));
  std::vector<Invitation> invitations(nRanks_);
  invitations[rank_] = Invitation{listener.localAddress().pack(), 0, process::random64()};
  channel.allGather(invitations.data(), sizeof(Invitation));
  const auto deadline = net::Clock::now() + timeout;

  // Connect first (the peers' kernels complete the handshakes from their backlogs), then accept.
  for (int r = 0; r < nRanks_; ++r) {
    if (!linked[r]) continue;
    auto out = std::make_unique<Outgoing>();
    out->socket =
        net::Socket::connect(net::SocketAddress::unpack(invitations[r].listen), deadline, abortWord_);
    netend::Hello hello{
        netend::kHelloMagic, netend::kWireVersion, invitations[r].nonce, commHash_, rank_, r, 0, 1, {}};
    std::memcpy(hello.extra, kHelloTag, sizeof kHelloTag);
    out->socket.sendAll(&hello, sizeof hello, deadline, abortWord_);
    const int one = 1;
    ::setsockopt(out->socket.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    out_[r] = std::move(out);
  }
  int accepted = 0;
  while (accepted < expected) {
    net::checkWait(abortWord_, deadline, "one-sided links: waiting for the peers' connections");
    net::Socket s = listener.tryAccept();
    if (!s.valid()) {
      pollfd p{listener.fd(), POLLIN, 0};
      ::poll(&p, 1, 10);
      continue;
    }
    netend::Hello hello{};
    try {
      s.recvAll(&hello, sizeof hello, std::min(deadline, net::Clock::now() + std::chrono::seconds(5)),
                abortWord_);
    } catch (const Error& e) {
      BRAID_WARN_STRANGER("one-sided links: dropped a connection to rank %d's listener: %s", rank_, e.what());
      continue;
    }
    const bool ours = hello.magic == netend::kHelloMagic && hello.version == netend::kWireVersion &&
                      hello.nonce == invitations[rank_].nonce && hello.commHash == commHash_ &&
                      hello.to == rank_ && hello.from >= 0 && hello.from < nRanks_ && linked[hello.from] &&
                      in_[hello.from] == nullptr &&
                      std::memcmp(hello.extra, kHelloTag, sizeof kHelloTag) == 0;
    if (!ours) {
      BRAID_WARN_STRANGER(
          "one-sided links: dropped a connection to rank %d's listener that presented no valid hello", rank_);
      continue;
    }
    auto in = std::make_unique<Incoming>();
    in->socket = std::move(s);
    in_[hello.from] = std::move(in);
    ++accepted;
  }
  proxy::attach(this);
  attached_ = true;
}

void Links::publishWindow(uint64_t id, void* buffer, uint64_t size) {
  std::lock_guard<std::mutex> lock(windowsMutex_);
  windows_[id] = WindowSpan{static_cast<char*>(buffer), size};
}

void Links::withdrawWindow(uint64_t id) {
  std::lock_guard<std::mutex> lock(windowsMutex_);  // (waits for bytes landing in it now)
  windows_.erase(id);
}

std::string Links::lostReason(int peer) const {
  std::lock_guard<std::mutex> lock(reasonMutex_);
  return reasons_[peer];
}

void Links::send(int peer, Outgoing& out, const void* data, uint64_t size) {
  try {
    // No deadline of its own: the target's proxy reads as long as it lives, and a dead peer
    // breaks the connection; an abort ends the wait.
    out.socket.sendAll(data, size, net::Clock::time_point::max(), abortWord_);
  } catch (const Error& e) {
    if (abortWord_ != nullptr && __atomic_load_n(abortWord_, __ATOMIC_ACQUIRE) != 0) {
      fail(ncclInvalidUsage, "the communicator was aborted while writing to rank %d", peer);
    }
    fail(ncclRemoteError, "the one-sided link to rank %d broke (%s): its process ended or the network failed",
         peer, e.what());
  }
}

void Links::put(int peer, uint64_t window, uint64_t offset, const void* data, uint64_t bytes, int ctx) {
  FrameHeader h = frameOf(kPut, ctx);
  h.window = window;
  h.offset = offset;
  h.bytes = bytes;
  write(peer, h, data);
}

void Links::signal(int peer, int ctx) {
  write(peer, frameOf(kSignal, ctx), nullptr);
}

void Links::write(int peer, const FrameHeader& h, const void* payload) {
  Outgoing& out = *out_[peer];
  std::lock_guard<std::mutex> lock(out.mutex);
  send(peer, out, &h, sizeof h);
  if (h.bytes > 0) send(peer, out, payload, h.bytes);
}

// ---- the proxy thread's side ----

void Links::pollSet(std::vector<pollfd>* fds) {
  const size_t base = fds->size();  // (progress gets this pump's entries only)
  for (int r = 0; r < nRanks_; ++r) {
    polledAt_[r] = -1;
    Incoming* in = in_[r].get();
    if (in == nullptr || in->closed || orphaned_) continue;
    polledAt_[r] = static_cast<int>(fds->size() - base);
    fds->push_back(pollfd{in->socket.fd(), POLLIN, 0});
  }
}

bool Links::progress(const pollfd* polled) {
  bool moved = false;
  for (int r = 0; r < nRanks_; ++r) {
    if (polledAt_[r] < 0 || polled[polledAt_[r]].revents == 0) continue;
    moved |= readLink(r, *in_[r]);
  }
  return moved;
}

bool Links::readLink(int from, Incoming& in) {
  bool moved = false;
  uint64_t budget = kPassBytes;
  while (!in.closed && budget > 0) {
    if (in.inPayload) {
      const ssize_t n = readPayload(from, in);
      if (n < 0) break;  // (ended)
      if (n == 0) return moved;
      moved = true;
      budget -= std::min<uint64_t>(budget, static_cast<uint64_t>(n));
      continue;
    }
    char* into = reinterpret_cast<char*>(&in.header) + in.headerDone;
    const ssize_t n = in.socket.readSome(into, sizeof(FrameHeader) - in.headerDone);
    if (n == 0) return moved;
    if (n < 0) {
      char why[200];
      if (in.byeReceived) {
        std::snprintf(why, sizeof why,
                      "rank %d's communicator was destroyed or aborted (its one-sided link said goodbye)",
                      from);
      } else {
        std::snprintf(
            why, sizeof why,
            "the one-sided link from rank %d closed without goodbye: its process ended or the network failed",
            from);
      }
      // (no warning: a peer may end its process after its last call; only a wait still
      // counting on it fails, with this text)
      endLink(from, in, why, in.headerDone != 0);
      return true;
    }
    moved = true;
    in.headerDone += static_cast<size_t>(n);
    if (in.headerDone == sizeof(FrameHeader) && !acceptHeader(from, in)) return true;
  }
  return moved;
}

bool Links::acceptHeader(int from, Incoming& in) {
  const FrameHeader& h = in.header;
  std::string refused;
  {
    std::lock_guard<std::mutex> lock(windowsMutex_);
    const auto it = windows_.find(h.window);
    refused = checkFrame(h, from, contexts_, it == windows_.end() ? nullptr : &it->second);
  }
  if (!refused.empty()) {
    endLink(from, in, refused, true);
    return false;
  }
  in.headerDone = 0;
  if (h.type == kBye) {
    in.byeReceived = true;
    return true;
  }
  if (h.type == kPut && h.bytes > 0) {
    in.inPayload = true;
    in.payloadDone = 0;
    return true;
  }
  arrive_(from, h.ctx);
  arrivals_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

ssize_t Links::readPayload(int from, Incoming& in) {
  const FrameHeader& h = in.header;
  const uint64_t left = h.bytes - in.payloadDone;
  ssize_t n = 0;
  bool gone = false;
  {
    std::lock_guard<std::mutex> lock(windowsMutex_);
    const auto it = windows_.find(h.window);
    if (it != windows_.end() && h.offset <= it->second.size && h.bytes <= it->second.size - h.offset) {
      n = in.socket.readSome(it->second.buffer + h.offset + in.payloadDone, std::min(left, kPassBytes));
    } else {
      gone = true;
    }
  }
  if (gone) {  // the window was deregistered while its put arrived: the rest is read and dropped
    discard_.resize(64 << 10);
    n = in.socket.readSome(discard_.data(), std::min<uint64_t>(left, discard_.size()));
  }
  if (n < 0) {
    char why[200];
    std::snprintf(why, sizeof why,
                  "the one-sided link from rank %d closed in the middle of a put (%" PRIu64 " of %" PRIu64
                  " bytes arrived): its process ended or the network failed",
                  from, in.payloadDone, h.bytes);
    endLink(from, in, why, true);
    return -1;
  }
  in.payloadDone += static_cast<uint64_t>(n);
  if (in.payloadDone == h.bytes) {
    in.inPayload = false;
    if (gone) {
      BRAID_WARN("one-sided: rank %d's put of %" PRIu64 " bytes into window id %#" PRIx64
                 " arrived after rank %d deregistered that window; dropped",
                 from, h.bytes, h.window, rank_);
    } else {
      arrive_(from, h.ctx);  // (release: the data read above is visible to the wait that sees it)
      arrivals_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return n;
}

void Links::endLink(int from, Incoming& in, const std::string& why, bool warn) {
  if (warn) BRAID_WARN("one-sided: rank %d: %s", rank_, why.c_str());
  in.closed = true;
  in.socket.close();
  {
    std::lock_guard<std::mutex> lock(reasonMutex_);
    reasons_[from] = why;
  }
  lost_[from].store(true, std::memory_order_release);
}

void Links::orphan() {
  // A forked child: these sockets are the parent's too; close this process's copies only.
  orphaned_ = true;
  for (auto& in : in_) {
    if (in != nullptr) in->socket.close();
  }
  for (auto& out : out_) {
    if (out != nullptr) out->socket.close();
  }
}

void Links::broke(const std::string& why) {
  for (int r = 0; r < nRanks_; ++r) {
    if (in_[r] != nullptr && !in_[r]->closed) endLink(r, *in_[r], "the one-sided links failed: " + why, true);
  }
}

}  // namespace braid::transport::onesided
