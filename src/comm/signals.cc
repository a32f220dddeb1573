#include "comm/signals.h"

#include <new>

namespace braid::comm {

SignalBoard::SignalBoard(int rank, int nRanks, int contexts)
    : rank_(rank),
      nRanks_(nRanks),
      bytes_(static_cast<size_t>(contexts) * nRanks * sizeof(std::atomic<uint64_t>)),
      counters_(static_cast<std::atomic<uint64_t>*>(memfiles::allocate(bytes_))),
      peers_(new std::atomic<std::atomic<uint64_t>*>[nRanks]),
      consumed_(static_cast<size_t>(contexts) * nRanks, 0) {
  static_assert(std::atomic<uint64_t>::is_always_lock_free,
                "counters shared between processes must be lock-free");
  for (size_t i = 0; i < consumed_.size(); ++i) new (&counters_[i]) std::atomic<uint64_t>(0);
  for (int r = 0; r < nRanks; ++r) peers_[r].store(nullptr, std::memory_order_relaxed);
  peers_[rank].store(counters_, std::memory_order_release);
}

SignalBoard::~SignalBoard() {
  memfiles::release(counters_);
}

fds::Offer SignalBoard::offer() const {
  fds::Offer out{};
  size_t offset = 0;
  memfiles::offer(counters_, bytes_, &out, &offset);
  return out;
}

void SignalBoard::map(int rank, const fds::Offer& from) {
  auto mapping = std::make_unique<memfiles::Mapping>(from, 0, bytes_);
  learn(rank, reinterpret_cast<uint64_t>(mapping->data()));
  std::lock_guard<std::mutex> lock(mutex_);
  mapped_.push_back(std::move(mapping));
}

void SignalBoard::learn(int rank, uint64_t address) {
  peers_[rank].store(reinterpret_cast<std::atomic<uint64_t>*>(address), std::memory_order_release);
}

void SignalBoard::bump(int peer, int ctx) {
  std::atomic<uint64_t>* theirs = peers_[peer].load(std::memory_order_acquire);
  theirs[slot(ctx, rank_)].fetch_add(1, std::memory_order_release);
}

uint64_t SignalBoard::expect(int peer, int ctx, int opCnt) {
  std::lock_guard<std::mutex> lock(mutex_);
  return consumed_[slot(ctx, peer)] += static_cast<uint64_t>(opCnt);
}

uint64_t SignalBoard::consumed(int peer, int ctx) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return consumed_[slot(ctx, peer)];
}

}  // namespace braid::comm
