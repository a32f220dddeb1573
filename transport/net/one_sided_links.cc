#include "transport/net/one_sided_links.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <thread>

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

/// Hello.index: what a connection to a listener is for.
constexpr uint32_t kLinkHello = 0;   // a link from the Hello's origin
constexpr uint32_t kProbeHello = 1;  // a wait's check that the listener still answers; closed at once

/// FrameHeader.reserved of a kBye: the origin closed an idle link to make room (maxP2pPeers) and
/// may open another: the target forgets the link without counting the origin as lost.
constexpr uint32_t kByePause = 1;

/// The target's answer to a link's Hello: the link is adopted (a target never refuses one, as
/// maxP2pPeers never fails a put in NCCL).
constexpr uint32_t kVerdictMagic = 0x4f535256;  // "VRSO"
struct Verdict {
  uint32_t magic;
  int32_t reserved;
  int32_t open;  ///< the target's incoming links open, this one included
  int32_t bound;
};

/// Connections whose Hello the proxy reads at once, and how long it waits for one.
constexpr size_t kMaxPending = 16;
constexpr auto kHelloWait = std::chrono::seconds(5);
/// How often a wait on a peer with no link open checks that the peer's listener answers.
constexpr auto kProbeEvery = std::chrono::milliseconds(500);

/// Payload bytes the proxy reads from one link in one pass, so that a large put does not keep
/// the other links (and the FIFO connections) waiting.
constexpr uint64_t kPassBytes = 4 << 20;

}  // namespace

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
      linkOpen_(new std::atomic<bool>[nRanks]),
      lost_(nRanks),
      probedAt_(nRanks) {
  for (int r = 0; r < nRanks; ++r) linkOpen_[r].store(false, std::memory_order_relaxed);
}

Links::~Links() {
  if (attached_) proxy::detach(this);
  // A goodbye on every outgoing link, where it fits without waiting: the peer's waits then say
  // this communicator ended rather than that the link was lost.
  const FrameHeader bye = frameOf(kBye, 0);
  for (auto& out : out_) {
    if (out == nullptr) continue;
    std::lock_guard<std::mutex> lock(out->mutex);
    if (!out->socket.valid()) continue;
    (void)out->socket.writeSome(&bye, sizeof bye);
    ::shutdown(out->socket.fd(), SHUT_WR);
  }
}

void Links::open(bootstrap::Bootstrap& channel, const std::vector<bool>& linked, net::SocketAddress listenAt,
                 int maxPeers, std::chrono::seconds timeout) {
  listenAt.setPort(0);
  net::Socket listener = net::Socket::listen(listenAt, 64);
  std::vector<Invitation> invitations(nRanks_);
  invitations[rank_] = Invitation{listener.localAddress().pack(), std::max(maxPeers, 0), process::random64()};
  channel.allGather(invitations.data(), sizeof(Invitation));
  start(std::move(listener), invitations, linked, timeout);
}

void Links::start(net::Socket listener, const std::vector<Invitation>& invitations, const std::vector<bool>& linked,
                  std::chrono::seconds timeout) {
  timeout_ = timeout;
  invitations_ = invitations;
  linked_ = linked;
  // (a wait probes a peer only once it has lasted kProbeEvery: short waits connect nowhere)
  probedAt_.assign(nRanks_, net::Clock::now());
  listener_ = std::move(listener);
  // NCCL sizes point-to-point by the largest maxP2pPeers of the ranks (a rank without one: all).
  int largest = 0;
  for (const Invitation& i : invitations_) largest = std::max(largest, i.maxPeers > 0 ? i.maxPeers : nRanks_);
  bound_ = std::max(1, std::min(largest, nRanks_ - 1));
  for (int r = 0; r < nRanks_; ++r) {
    if (linked[r] && r != rank_) out_[r] = std::make_unique<Outgoing>();
  }
  proxy::attach(this);
  attached_ = true;
}

int Links::outgoingOpen() const {
  std::lock_guard<std::mutex> lock(slotsMutex_);
  return outgoingOpen_;
}

void Links::publishWindow(uint64_t id, void* buffer, uint64_t size, Settle settle) {
  windows_.publish(id, buffer, size, std::move(settle));
}

void Links::withdrawWindow(uint64_t id) { windows_.withdraw(id); }

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
  ensureOpen(peer, out);
  out.lastUse.store(useClock_.fetch_add(1, std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  send(peer, out, &h, sizeof h);
  if (h.bytes > 0) send(peer, out, payload, h.bytes);
}

void Links::ensureOpen(int peer, Outgoing& out) {
  if (out.socket.valid()) return;
  const auto deadline = net::Clock::now() + timeout_;
  makeRoom(peer, deadline);
  try {
    net::Socket s = net::Socket::connect(net::SocketAddress::unpack(invitations_[peer].listen), deadline,
                                         abortWord_, {}, /*refusedIsFinal=*/true);
    netend::Hello hello{netend::kHelloMagic, netend::kWireVersion, invitations_[peer].nonce, commHash_, rank_, peer,
                        kLinkHello, 1, {}};
    std::memcpy(hello.extra, kHelloTag, sizeof kHelloTag);
    s.sendAll(&hello, sizeof hello, deadline, abortWord_);
    Verdict verdict{};
    s.recvAll(&verdict, sizeof verdict, deadline, abortWord_);
    if (verdict.magic != kVerdictMagic) {
      fail(ncclRemoteError, "rank %d answered the one-sided link's hello with magic %#x", peer, verdict.magic);
    }
    out.socket = std::move(s);
  } catch (const Error& e) {
    {
      std::lock_guard<std::mutex> lock(slotsMutex_);
      --outgoingOpen_;
    }
    if (abortWord_ != nullptr && __atomic_load_n(abortWord_, __ATOMIC_ACQUIRE) != 0) {
      fail(ncclInvalidUsage, "the communicator was aborted while connecting to rank %d", peer);
    }
    if (e.code() == ncclInvalidUsage) throw;
    fail(e.code() == ncclTimeout ? ncclTimeout : ncclRemoteError,
         "cannot open the one-sided link to rank %d (%s): its communicator ended, its process died or the network "
         "failed",
         peer, e.what());
  }
  std::lock_guard<std::mutex> lock(slotsMutex_);
  out.open = true;
}

void Links::makeRoom(int peer, net::Clock::time_point deadline) {
  for (;;) {
    std::unique_lock<std::mutex> slots(slotsMutex_);
    if (outgoingOpen_ < bound_) {
      ++outgoingOpen_;
      return;
    }
    // The least recently used link that no thread is writing on: its slot becomes this one's.
    std::vector<std::pair<uint64_t, int>> open;
    for (int r = 0; r < nRanks_; ++r) {
      if (r != peer && out_[r] != nullptr && out_[r]->open) {
        open.emplace_back(out_[r]->lastUse.load(std::memory_order_relaxed), r);
      }
    }
    std::sort(open.begin(), open.end());
    for (const auto& [lastUse, r] : open) {
      Outgoing& victim = *out_[r];
      std::unique_lock<std::mutex> idle(victim.mutex, std::try_to_lock);
      if (!idle.owns_lock()) continue;
      victim.open = false;
      net::Socket closing = std::move(victim.socket);
      idle.unlock();
      slots.unlock();
      // The pause goodbye: the target drains this link and forgets it (not lost); a later link
      // from this rank is adopted only after that, so frames keep their order.
      FrameHeader bye = frameOf(kBye, 0);
      bye.reserved = kByePause;
      try {
        closing.sendAll(&bye, sizeof bye, deadline, abortWord_);
      } catch (const Error& e) {
        BRAID_WARN("one-sided: rank %d could not say goodbye on its idle link to rank %d (%s)", rank_, r, e.what());
      }
      ::shutdown(closing.fd(), SHUT_WR);
      return;
    }
    slots.unlock();
    net::checkWait(abortWord_, deadline,
                   "one-sided links: waiting for an idle link to close (maxP2pPeers links are open and busy)");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// ---- the proxy thread's side ----

void Links::pollSet(std::vector<pollfd>* fds) {
  const size_t base = fds->size();  // (progress gets this pump's entries only)
  listenerPolledAt_ = -1;
  for (int r = 0; r < nRanks_; ++r) polledAt_[r] = -1;
  if (orphaned_) return;
  // (while every pending slot holds a complete Hello waiting for its origin's old link, new
  // connections wait in the backlog: a readable listener would only spin the thread)
  const bool room = pending_.size() < kMaxPending ||
                    std::any_of(pending_.begin(), pending_.end(),
                                [](const Pending& p) { return p.done < sizeof p.hello; });
  if (listener_.valid() && room) {
    listenerPolledAt_ = static_cast<int>(fds->size() - base);
    fds->push_back(pollfd{listener_.fd(), POLLIN, 0});
  }
  for (const Pending& p : pending_) {
    if (p.done < sizeof p.hello) fds->push_back(pollfd{p.socket.fd(), POLLIN, 0});
  }
  for (int r = 0; r < nRanks_; ++r) {
    Incoming* in = in_[r].get();
    if (in == nullptr || in->closed) continue;
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
  // (after the links: a link that just said its pausing goodbye lets its origin's next one in)
  return serveListener(listenerPolledAt_ >= 0 && polled[listenerPolledAt_].revents != 0) || moved;
}

bool Links::serveListener(bool readable) {
  bool moved = false;
  for (int accepted = 0; readable && accepted < static_cast<int>(kMaxPending); ++accepted) {
    net::Socket s = listener_.tryAccept();
    if (!s.valid()) break;
    moved = true;
    if (pending_.size() >= kMaxPending) {  // the oldest connection still owing its Hello goes
      const auto oldest = std::find_if(pending_.begin(), pending_.end(),
                                       [](const Pending& p) { return p.done < sizeof p.hello; });
      if (oldest == pending_.end()) break;  // (s is closed: its origin sees the link refused)
      BRAID_WARN_STRANGER(
          "one-sided links: rank %d dropped a connection to its listener that sent no hello while %zu newer ones "
          "waited",
          rank_, kMaxPending);
      pending_.erase(oldest);
    }
    pending_.push_back(Pending{std::move(s), {}, 0, net::Clock::now()});
  }
  for (size_t i = 0; i < pending_.size();) {
    if (readHello(pending_[i])) {
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
      moved = true;
    } else {
      ++i;
    }
  }
  return moved;
}

bool Links::readHello(Pending& p) {
  if (p.done < sizeof p.hello) {
    const ssize_t n = p.socket.readSome(reinterpret_cast<char*>(&p.hello) + p.done, sizeof p.hello - p.done);
    if (n < 0) {
      BRAID_WARN_STRANGER("one-sided links: a connection to rank %d's listener closed before its hello", rank_);
      return true;
    }
    p.done += static_cast<size_t>(n);
    if (p.done < sizeof p.hello) {
      if (net::Clock::now() - p.since < kHelloWait) return false;
      BRAID_WARN_STRANGER("one-sided links: rank %d dropped a connection to its listener that sent no hello in %d s",
                          rank_, static_cast<int>(kHelloWait.count()));
      return true;
    }
  }
  const netend::Hello& h = p.hello;
  const bool ours = h.magic == netend::kHelloMagic && h.version == netend::kWireVersion &&
                    h.nonce == invitations_[rank_].nonce && h.commHash == commHash_ && h.to == rank_ &&
                    h.from >= 0 && h.from < nRanks_ && h.from != rank_ && linked_[h.from] &&
                    (h.index == kLinkHello || h.index == kProbeHello) &&
                    std::memcmp(h.extra, kHelloTag, sizeof kHelloTag) == 0;
  if (!ours) {
    BRAID_WARN_STRANGER(
        "one-sided links: dropped a connection to rank %d's listener that presented no valid hello", rank_);
    return true;
  }
  if (h.index == kProbeHello) return true;  // (it only checked that this listener answers)
  const int from = h.from;
  if (in_[from] != nullptr && !in_[from]->closed) return false;  // its previous link still drains
  // Beyond the bound the link is adopted all the same: maxP2pPeers sizes NCCL's point-to-point
  // channels and never fails a put, and what a target holds stays bounded without refusing:
  // one link per origin (nRanks - 1), each of which holds one of its origin's `bound_` slots.
  const Verdict verdict{kVerdictMagic, 0, incomingOpen_.load() + 1, bound_};
  if (verdict.open > bound_ && !toldBeyondBound_) {
    toldBeyondBound_ = true;
    BRAID_INFO(log::kInit | log::kNet,
               "one-sided links: rank %d adopts rank %d's link beyond maxP2pPeers (%d incoming links, the bound is "
               "%d): a fan-in keeps one link per origin (said once per communicator)",
               rank_, from, verdict.open, bound_);
  }
  if (p.socket.writeSome(&verdict, sizeof verdict) != static_cast<ssize_t>(sizeof verdict)) {
    return true;  // (a fresh socket takes 16 bytes at once; else its origin went away)
  }
  auto in = std::make_unique<Incoming>();
  in->socket = std::move(p.socket);
  in_[from] = std::move(in);
  ++incomingOpen_;
  linkOpen_[from].store(true, std::memory_order_release);
  return true;
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
      if (in.pausing && in.headerDone == 0) {  // an idle link its origin closed to make room
        in_[from].reset();
        --incomingOpen_;
        linkOpen_[from].store(false, std::memory_order_release);
        return true;
      }
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
  const std::string refused = windows_.check(h, from, contexts_);
  if (!refused.empty()) {
    endLink(from, in, refused, true);
    return false;
  }
  in.headerDone = 0;
  if (h.type == kBye) {
    in.byeReceived = true;
    in.pausing = h.reserved == kByePause;
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
  const bool gone = !windows_.landing(
      h, in.payloadDone, [&](char* to) { n = in.socket.readSome(to, std::min(left, kPassBytes)); });
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
    } else if (windows_.settle(h, rank_)) {
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
  --incomingOpen_;
  linkOpen_[from].store(false, std::memory_order_release);
  markLost(from, why);
}

void Links::markLost(int peer, const std::string& why) const { lost_.mark(peer, why); }

std::string Links::lostReason(int peer) const { return lost_.reason(peer); }

bool Links::lost(int peer) const {
  if (lost_.lost(peer)) return true;
  if (!linkOpen_[peer].load(std::memory_order_acquire)) probe(peer);
  return lost_.lost(peer);
}

void Links::probe(int peer) const {
  // A peer that never linked to this rank (or closed its idle link) says nothing when its
  // communicator ends; its listener closing is what this sees.
  std::unique_lock<std::mutex> lock(probeMutex_, std::try_to_lock);
  if (!lock.owns_lock() || orphaned_ || invitations_.empty()) return;
  const auto now = net::Clock::now();
  if (now - probedAt_[peer] < kProbeEvery) return;
  probedAt_[peer] = now;
  try {
    net::Socket s = net::Socket::connect(net::SocketAddress::unpack(invitations_[peer].listen),
                                         now + std::chrono::seconds(2), abortWord_, {}, /*refusedIsFinal=*/true);
    netend::Hello hello{netend::kHelloMagic, netend::kWireVersion, invitations_[peer].nonce, commHash_, rank_, peer,
                        kProbeHello, 1, {}};
    std::memcpy(hello.extra, kHelloTag, sizeof kHelloTag);
    (void)s.writeSome(&hello, sizeof hello);
  } catch (const Error& e) {
    if (e.code() != ncclRemoteError) return;  // (aborted, or no answer in time: nothing learnt)
    char why[240];
    std::snprintf(why, sizeof why,
                  "rank %d's communicator or process ended (its one-sided listener refuses connections) with no link open to "
                  "this rank",
                  peer);
    markLost(peer, why);
  }
}

void Links::orphan() {
  // A forked child: these sockets are the parent's too; close this process's copies only.
  orphaned_ = true;
  listener_.close();
  pending_.clear();
  for (auto& in : in_) {
    if (in != nullptr) in->socket.close();
  }
  for (auto& out : out_) {
    if (out != nullptr) out->socket.close();
  }
}

void Links::broke(const std::string& why) {
  pending_.clear();
  for (int r = 0; r < nRanks_; ++r) {
    if (in_[r] != nullptr && !in_[r]->closed) endLink(r, *in_[r], "the one-sided links failed: " + why, true);
  }
}

}  // namespace braid::transport::onesided
