#include "transport/p2p/p2p_transport.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <cstring>

#include "core/status.h"

namespace braid::transport::p2p {

namespace {

// The FIFO memory is shared by its two ends, which belong to different communicators (one
// per rank) that may be destroyed in any order while the other's watchdog still reads the
// fault boxes: a count in the page before the FIFO keeps it until both ends are gone.
constexpr size_t kPrefix = 4096;

std::atomic<int>* countOf(char* base) { return reinterpret_cast<std::atomic<int>*>(base - kPrefix); }

void release(char* base) {
  if (countOf(base)->fetch_sub(1, std::memory_order_acq_rel) == 1) {
    countOf(base)->~atomic();
    std::free(base - kPrefix);
  }
}

class HeapFifo final : public FifoMemory {
 public:
  explicit HeapFifo(const FifoSizes& sizes) : FifoMemory(sizes) {
    char* block = static_cast<char*>(std::aligned_alloc(4096, kPrefix + (sizes.bytes() + 4095) / 4096 * 4096));
    if (block == nullptr) fail(ncclSystemError, "cannot allocate %llu bytes of FIFO memory", (unsigned long long)sizes.bytes());
    new (block) std::atomic<int>(1);
    memory_ = block + kPrefix;
    std::memset(memory_, 0, sizes.bytes());
  }
  ~HeapFifo() override { release(memory_); }
  char* base() const override { return memory_; }

 private:
  char* memory_;
};

class BorrowedFifo final : public FifoMemory {
 public:
  BorrowedFifo(const FifoSizes& sizes, char* memory) : FifoMemory(sizes), memory_(memory) {
    countOf(memory_)->fetch_add(1, std::memory_order_relaxed);
  }
  ~BorrowedFifo() override { release(memory_); }
  char* base() const override { return memory_; }

 private:
  char* memory_;
};

}  // namespace

std::unique_ptr<FifoMemory> create(const FifoSizes& sizes, Descriptor* out) {
  auto memory = std::make_unique<HeapFifo>(sizes);
  std::memset(out, 0, sizeof(*out));
  out->kind = Kind::kP2p;
  out->ownerPid = static_cast<int32_t>(getpid());
  out->address = reinterpret_cast<uint64_t>(memory->base());
  out->bytes = sizes.bytes();
  out->sizes = sizes;
  return memory;
}

std::unique_ptr<FifoMemory> import(const Descriptor& d) {
  if (d.ownerPid != static_cast<int32_t>(getpid())) {
    fail(ncclInternalError, "p2p transport: FIFO of process %d cannot be used by process %d", d.ownerPid, getpid());
  }
  return std::make_unique<BorrowedFifo>(d.sizes, reinterpret_cast<char*>(d.address));
}

}  // namespace braid::transport::p2p
