#include "runtime/host/offered_buffers.h"

#include <unistd.h>

#include "core/log.h"
#include "core/status.h"

namespace braid::runtime::host {

using kernels::kOfferKey;
using kernels::kOfferPid;
using kernels::kOfferSpan;
using kernels::kOfferTag;
using kernels::kOfferToken;

OfferedBuffers::~OfferedBuffers() {
  for (auto& [line, s] : sending_)
    for (const Mapping& m : s.live) device_.closeBuffer(m.base);
  for (const Retired& r : retired_) device_.closeBuffer(r.base);
}

void OfferedBuffers::prepareReceive(kernels::PeerOp& op, bool registered) {
  kernels::storeRelaxed(op.conn.offer + kOfferPid, static_cast<uint64_t>(getpid()));
  op.offerKey = 0;
  if (!registered || op.bytes == 0) return;
  Device::BufferExport where{};
  try {
    if (!device_.exportBuffer(op.buffer, op.bytes, &where)) return;
  } catch (const Error& e) {
    BRAID_INFO(log::kP2p, "rank %d: the registered buffer %p cannot be shared with other processes (%s); senders there "
               "go through the FIFO", rank_, static_cast<void*>(op.buffer), e.what());
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  const char* base = where.base;
  auto it = exported_.find(base);
  if (it == exported_.end() || it->second.where.token != where.token) {  // (new, or the same address allocated again)
    it = exported_.insert_or_assign(base, Exported{++nextKey_, where}).first;
  }
  op.offerKey = it->second.key;
  op.offerToken = where.token;
  op.offerOffset = static_cast<uint64_t>(op.buffer - base);
  op.offerSpan = where.bytes;
}

uint32_t OfferedBuffers::prepareSend(const kernels::ConnHandle& conn, bool captured,
                                     std::vector<kernels::MappedBuffer>* table) {
  std::lock_guard<std::mutex> lock(mutex_);
  sweep();
  Sending& s = sending_[conn.offer];
  applyRevocations(conn, s);
  importOffered(conn, s);
  if (captured) return 0;
  for (const Mapping& m : s.live) table->push_back(kernels::MappedBuffer{m.key, m.base, m.bytes, 0});
  return static_cast<uint32_t>(s.live.size());
}

void OfferedBuffers::applyRevocations(const kernels::ConnHandle& conn, Sending& s) {
  transport::RevokeLine* line = transport::revocationsOf(conn);
  const uint64_t count = kernels::loadAcquire(&line->count);
  if (count == s.revocationsSeen) return;
  std::vector<uint64_t> keys;
  for (uint64_t i = s.revocationsSeen; i < count && count - s.revocationsSeen < transport::kRevokeSlots; ++i)
    keys.push_back(kernels::loadRelaxed(&line->keys[i % transport::kRevokeSlots]));
  kernels::fenceFull();
  // Too many since the last look (or the receiver wrote more while these were read): which
  // keys went is unknown, so every mapping goes.
  const bool all = kernels::loadRelaxed(&line->count) - s.revocationsSeen >= transport::kRevokeSlots;
  s.revocationsSeen = count;
  for (uint64_t key : keys) s.refused.insert(key);
  for (size_t i = 0; i < s.live.size();) {
    const Mapping& m = s.live[i];
    if (!all && s.refused.count(m.key) == 0) {
      ++i;
      continue;
    }
    s.refused.insert(m.key);
    retired_.push_back(Retired{m.base, device_.launchMark()});
    s.live.erase(s.live.begin() + static_cast<long>(i));
  }
}

void OfferedBuffers::importOffered(const kernels::ConnHandle& conn, Sending& s) {
  uint64_t* line = conn.offer;
  const uint64_t tag = kernels::loadAcquire(line + kOfferTag);
  if (tag == 0) return;
  const uint64_t key = kernels::loadRelaxed(line + kOfferKey);
  const uint64_t token = kernels::loadRelaxed(line + kOfferToken);
  const uint64_t span = kernels::loadRelaxed(line + kOfferSpan);
  const uint64_t pid = kernels::loadRelaxed(line + kOfferPid);
  kernels::fenceFull();
  if (kernels::loadRelaxed(line + kOfferTag) != tag) return;  // rewritten meanwhile: the next launch looks again
  if (key == 0 || s.refused.count(key) != 0 || s.live.size() >= kMaxMapped) return;
  for (const Mapping& m : s.live)
    if (m.key == key) return;
  try {
    void* base = device_.importBuffer(static_cast<int>(pid), token, span);
    s.live.push_back(Mapping{key, static_cast<char*>(base), span});
    BRAID_INFO(log::kP2p, "rank %d: sends to rank %d go straight into its registered buffer %llu (%llu bytes of "
               "process %d's memory, mapped at %p)", rank_, conn.peer, static_cast<unsigned long long>(key),
               static_cast<unsigned long long>(span), static_cast<int>(pid), base);
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
    device_.closeBuffer(retired_[i].base);
    retired_.erase(retired_.begin() + static_cast<long>(i));
  }
}

void OfferedBuffers::registrationEnded(const void* buffer, size_t bytes,
                                       const std::function<bool(const void*, size_t)>& overlapping,
                                       const std::vector<transport::RevokeLine*>& lines) {
  const char* from = static_cast<const char*>(buffer);
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = exported_.begin(); it != exported_.end();) {
    const Device::BufferExport& w = it->second.where;
    const bool touches = bytes > 0 && from < w.base + w.bytes && w.base < from + bytes;
    if (!touches || overlapping(w.base, w.bytes)) {
      ++it;
      continue;
    }
    for (transport::RevokeLine* line : lines) {
      const uint64_t count = kernels::loadRelaxed(&line->count);
      kernels::storeRelaxed(&line->keys[count % transport::kRevokeSlots], it->second.key);
      kernels::storeRelease(&line->count, count + 1);
    }
    it = exported_.erase(it);
  }
}

size_t OfferedBuffers::mappedNow() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t n = retired_.size();
  for (const auto& [line, s] : sending_) n += s.live.size();
  return n;
}

}  // namespace braid::runtime::host
