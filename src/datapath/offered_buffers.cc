#include "datapath/offered_buffers.h"

#include <unistd.h>

#include <algorithm>

#include "core/fd_exchange.h"
#include "core/log.h"
#include "core/status.h"

namespace braid::datapath {

using kernels::kOfferKey;
using kernels::kOfferPid;
using kernels::kOfferServer;
using kernels::kOfferSpan;
using kernels::kOfferTag;
using kernels::kOfferToken;

namespace {

/// The keys a receiver publishes on `line`; false when it was being rewritten (look again later).
bool readKeys(transport::OfferedKeys* line, std::vector<uint64_t>* keys) {
  const uint64_t seq = kernels::loadAcquire(&line->seq);
  if (seq & 1) return false;
  const uint64_t count = kernels::loadRelaxed(&line->count);
  if (count > static_cast<uint64_t>(transport::kOfferedKeys)) return false;
  keys->clear();
  for (uint64_t i = 0; i < count; ++i) keys->push_back(kernels::loadRelaxed(&line->keys[i]));
  kernels::fenceFull();
  return kernels::loadRelaxed(&line->seq) == seq;
}

bool holds(const std::vector<uint64_t>& keys, uint64_t key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

}  // namespace

OfferedBuffers::~OfferedBuffers() {
  for (const auto& [source, shared] : shared_) device_.closeBuffer(shared.base);
}

void OfferedBuffers::prepareReceive(kernels::PeerOp& op, const std::function<bool()>& registered) {
  kernels::storeRelaxed(op.conn.offer + kOfferServer, fds::serverId());
  kernels::storeRelaxed(op.conn.offer + kOfferPid, static_cast<uint64_t>(getpid()));
  op.offerKey = 0;
  std::lock_guard<std::mutex> lock(mutex_);
  bool changed = lines_.insert(transport::offeredKeysOf(op.conn)).second;  // (a new line gets the keys)
  Device::BufferExport where{};
  bool exported = false;
  if (op.bytes > 0 && registered()) {
    try {
      exported = device_.exportBuffer(op.buffer, op.bytes, &where);
    } catch (const Error& e) {
      BRAID_INFO(log::kP2p, "rank %d: the registered buffer %p cannot be shared with other processes (%s); senders "
                 "there go through the FIFO", rank_, static_cast<void*>(op.buffer), e.what());
    }
  }
  if (exported) {
    auto it = exported_.find(where.base);
    if (it != exported_.end() && it->second.where.offer.token != where.offer.token) {  // the address allocated again
      exported_.erase(it);
      it = exported_.end();
      changed = true;
    }
    if (it == exported_.end() && exported_.size() < static_cast<size_t>(transport::kOfferedKeys)) {
      it = exported_.emplace(where.base, Exported{++nextKey_, where}).first;
      changed = true;
    }
    if (it != exported_.end()) {  // (beyond kOfferedKeys allocations: not offered)
      op.offerKey = it->second.key;
      op.offerToken[0] = where.offer.token.word[0];
      op.offerToken[1] = where.offer.token.word[1];
      op.offerOffset = static_cast<uint64_t>(op.buffer - where.base);
      op.offerSpan = where.bytes;
    }
  }
  if (changed) publish();
}

void OfferedBuffers::publish() {
  for (transport::OfferedKeys* line : lines_) {
    const uint64_t seq = kernels::loadRelaxed(&line->seq);
    kernels::storeRelaxed(&line->seq, seq + 1);  // odd: being rewritten
    kernels::fenceFull();
    uint64_t n = 0;
    for (const auto& [base, e] : exported_) kernels::storeRelaxed(&line->keys[n++], e.key);
    kernels::storeRelaxed(&line->count, n);
    kernels::storeRelease(&line->seq, seq + 2);
  }
}

void OfferedBuffers::registrationEnded(const void* buffer, size_t bytes,
                                       const std::function<bool(const void*, size_t)>& overlapping) {
  const char* from = static_cast<const char*>(buffer);
  std::lock_guard<std::mutex> lock(mutex_);
  bool changed = false;
  for (auto it = exported_.begin(); it != exported_.end();) {
    const Device::BufferExport& w = it->second.where;
    const bool touches = bytes > 0 && from < w.base + w.bytes && w.base < from + bytes;
    if (!touches || overlapping(w.base, w.bytes)) {
      ++it;
      continue;
    }
    it = exported_.erase(it);
    changed = true;
  }
  if (changed) publish();
}

void OfferedBuffers::refresh() {
  std::lock_guard<std::mutex> lock(mutex_);
  sweep();
  std::vector<uint64_t> offered;
  for (auto& [line, s] : sending_)
    if (!s.live.empty() && readKeys(s.keys, &offered)) retireWithdrawn(s, offered);
}

uint32_t OfferedBuffers::prepareSend(const kernels::ConnHandle& conn, bool captured,
                                     std::vector<kernels::MappedBuffer>* table) {
  std::lock_guard<std::mutex> lock(mutex_);
  Sending& s = sending_[conn.offer];
  s.keys = transport::offeredKeysOf(conn);
  std::vector<uint64_t> offered;
  if (readKeys(s.keys, &offered)) {  // (being rewritten: nothing changes until the next launch)
    retireWithdrawn(s, offered);
    importOffered(conn, s, offered);
  }
  if (captured) return 0;
  for (const Mapping& m : s.live) table->push_back(kernels::MappedBuffer{m.key, m.base, m.bytes, 0});
  return static_cast<uint32_t>(s.live.size());
}

void OfferedBuffers::retireWithdrawn(Sending& s, const std::vector<uint64_t>& offered) {
  for (size_t i = 0; i < s.live.size();) {
    if (holds(offered, s.live[i].key)) {
      ++i;
      continue;
    }
    retired_.push_back(Retired{s.live[i].source, device_.launchMark()});
    s.live.erase(s.live.begin() + static_cast<long>(i));
  }
}

void OfferedBuffers::importOffered(const kernels::ConnHandle& conn, Sending& s, const std::vector<uint64_t>& offered) {
  uint64_t* line = conn.offer;
  const uint64_t tag = kernels::loadAcquire(line + kOfferTag);
  if (tag == 0) return;
  const uint64_t key = kernels::loadRelaxed(line + kOfferKey);
  fds::Offer from{};
  from.server = kernels::loadRelaxed(line + kOfferServer);
  from.token.word[0] = kernels::loadRelaxed(line + kOfferToken);
  from.token.word[1] = kernels::loadRelaxed(line + kOfferToken + 1);
  from.pid = static_cast<int32_t>(kernels::loadRelaxed(line + kOfferPid));
  const uint64_t span = kernels::loadRelaxed(line + kOfferSpan);
  kernels::fenceFull();
  if (kernels::loadRelaxed(line + kOfferTag) != tag) return;  // rewritten meanwhile: the next launch looks again
  if (key == 0 || !holds(offered, key) || s.refused.count(key) != 0 || s.live.size() >= kMaxMapped) return;
  for (const Mapping& m : s.live)
    if (m.key == key) return;
  const Source source{conn.peer, from.server, from.token.word[0], from.token.word[1], span};
  if (auto it = shared_.find(source); it != shared_.end()) {  // (another set to this peer mapped it)
    ++it->second.users;
    s.live.push_back(Mapping{key, it->second.base, span, source});
    return;
  }
  try {
    void* base = device_.importBuffer(from, span);
    shared_.emplace(source, Shared{static_cast<char*>(base), 1});
    s.live.push_back(Mapping{key, static_cast<char*>(base), span, source});
    BRAID_INFO(log::kP2p, "rank %d: sends to rank %d go straight into its registered buffer %llu (%llu bytes of "
               "process %d's memory, mapped at %p)", rank_, conn.peer, static_cast<unsigned long long>(key),
               static_cast<unsigned long long>(span), static_cast<int>(from.pid), base);
  } catch (const Error& e) {
    s.refused.insert(key);
    BRAID_INFO(log::kP2p, "rank %d: cannot map rank %d's registered buffer %llu (%s); sends there go through the FIFO",
               rank_, conn.peer, static_cast<unsigned long long>(key), e.what());
  }
}

void OfferedBuffers::sweep() {
  for (size_t i = 0; i < retired_.size();) {
    if (!device_.launchesDone(retired_[i].mark)) {
      ++i;
      continue;
    }
    const auto it = shared_.find(retired_[i].source);
    if (it != shared_.end() && --it->second.users == 0) {
      device_.closeBuffer(it->second.base);
      shared_.erase(it);
    }
    retired_.erase(retired_.begin() + static_cast<long>(i));
  }
}

size_t OfferedBuffers::mappedNow() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return shared_.size();
}

}  // namespace braid::datapath
