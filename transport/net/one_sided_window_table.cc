#include "transport/net/one_sided_window_table.h"

#include <cinttypes>
#include <cstdio>

#include "core/log.h"

namespace braid::transport::onesided {

FrameHeader frameOf(uint32_t type, int ctx) {
  FrameHeader h{};
  h.magic = kFrameMagic;
  h.type = type;
  h.ctx = ctx;
  return h;
}

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

void WindowTable::publish(uint64_t id, void* buffer, uint64_t size, Settle settle) {
  std::lock_guard<std::mutex> lock(mutex_);
  windows_[id] = WindowSpan{static_cast<char*>(buffer), size, std::move(settle)};
}

void WindowTable::withdraw(uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  windows_.erase(id);
}

std::string WindowTable::check(const FrameHeader& h, int from, int contexts) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = windows_.find(h.window);
  return checkFrame(h, from, contexts, it == windows_.end() ? nullptr : &it->second);
}

bool WindowTable::settle(const FrameHeader& h, int rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = windows_.find(h.window);
  if (it == windows_.end()) {  // (withdrawn since its last bytes landed: as a put that came too late)
    BRAID_WARN("one-sided: a put of %" PRIu64 " bytes into window id %#" PRIx64
               " landed as rank %d deregistered that window; dropped",
               h.bytes, h.window, rank);
    return false;
  }
  if (it->second.settle) it->second.settle(h.offset, h.bytes);
  return true;
}

LostPeers::LostPeers(int nRanks) : lost_(new std::atomic<bool>[nRanks]), reasons_(nRanks) {
  for (int r = 0; r < nRanks; ++r) lost_[r].store(false, std::memory_order_relaxed);
}

std::string LostPeers::reason(int peer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reasons_[peer];
}

bool LostPeers::mark(int peer, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (lost_[peer].load(std::memory_order_relaxed)) return false;
    reasons_[peer] = why;
  }
  lost_[peer].store(true, std::memory_order_release);
  return true;
}

}  // namespace braid::transport::onesided
