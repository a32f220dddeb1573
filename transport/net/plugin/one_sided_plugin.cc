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

FrameHeader frameOf(uint32_t type, int ctx) {
  FrameHeader h{};
  h.magic = kFrameMagic;
  h.type = type;
  h.ctx = ctx;
  return h;
}

bool aborted(const uint32_t* word) { return word != nullptr && __atomic_load_n(word, __ATOMIC_ACQUIRE) != 0; }

}  // namespace

PluginCarrier::Bounce::Bounce() {
  memory = static_cast<char*>(std::aligned_alloc(4096, kSlots * kChunkBytes));
  if (memory == nullptr) fail(ncclSystemError, "one-sided: out of memory for %" PRIu64 " bytes of bounce slots", kSlots * kChunkBytes);
}

PluginCarrier::Bounce::~Bounce() { std::free(memory); }

PluginCarrier::PluginCarrier(int rank, int nRanks, int contexts, const uint32_t* abortWord,
                             std::shared_ptr<plugin::NetSession> session, std::function<void(int, int)> arrive)
    : rank_(rank),
      nRanks_(nRanks),
      contexts_(contexts),
      abortWord_(abortWord),
      session_(std::move(session)),
      arrive_(std::move(arrive)),
      send_(nRanks),
      recv_(nRanks),
      lost_(new std::atomic<bool>[nRanks]),
      reasons_(nRanks) {
  for (int r = 0; r < nRanks; ++r) lost_[r].store(false, std::memory_order_relaxed);
}

std::string PluginCarrier::callFailed(const char* call, int result) const {
  return "net plugin " + session_->name() + ": " + call + " returned " +
         plugin::NetSession::resultText(static_cast<ncclResult_t>(result));
}

void PluginCarrier::connect(bootstrap::Bootstrap& channel, const std::vector<bool>& linked,
                            std::chrono::seconds timeout) {
  const int n = nRanks_;
  const int dev = 0;
  const size_t hb = plugin::kNetHandleBytes;
  // handles[owner][peer]: the handle `owner` listens on for `peer`'s connection.
  std::vector<char> handles(size_t(n) * n * hb, 0);
  std::vector<void*> listens(n, nullptr);
  struct CloseListens {  // (NCCL closes a listening comm once its connection is accepted)
    PluginCarrier* self;
    std::vector<void*>* listens;
    ~CloseListens() {
      auto held = proxy::hold();
      for (void*& l : *listens) {
        if (l != nullptr) self->session_->closeListen(l);
        l = nullptr;
      }
    }
  } closeListens{this, &listens};
  std::vector<char> scratch(kHandleScratch);
  for (int r = 0; r < n; ++r) {
    if (!linked[r]) continue;
    send_[r] = std::make_unique<Sending>();
    recv_[r] = std::make_unique<Receiving>();
    std::fill(scratch.begin(), scratch.end(), 0);
    ncclResult_t res;
    {
      auto held = proxy::hold();
      res = session_->listen(dev, scratch.data(), &listens[r]);
    }
    if (res != ncclSuccess) fail(ncclSystemError, "one-sided: %s (device %d)", callFailed("listen", res).c_str(), dev);
    std::memcpy(&handles[(size_t(rank_) * n + r) * hb], scratch.data(), hb);
  }
  channel.allGather(handles.data(), size_t(n) * hb);

  // Connect and accept, each call alone with the proxy held (thread ranks of one process share
  // it), until every comm exists. Every rank calls connect once for each peer before any rank
  // calls accept (the barrier): as in NCCL's setup rounds, since some plugins' accept blocks
  // until the connection has come. Connect is then tried again beside accept, as a plugin's
  // connect may need the peer's accept to progress.
  std::vector<std::vector<char>> connecting(n);  // (a plugin may keep its connect's state in the handle)
  for (int r = 0; r < n; ++r) {
    if (!linked[r]) continue;
    connecting[r].assign(kHandleScratch, 0);
    std::memcpy(connecting[r].data(), &handles[(size_t(r) * n + rank_) * hb], hb);
  }
  auto tryConnect = [&](int r) {
    ncclResult_t res;
    {
      auto held = proxy::hold();
      res = session_->connect(dev, connecting[r].data(), &send_[r]->comm);
    }
    if (res != ncclSuccess) fail(ncclSystemError, "one-sided: %s connecting to rank %d", callFailed("connect", res).c_str(), r);
    return send_[r]->comm != nullptr;
  };
  for (int r = 0; r < n; ++r) {
    if (linked[r]) tryConnect(r);
  }
  channel.barrier();
  const auto deadline = net::Clock::now() + timeout;
  for (;;) {
    bool pending = false;
    for (int r = 0; r < n; ++r) {
      if (linked[r] && send_[r]->comm == nullptr) pending |= !tryConnect(r);
    }
    for (int r = 0; r < n; ++r) {
      if (!linked[r] || recv_[r]->comm != nullptr) continue;
      ncclResult_t res;
      {
        auto held = proxy::hold();
        res = session_->accept(listens[r], &recv_[r]->comm);
      }
      if (res != ncclSuccess) fail(ncclSystemError, "one-sided: %s accepting rank %d", callFailed("accept", res).c_str(), r);
      pending |= recv_[r]->comm == nullptr;
    }
    if (!pending) break;
    net::checkWait(abortWord_, deadline, "one-sided (net plugin): waiting for the peers' connections");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  for (int r = 0; r < n; ++r) {
    if (!linked[r]) continue;
    auto held = proxy::hold();
    for (auto [comm, bounce] : {std::pair{send_[r]->comm, &send_[r]->bounce}, std::pair{recv_[r]->comm, &recv_[r]->bounce}}) {
      const ncclResult_t res = session_->regMr(comm, bounce->memory, kSlots * kChunkBytes, NCCL_PTR_HOST, &bounce->mhandle);
      if (res != ncclSuccess) fail(ncclSystemError, "one-sided: %s for rank %d", callFailed("regMr", res).c_str(), r);
    }
  }
  BRAID_INFO(log::kNet, "one-sided: rank %d reaches its linked peers through net plugin %s (%d slots of %" PRIu64 " bytes per comm)",
             rank_, session_->name().c_str(), kSlots, kChunkBytes);
  proxy::attach(this);
  attached_ = true;
}

PluginCarrier::~PluginCarrier() {
  if (orphaned_) {
    if (attached_) proxy::detach(this);
    return;
  }
  if (!attached_) {  // setup failed: no data call was made, nothing is in flight
    auto held = proxy::hold();
    for (auto& s : send_) {
      if (s == nullptr || s->comm == nullptr) continue;
      if (s->bounce.mhandle != nullptr) session_->deregMr(s->comm, s->bounce.mhandle);
      session_->closeSend(s->comm);
    }
    for (auto& r : recv_) {
      if (r == nullptr || r->comm == nullptr) continue;
      if (r->bounce.mhandle != nullptr) session_->deregMr(r->comm, r->bounce.mhandle);
      session_->closeRecv(r->comm);
    }
    return;
  }
  // A goodbye on every send comm: it completes the peer's posted header receive, so the peer
  // can close its comm with nothing in flight, and its waits say this communicator ended.
  const auto until = std::chrono::steady_clock::now() + (aborted(abortWord_) ? kAbortWait : kFinishWait);
  const FrameHeader bye = frameOf(kBye, 0);
  for (auto& s : send_) {
    if (s == nullptr) continue;
    std::lock_guard<std::mutex> lock(s->mutex);
    // (not after an operation cut short by an abort: the peer would take it for payload)
    while (!s->midFrame && !s->broken.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) {
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
  std::lock_guard<std::mutex> lock(windowsMutex_);
  windows_[id] = WindowSpan{static_cast<char*>(buffer), size, std::move(settle)};
}

void PluginCarrier::withdrawWindow(uint64_t id) {
  std::lock_guard<std::mutex> lock(windowsMutex_);  // (waits for bytes landing in it now)
  windows_.erase(id);
}

std::string PluginCarrier::lostReason(int peer) const {
  std::lock_guard<std::mutex> lock(reasonMutex_);
  return reasons_[peer];
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
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

// ---- the proxy thread's side ----

bool PluginCarrier::progress(const pollfd*) {
  if (orphaned_) return false;
  bool moved = false;
  for (int r = 0; r < nRanks_; ++r) {
    if (send_[r] != nullptr && !send_[r]->closed) moved |= pumpSend(r, *send_[r]);
    if (recv_[r] != nullptr && !recv_[r]->closed) moved |= pumpReceive(r, *recv_[r]);
  }
  if (closing_.load(std::memory_order_acquire) && !released_.load(std::memory_order_relaxed) && closeFinished()) {
    released_.store(true, std::memory_order_release);
    moved = true;
  }
  return moved;
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
  {
    std::lock_guard<std::mutex> lock(windowsMutex_);
    const auto it = windows_.find(h.window);
    // (the span checkFrame accepted, unless the window went away since)
    if (!r.dropped && it != windows_.end() && h.offset <= it->second.size && h.bytes <= it->second.size - h.offset) {
      std::memcpy(it->second.buffer + h.offset + r.landed, slot, size);
    } else {
      r.dropped = true;
    }
  }
  r.landed += size;
  if (r.landed < h.bytes) return;
  if (r.dropped) {
    BRAID_WARN("one-sided: rank %d's put of %" PRIu64 " bytes into window id %#" PRIx64
               " arrived after rank %d deregistered that window; dropped",
               from, h.bytes, h.window, rank_);
  } else if (settleLanded(windowsMutex_, windows_, h, rank_)) {
    arrive_(from, h.ctx);  // (release: the bytes copied above are visible to the wait that sees it)
    arrivals_.fetch_add(1, std::memory_order_relaxed);
  }
  r.frame = FrameHeader{};
  r.landed = 0;
  r.dropped = false;
}

bool PluginCarrier::acceptHeader(int from, Receiving& r, const FrameHeader& h) {
  std::string refused;
  {
    std::lock_guard<std::mutex> lock(windowsMutex_);
    const auto it = windows_.find(h.window);
    refused = checkFrame(h, from, contexts_, it == windows_.end() ? nullptr : &it->second);
  }
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
  {
    std::lock_guard<std::mutex> lock(reasonMutex_);
    reasons_[from] = why;
  }
  lost_[from].store(true, std::memory_order_release);
  // Nothing in flight (a refused header, a goodbye): the comm closes now, which also ends the
  // peer's sends on it, so that a refused peer's puts fail instead of waiting for room.
  if (r.posted == r.done && !r.closed) {
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
