// The in-process transport's head (transport/p2p): the sender's credit line, allocated by the
// sender when it imports the receiver's FIFO (from its own allocator: its GPU's memory; else
// its heap), seen at one address by both ends, and freed with the FIFO once both ends are gone
// in either order.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <map>

#include "transport/p2p/p2p_transport.h"

using namespace braid;

namespace {

const transport::FifoSizes kSizes{64 * 1024, 512, 64};

/// Host memory playing a device's, remembering what it handed out and has not had back.
class RecordingAllocator final : public transport::FifoAllocator {
 public:
  void* allocateControl(size_t bytes) override { return zeroed(bytes); }
  void freeControl(void* p) override { std::free(p); }
  void* allocateData(size_t bytes, bool) override {
    void* p = zeroed(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    data_[p] = bytes;
    return p;
  }
  void freeData(void* p) override {
    std::lock_guard<std::mutex> lock(mutex_);
    REQUIRE(data_.erase(p) == 1);
    std::free(p);
  }
  void registerHost(void*, size_t) override {}
  void unregisterHost(void*) override {}
  /// Whether [p, p + bytes) lies in data memory this allocator handed out.
  bool holds(const void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [at, n] : data_) {
      const char* b = static_cast<const char*>(at);
      if (static_cast<const char*>(p) >= b && static_cast<const char*>(p) + bytes <= b + n) return true;
    }
    return false;
  }
  size_t live() {
    std::lock_guard<std::mutex> lock(mutex_);
    return data_.size();
  }

 private:
  static void* zeroed(size_t bytes) {
    void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    REQUIRE(p != nullptr);
    std::memset(p, 0, bytes);
    return p;
  }
  std::mutex mutex_;
  std::map<void*, size_t> data_;
};

}  // namespace

TEST_CASE("p2p: head is the sender's credit line, on its heap, outside the receiver's FIFO", "[p2p]") {
  transport::Descriptor d;
  auto receiver = transport::p2p::create(kSizes, nullptr, &d);
  auto sender = transport::p2p::import(d);
  const kernels::ConnHandle s = sender->handle(true), r = receiver->handle(false);
  CHECK(s.head == r.head);
  CHECK(s.tail == r.tail);
  const char* head = reinterpret_cast<const char*>(s.head);
  const char* fifo = receiver->base();
  CHECK((head < fifo - 4096 || head >= fifo + kSizes.bytes()));  // (the FIFO's block starts a page early)
  CHECK(reinterpret_cast<uintptr_t>(head) % transport::kCreditLineBytes == 0);
  CHECK(*s.head == 0);
  CHECK_FALSE(sender->headWithCounters());
  CHECK(sender->creditData().at == nullptr);  // (host memory: nothing of a device's)
  kernels::storeRelease(r.head, uint64_t{5});
  CHECK(kernels::loadAcquire(s.head) == 5);
}

TEST_CASE("p2p: with allocators, head is the sender's device memory, freed once both ends are gone", "[p2p]") {
  for (const bool senderFirst : {true, false}) {
    RecordingAllocator receiving, sending;
    {
      transport::Descriptor d;
      auto receiver = transport::p2p::create(kSizes, &receiving, &d);
      const size_t receiverAllocations = receiving.live();
      auto sender = transport::p2p::import(d, &sending);
      const kernels::ConnHandle s = sender->handle(true), r = receiver->handle(false);
      CHECK(s.head == r.head);
      CHECK(sending.holds(s.head, transport::kCreditLineBytes));
      CHECK_FALSE(receiving.holds(s.head, sizeof(uint64_t)));
      CHECK(receiving.holds(s.tail, sizeof(uint64_t)));  // (tail stays with the receiver)
      CHECK(sending.live() == 1);
      CHECK(receiving.live() == receiverAllocations);
      CHECK(sender->creditData().at == reinterpret_cast<char*>(s.head));
      CHECK(sender->creditData().bytes == transport::kCreditLineBytes);
      CHECK(receiver->creditData().at == nullptr);  // (the receiver owns no credit line)
      if (senderFirst) {
        sender.reset();
        CHECK(sending.live() == 1);  // the receiver's kernels may still write it
        receiver.reset();
      } else {
        receiver.reset();
        CHECK(sending.live() == 1);
        sender.reset();
      }
    }
    CHECK(sending.live() == 0);
    CHECK(receiving.live() == 0);
  }
}
