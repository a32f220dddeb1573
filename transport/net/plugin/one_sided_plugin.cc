#include "transport/net/plugin/one_sided_plugin.h"

#include <nccl_net.h>

#include <algorithm>
#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "bootstrap/bootstrap.h"
#include "core/log.h"
#include "core/socket.h"
#include "core/status.h"
#include "plugin/net_plugin.h"

namespace braid::transport::onesided {

namespace {

constexpr int kTag = 0x42534f50;  // every message of these comms carries it ("BSOP")
constexpr size_t kHandleScratch = 4096;  // what listen and connect get to write a handle into

/// How long a wait gives the plugin path from a peer whose control path ended to deliver what
/// the peer sent before it left (its goodbye comes last).
constexpr std::chrono::milliseconds kLeftGrace{2000};

int64_t steadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool aborted(const uint32_t* word) { return word != nullptr && __atomic_load_n(word, __ATOMIC_ACQUIRE) != 0; }

}  // namespace

void PluginCarrier::Bounce::allocate() {
  memory = static_cast<char*>(std::aligned_alloc(4096, kSlots * kChunkBytes));
  if (memory == nullptr) fail(ncclSystemError, "one-sided: out of memory for %" PRIu64 " bytes of bounce slots", kSlots * kChunkBytes);
}

PluginCarrier::Bounce::~Bounce() { std::free(memory); }

PluginCarrier::PluginCarrier(int rank, int nRanks, int contexts, uint64_t commHash, const uint32_t* abortWord,
                             std::shared_ptr<plugin::NetSession> session, std::vector<int> devices,
                             std::function<void(int, int)> arrive)
    : rank_(rank),
      nRanks_(nRanks),
      contexts_(contexts),
      commHash_(commHash),
      abortWord_(abortWord),
      session_(std::move(session)),
      devices_(std::move(devices)),
      arrive_(std::move(arrive)),
      knocked_(new std::atomic<bool>[nRanks]),
      controlLostAt_(new std::atomic<int64_t>[nRanks]),
      send_(nRanks),
      recv_(nRanks),
      lost_(nRanks) {
  for (int r = 0; r < nRanks; ++r) {
    knocked_[r].store(false, std::memory_order_relaxed);
    controlLostAt_[r].store(0, std::memory_order_relaxed);
  }
}

std::string PluginCarrier::callFailed(const char* call, int result) const {
  return "net plugin " + session_->name() + ": " + call + " returned " +
         plugin::NetSession::resultText(static_cast<ncclResult_t>(result));
}

void PluginCarrier::open(bootstrap::Bootstrap& channel, const std::vector<bool>& linked, net::SocketAddress listenAt,
                         std::chrono::seconds timeout) {
  const int n = nRanks_;
  timeout_ = timeout;
  // The control links: liveness, and the knock (a signal frame) that tells a target to accept.
  control_ = std::make_unique<Links>(rank_, n, 1, commHash_, abortWord_, [this](int from, int) {
    knocked_[from].store(true, std::memory_order_release);
  });
  control_->open(channel, linked, listenAt, 0, timeout);
  const size_t hb = plugin::kNetHandleBytes;
  // handles[owner][peer]: the handle `owner` listens on for `peer`'s connection.
  std::vector<char> handles(size_t(n) * n * hb, 0);
  std::vector<char> scratch(kHandleScratch);
  for (int r = 0; r < n; ++r) {
    if (!linked[r]) continue;
    send_[r] = std::make_unique<Sending>();
    recv_[r] = std::make_unique<Receiving>();
    std::fill(scratch.begin(), scratch.end(), 0);
    ncclResult_t res;
    {
      auto held = proxy::hold();
      res = session_->listen(devices_[r], scratch.data(), &recv_[r]->listen);
    }
    if (res != ncclSuccess) {
      fail(ncclSystemError, "one-sided: %s (device %d, for rank %d)", callFailed("listen", res).c_str(), devices_[r], r);
    }
    std::memcpy(&handles[(size_t(rank_) * n + r) * hb], scratch.data(), hb);
  }
  channel.allGather(handles.data(), size_t(n) * hb);
  for (int r = 0; r < n; ++r) {
    if (!linked[r]) continue;
    send_[r]->handle.assign(kHandleScratch, 0);  // (a plugin may keep its connect's state in the handle)
    std::memcpy(send_[r]->handle.data(), &handles[(size_t(r) * n + rank_) * hb], hb);
  }
  BRAID_INFO(log::kNet, "one-sided: rank %d reaches its linked peers through net plugin %s (comms and %d slots of %"
             PRIu64 " bytes each way made on first use)", rank_, session_->name().c_str(), kSlots, kChunkBytes);
  proxy::attach(this);
  attached_ = true;
}

ncclResult_t PluginCarrier::registerBounce(void* comm, Bounce& bounce) {
  if (bounce.memory == nullptr) {  // (a registration that failed before keeps its memory)
    bounce.allocate();
    bounceBytes_.fetch_add(kSlots * kChunkBytes, std::memory_order_relaxed);
  }
  return session_->regMr(comm, bounce.memory, kSlots * kChunkBytes, NCCL_PTR_HOST, &bounce.mhandle);
}

void PluginCarrier::ensureConnected(int peer, Sending& s) {
  if (s.ready.load(std::memory_order_relaxed)) return;
  checkPeerAlive(peer);
  const int dev = devices_[peer];
  auto tryConnect = [&] {
    ncclResult_t res;
    {
      auto held = proxy::hold();
      res = session_->connect(dev, s.handle.data(), &s.comm);
    }
    if (res != ncclSuccess) {
      fail(ncclRemoteError, "cannot open the one-sided link to rank %d (%s, device %d): its communicator ended, its "
           "process died or the network failed", peer, callFailed("connect", res).c_str(), dev);
    }
    return s.comm != nullptr;
  };
  const auto deadline = net::Clock::now() + timeout_;
  bool connected = s.comm != nullptr || tryConnect();  // (a knock that failed before is tried again)
  // The knock, after the first connect (a plugin's accept may block until the connection is
  // pending) and before the rest (its connect may need the accept to progress). Not with the
  // proxy held: the target may be a thread of this process, whose proxy answers the knock.
  control_->signal(peer, 0);
  while (!connected) {
    net::checkWait(abortWord_, deadline, "one-sided (net plugin): waiting for the target to accept the connection");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    connected = tryConnect();
  }
  ncclResult_t res;
  {
    auto held = proxy::hold();
    res = registerBounce(s.comm, s.bounce);
  }
  if (res != ncclSuccess) fail(ncclSystemError, "one-sided: %s for rank %d", callFailed("regMr", res).c_str(), peer);
  BRAID_INFO(log::kNet, "one-sided: rank %d opened its path to rank %d on net plugin %s device %d (%s)", rank_, peer,
             session_->name().c_str(), dev, session_->properties(dev).name.c_str());
  s.ready.store(true, std::memory_order_release);
}

PluginCarrier::~PluginCarrier() {
  if (orphaned_) {
    if (attached_) proxy::detach(this);
    return;
  }
  struct CloseListens {  // (whatever no peer connected to; after the proxy let go of the carrier)
    PluginCarrier* self;
    ~CloseListens() {
      auto held = proxy::hold();
      for (auto& r : self->recv_) {
        if (r != nullptr && r->listen != nullptr) self->session_->closeListen(r->listen);
        if (r != nullptr) r->listen = nullptr;
      }
    }
  } closeListens{this};
  if (!attached_) return;  // setup failed: no comm was made
  // A goodbye on every send comm: it completes the peer's posted header receive, so the peer
  // can close its comm with nothing in flight, and its waits say this communicator ended.
  const auto until = std::chrono::steady_clock::now() + (aborted(abortWord_) ? kAbortWait : kFinishWait);
  const FrameHeader bye = frameOf(kBye, 0);
  for (auto& s : send_) {
    if (s == nullptr) continue;
    std::lock_guard<std::mutex> lock(s->mutex);
    // (not after an operation cut short by an abort: the peer would take it for payload)
    while (s->ready.load(std::memory_order_relaxed) && !s->midFrame && !s->broken.load(std::memory_order_acquire) &&
           std::chrono::steady_clock::now() < until) {
      const uint64_t m = s->filled.load(std::memory_order_relaxed);
      if (m - s->freed.load(std::memory_order_acquire) < kSlots) {
        std::memcpy(s->bounce.slot(m), &bye, sizeof bye);
        s->sizes[m % kSlots] = sizeof bye;
        s->filled.store(m + 1, std::memory_order_release);
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  closing_.store(true, std::memory_order_release);
  proxy::kick();
  while (!released_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  proxy::detach(this);
  if (released_.load(std::memory_order_acquire)) return;
  // What the proxy could not close (a peer that has not said goodbye, requests still in
  // flight) stays open, and its memory allocated: the plugin may still write there.
  int open = 0;
  for (auto& s : send_) {
    if (s != nullptr && !s->closed) ++open, s->bounce.memory = nullptr;
  }
  for (auto& r : recv_) {
    if (r != nullptr && !r->closed) ++open, r->bounce.memory = nullptr;
  }
  BRAID_INFO(log::kNet, "one-sided: rank %d leaves %d comm(s) of net plugin %s open (a peer has not ended, or requests "
             "are in flight)", rank_, open, session_->name().c_str());
}

void PluginCarrier::publishWindow(uint64_t id, void* buffer, uint64_t size, Settle settle) {
  windows_.publish(id, buffer, size, std::move(settle));
}

void PluginCarrier::withdrawWindow(uint64_t id) { windows_.withdraw(id); }

std::string PluginCarrier::lostReason(int peer) const { return lost_.reason(peer); }

bool PluginCarrier::lost(int peer) const {
  if (lost_.lost(peer)) return true;
  if (control_ == nullptr || !control_->lost(peer)) return false;  // (probes a peer with no control link open)
  // The peer's communicator or process ended. A peer that never connected sent nothing; one
  // that did gets kLeftGrace for its plugin path to deliver what it sent before (its goodbye,
  // which comes last, ends the path sooner), as a plugin may never fail a vanished peer's request.
  if (knocked_[peer].load(std::memory_order_acquire)) {
    int64_t since = controlLostAt_[peer].load(std::memory_order_relaxed);
    if (since == 0) {
      controlLostAt_[peer].compare_exchange_strong(since, steadyNanos());
      return false;
    }
    if (steadyNanos() - since < std::chrono::nanoseconds(kLeftGrace).count()) return false;
  }
  lost_.mark(peer, control_->lostReason(peer));
  return true;
}

void PluginCarrier::checkPeerAlive(int peer) {
  if (!control_->lost(peer)) return;
  fail(ncclRemoteError, "the one-sided link to rank %d broke (%s)", peer, control_->lostReason(peer).c_str());
}

// ---- the caller's side ----

void PluginCarrier::put(int peer, uint64_t window, uint64_t offset, const void* data, uint64_t bytes, int ctx) {
  FrameHeader h = frameOf(kPut, ctx);
  h.window = window;
  h.offset = offset;
  h.bytes = bytes;
  write(peer, h, data);
}

void PluginCarrier::signal(int peer, int ctx) { write(peer, frameOf(kSignal, ctx), nullptr); }

void PluginCarrier::write(int peer, const FrameHeader& h, const void* payload) {
  Sending& s = *send_[peer];
  std::lock_guard<std::mutex> lock(s.mutex);
  ensureConnected(peer, s);
  auto push = [&](const void* from, uint64_t size) {
    waitForSlot(peer, s);
    const uint64_t m = s.filled.load(std::memory_order_relaxed);
    std::memcpy(s.bounce.slot(m), from, size);
    s.sizes[m % kSlots] = size;
    s.filled.store(m + 1, std::memory_order_release);
    proxy::kick();
  };
  s.midFrame = true;  // (until its last message is in a slot: a throw below leaves it so)
  push(&h, sizeof h);
  const char* bytes = static_cast<const char*>(payload);
  for (uint64_t done = 0; done < h.bytes; done += kChunkBytes) push(bytes + done, std::min(kChunkBytes, h.bytes - done));
  s.midFrame = false;
}

void PluginCarrier::waitForSlot(int peer, Sending& s) {
  for (int tries = 0;; ++tries) {
    if (s.broken.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(reasonMutex_);
      fail(ncclRemoteError, "the one-sided path to rank %d broke (%s): its process ended or the network failed", peer,
           s.why.c_str());
    }
    if (aborted(abortWord_)) fail(ncclInvalidUsage, "the communicator was aborted while putting to rank %d", peer);
    if (s.filled.load(std::memory_order_relaxed) - s.freed.load(std::memory_order_acquire) < kSlots) return;
    if (tries < 100) {
      std::this_thread::yield();
    } else {
      if (tries % 64 == 0) proxy::kick();
      // (every ~100 ms: a vanished peer's plugin may never finish or fail the sends)
      if (tries % 4096 == 0) checkPeerAlive(peer);
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

// ---- the proxy thread's side ----

bool PluginCarrier::progress(const pollfd*) {
  if (orphaned_) return false;
  bool moved = false;
  for (int r = 0; r < nRanks_; ++r) {
    Sending* s = send_[r].get();
    if (s != nullptr && !s->closed && s->ready.load(std::memory_order_acquire)) moved |= pumpSend(r, *s);
    Receiving* in = recv_[r].get();
    if (in == nullptr || in->closed || in->ended) continue;
    if (!in->accepted && knocked_[r].load(std::memory_order_acquire)) moved |= tryAccept(r, *in);
    if (in->accepted) moved |= pumpReceive(r, *in);
  }
  if (closing_.load(std::memory_order_acquire) && !released_.load(std::memory_order_relaxed) && closeFinished()) {
    released_.store(true, std::memory_order_release);
    moved = true;
  }
  return moved;
}

bool PluginCarrier::tryAccept(int from, Receiving& r) {
  ncclResult_t res = session_->accept(r.listen, &r.comm);
  if (res != ncclSuccess) {
    endFrom(from, r, "one-sided: " + callFailed("accept", res) + " for rank " + std::to_string(from), true);
    return true;
  }
  if (r.comm == nullptr) return false;  // (not yet: again on a later pass)
  session_->closeListen(r.listen);  // (as NCCL does once its connection is accepted)
  r.listen = nullptr;
  r.accepted = true;
  res = registerBounce(r.comm, r.bounce);
  if (res != ncclSuccess) {
    endFrom(from, r, "one-sided: " + callFailed("regMr", res) + " for rank " + std::to_string(from), true);
    return true;
  }
  BRAID_INFO(log::kNet, "one-sided: rank %d accepted rank %d's path on net plugin %s device %d (%s)", rank_, from,
             session_->name().c_str(), devices_[from], session_->properties(devices_[from]).name.c_str());
  return true;
}

bool PluginCarrier::pumpSend(int peer, Sending& s) {
  if (s.broken.load(std::memory_order_relaxed)) return false;
  bool moved = false;
  const uint64_t filled = s.filled.load(std::memory_order_acquire);
  while (s.posted < filled) {
    const uint64_t m = s.posted;
    void* request = nullptr;
    const ncclResult_t res =
        session_->isend(s.comm, s.bounce.slot(m), s.sizes[m % kSlots], kTag, s.bounce.mhandle, nullptr, &request);
    if (res != ncclSuccess) {
      breakTo(peer, s, callFailed("isend", res));
      return true;
    }
    if (request == nullptr) break;  // (not now: again on a later pass)
    s.requests[m % kSlots] = request;
    ++s.posted;
    moved = true;
  }
  uint64_t freed = s.freed.load(std::memory_order_relaxed);
  while (freed < s.posted) {
    int done = 0;
    size_t size = 0;
    const ncclResult_t res = session_->test(s.requests[freed % kSlots], &done, &size);
    if (res != ncclSuccess) {
      breakTo(peer, s, callFailed("test", res));
      return true;
    }
    if (done == 0) break;
    s.requests[freed % kSlots] = nullptr;
    s.freed.store(++freed, std::memory_order_release);
    moved = true;
  }
  return moved;
}

bool PluginCarrier::pumpReceive(int from, Receiving& r) {
  if (r.ended) return false;
  bool moved = false;
  // Post what is known to come: the current put's payload, then the next header.
  while (r.posted - r.done < kSlots && (r.payloadToPost > 0 || r.headerDue)) {
    const uint64_t size = r.payloadToPost > 0 ? std::min(kChunkBytes, r.payloadToPost) : sizeof(FrameHeader);
    const uint64_t m = r.posted;
    void* request = nullptr;
    const ncclResult_t res = session_->irecv(r.comm, r.bounce.slot(m), size, kTag, r.bounce.mhandle, nullptr, &request);
    if (res != ncclSuccess) {
      endFrom(from, r, callFailed("irecv", res), true);
      return true;
    }
    if (request == nullptr) break;
    r.requests[m % kSlots] = request;
    r.sizes[m % kSlots] = size;
    ++r.posted;
    if (r.payloadToPost > 0) {
      r.payloadToPost -= size;
    } else {
      r.headerDue = false;
    }
    moved = true;
  }
  while (!r.ended && r.done < r.posted) {
    int done = 0;
    size_t size = 0;  // (never read: the plugin may not report it, and the size was known)
    const ncclResult_t res = session_->test(r.requests[r.done % kSlots], &done, &size);
    if (res != ncclSuccess) {
      char why[400];
      std::snprintf(why, sizeof why,
                    "the one-sided path from rank %d failed (%s): its process ended or the network failed", from,
                    callFailed("test", res).c_str());
      endFrom(from, r, why, !r.bye);
      return true;
    }
    if (done == 0) break;
    r.requests[r.done % kSlots] = nullptr;
    received(from, r);
    moved = true;
  }
  return moved;
}

void PluginCarrier::received(int from, Receiving& r) {
  const uint64_t m = r.done++;
  const char* slot = r.bounce.slot(m);
  const uint64_t size = r.sizes[m % kSlots];
  if (r.landed == r.frame.bytes) {  // a header
    FrameHeader h;
    std::memcpy(&h, slot, sizeof h);
    acceptHeader(from, r, h);
    return;
  }
  const FrameHeader& h = r.frame;
  // (the span checkFrame accepted, unless the window went away since)
  if (!r.dropped && !windows_.landing(h, r.landed, [&](char* to) { std::memcpy(to, slot, size); })) r.dropped = true;
  r.landed += size;
  if (r.landed < h.bytes) return;
  if (r.dropped) {
    BRAID_WARN("one-sided: rank %d's put of %" PRIu64 " bytes into window id %#" PRIx64
               " arrived after rank %d deregistered that window; dropped",
               from, h.bytes, h.window, rank_);
  } else if (windows_.settle(h, rank_)) {
    arrive_(from, h.ctx);  // (release: the bytes copied above are visible to the wait that sees it)
    arrivals_.fetch_add(1, std::memory_order_relaxed);
  }
  r.frame = FrameHeader{};
  r.landed = 0;
  r.dropped = false;
}

bool PluginCarrier::acceptHeader(int from, Receiving& r, const FrameHeader& h) {
  const std::string refused = windows_.check(h, from, contexts_);
  if (!refused.empty()) {
    endFrom(from, r, refused, true);
    return false;
  }
  if (h.type == kBye) {
    r.bye = true;
    char why[200];
    std::snprintf(why, sizeof why, "rank %d's communicator was destroyed or aborted (its one-sided path said goodbye)",
                  from);
    endFrom(from, r, why, false);
    return true;
  }
  r.headerDue = true;
  if (h.type == kPut && h.bytes > 0) {
    r.frame = h;
    r.landed = 0;
    r.payloadToPost = h.bytes;
    return true;
  }
  arrive_(from, h.ctx);
  arrivals_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void PluginCarrier::endFrom(int from, Receiving& r, const std::string& why, bool warn) {
  if (warn) BRAID_WARN("one-sided: rank %d: %s", rank_, why.c_str());
  r.ended = true;
  lost_.mark(from, why);
  if (r.comm == nullptr) r.closed = true;  // (never accepted: nothing to close but the listen, at the end)
  // Nothing in flight (a refused header, a goodbye): the comm closes now, which also ends the
  // peer's sends on it, so that a refused peer's puts fail instead of waiting for room.
  if (r.posted == r.done && !r.closed && r.comm != nullptr) {
    if (r.bounce.mhandle != nullptr) session_->deregMr(r.comm, r.bounce.mhandle);
    r.bounce.mhandle = nullptr;
    session_->closeRecv(r.comm);
    r.comm = nullptr;
    r.closed = true;
  }
}

void PluginCarrier::breakTo(int peer, Sending& s, const std::string& why) {
  BRAID_WARN("one-sided: rank %d to rank %d: %s", rank_, peer, why.c_str());
  {
    std::lock_guard<std::mutex> lock(reasonMutex_);
    s.why = why;
  }
  s.broken.store(true, std::memory_order_release);
}

bool PluginCarrier::closeFinished() {
  // A comm whose path failed with a request still in flight is left open, with its memory (the
  // plugin may still write there): closing it could invalidate the device's other comms.
  int abandoned = 0;
  bool all = true;
  for (auto& s : send_) {
    if (s == nullptr || s->closed) continue;
    if (!s->ready.load(std::memory_order_acquire)) {  // never used
      s->closed = true;
      continue;
    }
    const bool idle = s->posted == s->freed.load(std::memory_order_relaxed);
    const bool broken = s->broken.load(std::memory_order_relaxed);
    if (idle && (broken || s->posted == s->filled.load(std::memory_order_acquire))) {
      if (s->bounce.mhandle != nullptr) session_->deregMr(s->comm, s->bounce.mhandle);
      s->bounce.mhandle = nullptr;
      session_->closeSend(s->comm);
      s->comm = nullptr;
      s->closed = true;
    } else if (broken) {
      s->bounce.memory = nullptr;
      s->closed = true;
      ++abandoned;
    } else {
      all = false;
    }
  }
  for (auto& r : recv_) {
    if (r == nullptr || r->closed) continue;
    if (!r->accepted && !r->ended) {  // the peer never connected (its listen closes at the end)
      r->closed = true;
      continue;
    }
    if (r->ended) {  // (with nothing in flight endFrom closed it)
      r->bounce.memory = nullptr;
      r->closed = true;
      ++abandoned;
    } else {
      all = false;  // (closes in endFrom once the peer's goodbye is in)
    }
  }
  if (abandoned > 0) {
    BRAID_INFO(log::kNet, "one-sided: rank %d leaves %d failed comm(s) of net plugin %s open (requests in flight)", rank_,
               abandoned, session_->name().c_str());
  }
  return all;
}

void PluginCarrier::orphan() {
  // A forked child: the comms are the parent's; never call the plugin on them here.
  orphaned_ = true;
  for (auto& s : send_) {
    if (s != nullptr) s->comm = nullptr, s->closed = true;
  }
  for (auto& r : recv_) {
    if (r != nullptr) r->comm = nullptr, r->closed = true;
  }
}

void PluginCarrier::broke(const std::string& why) {
  for (int r = 0; r < nRanks_; ++r) {
    if (recv_[r] != nullptr && !recv_[r]->ended) endFrom(r, *recv_[r], "the one-sided paths failed: " + why, true);
    if (send_[r] != nullptr && !send_[r]->broken.load()) breakTo(r, *send_[r], why);
  }
}

}  // namespace braid::transport::onesided
