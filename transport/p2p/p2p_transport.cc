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
  char* counters;            // tail and head: the control part's, or the allocator's data memory
};

// With an allocator (a GPU), tail and head live in its data memory beside the slots (the
// receiver's GPU): the receiver polls tail there, not across the bus in mapped host memory;
// the sender writes tail and reads head there over peer access (its own GPU for ranks that
// share one). Nothing on the host reads them for this transport.
constexpr size_t kCounterBlock = 128;
static_assert(sizeof(Prefix) <= kPrefix);

Prefix* prefixOf(char* base) { return reinterpret_cast<Prefix*>(base - kPrefix); }

void release(char* base) {
  Prefix* prefix = prefixOf(base);
  if (prefix->count.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  FifoAllocator* allocator = prefix->allocator;
  char* data = prefix->data;
  char* counters = prefix->counters;
  prefix->~Prefix();
  if (allocator == nullptr) {
    std::free(base - kPrefix);
    return;
  }
  allocator->freeData(data);
  allocator->freeData(counters);
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
    char* counters = memory_;
    if (allocator != nullptr) {
      try {
        data = static_cast<char*>(allocator->allocateData(sizes.bytes() - fifoControlBytes(), false));
      } catch (...) {
        allocator->freeControl(block);
        throw;
      }
      try {
        counters = static_cast<char*>(allocator->allocateData(kCounterBlock, false));
      } catch (...) {
        allocator->freeData(data);
        allocator->freeControl(block);
        throw;
      }
    } else {
      std::memset(memory_, 0, sizes.bytes());
    }
    new (block) Prefix{{1}, allocator, data, counters};
  }
  ~HeapFifo() override { release(memory_); }
  char* base() const override { return memory_; }
  char* data() const override { return prefixOf(memory_)->data; }
  uint64_t* counters() const override { return reinterpret_cast<uint64_t*>(prefixOf(memory_)->counters); }

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
  uint64_t* counters() const override { return reinterpret_cast<uint64_t*>(prefixOf(memory_)->counters); }

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
