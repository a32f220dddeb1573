#include "transport/p2p/p2p_transport.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/status.h"

namespace braid::transport::p2p {

namespace {

// The FIFO memory is shared by its two ends, which belong to different communicators (one
// per rank) that may be destroyed in any order while the other's watchdog still reads the
// fault boxes: a count in the page before the FIFO keeps it until both ends are gone. The page
// also says where the memory came from and where the slots are.
constexpr size_t kPrefix = 4096;
struct Prefix {
  std::atomic<int> count;
  FifoAllocator* allocator;  // null: the heap
  char* data;                // the slots: after the control part, or the allocator's data memory
};
static_assert(sizeof(Prefix) <= kPrefix);

Prefix* prefixOf(char* base) { return reinterpret_cast<Prefix*>(base - kPrefix); }

void release(char* base) {
  Prefix* prefix = prefixOf(base);
  if (prefix->count.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  FifoAllocator* allocator = prefix->allocator;
  char* data = prefix->data;
  prefix->~Prefix();
  if (allocator == nullptr) {
    std::free(base - kPrefix);
    return;
  }
  allocator->freeData(data);
  allocator->freeControl(base - kPrefix);
}

class HeapFifo final : public FifoMemory {
 public:
  HeapFifo(const FifoSizes& sizes, FifoAllocator* allocator) : FifoMemory(sizes) {
    const uint64_t control = allocator == nullptr ? sizes.bytes() : fifoControlBytes();
    const size_t blockBytes = kPrefix + (control + 4095) / 4096 * 4096;
    char* block = static_cast<char*>(allocator == nullptr ? std::aligned_alloc(4096, blockBytes)
                                                          : allocator->allocateControl(blockBytes));
    if (block == nullptr) fail(ncclSystemError, "cannot allocate %llu bytes of FIFO memory", (unsigned long long)sizes.bytes());
    memory_ = block + kPrefix;
    char* data = memory_ + fifoControlBytes();
    if (allocator != nullptr) {
      try {
        data = static_cast<char*>(allocator->allocateData(sizes.bytes() - fifoControlBytes(), false));
      } catch (...) {
        allocator->freeControl(block);
        throw;
      }
    } else {
      std::memset(memory_, 0, sizes.bytes());
    }
    new (block) Prefix{{1}, allocator, data};
  }
  ~HeapFifo() override { release(memory_); }
  char* base() const override { return memory_; }
  char* data() const override { return prefixOf(memory_)->data; }

 private:
  char* memory_;
};

class BorrowedFifo final : public FifoMemory {
 public:
  BorrowedFifo(const FifoSizes& sizes, char* memory) : FifoMemory(sizes), memory_(memory) {
    prefixOf(memory_)->count.fetch_add(1, std::memory_order_relaxed);
  }
  ~BorrowedFifo() override { release(memory_); }
  char* base() const override { return memory_; }
  char* data() const override { return prefixOf(memory_)->data; }

 private:
  char* memory_;
};

}  // namespace

std::unique_ptr<FifoMemory> create(const FifoSizes& sizes, FifoAllocator* allocator, Descriptor* out) {
  auto memory = std::make_unique<HeapFifo>(sizes, allocator);
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
