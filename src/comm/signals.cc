#include "comm/signals.h"

namespace braid::comm {

SignalBoard::SignalBoard(int rank, int nRanks, int contexts)
    : rank_(rank),
      nRanks_(nRanks),
      counters_(new std::atomic<uint64_t>[static_cast<size_t>(contexts) * nRanks]),
      peers_(new std::atomic<std::atomic<uint64_t>*>[nRanks]),
      consumed_(static_cast<size_t>(contexts) * nRanks, 0) {
  for (size_t i = 0; i < consumed_.size(); ++i) counters_[i].store(0, std::memory_order_relaxed);
  for (int r = 0; r < nRanks; ++r) peers_[r].store(nullptr, std::memory_order_relaxed);
  peers_[rank].store(counters_.get(), std::memory_order_release);
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
