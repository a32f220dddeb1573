#include "transport/p2p/p2p_transport.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <deque>
#include <unordered_map>
#include <unordered_set>

#include "core/process.h"
#include "core/status.h"

namespace braid::transport::p2p {

namespace {

// The FIFO memory is shared by its two ends, which belong to different communicators (one
// per rank) that may be destroyed in any order while the other's watchdog still reads the
// fault boxes: a count in the page before the FIFO keeps it until both ends are gone. The page
// also says where the memory came from and where the slots are, and where the sender's credit
// line is (the one word of the connection the sender owns: the receiver's kernels write it, the
// sender's poll it in the sender's own memory), which the same count keeps.
constexpr size_t kPrefix = 4096;
struct Prefix {
  std::atomic<int> count;
  FifoAllocator* allocator;  // null: anonymous memory of this process (blockBytes, mapped)
  size_t blockBytes;
  char* data;                // the slots: after the control part, or in the allocator's data memory
  char* counters;            // tail (and the unused place of head): the control part's, or in front of the slots
  std::atomic<uint64_t*> credit{nullptr};  // head: the sender's credit line, set once the sender imports
  FifoAllocator* creditAllocator = nullptr;  // the sender's allocator (null: the sender's heap)
};
static_assert(sizeof(Prefix) <= kPrefix);

Prefix* prefixOf(char* base) { return reinterpret_cast<Prefix*>(base - kPrefix); }

/// A zeroed credit line (kCreditLineBytes) in the sender's memory: its GPU's through `allocator`,
/// else its heap.
uint64_t* newCreditLine(FifoAllocator* allocator) {
  if (allocator != nullptr) return static_cast<uint64_t*>(allocator->allocateData(kCreditLineBytes, false));
  void* p = std::aligned_alloc(kCreditLineBytes, kCreditLineBytes);
  if (p == nullptr) fail(ncclSystemError, "cannot allocate a FIFO credit line (%llu bytes)", (unsigned long long)kCreditLineBytes);
  std::memset(p, 0, kCreditLineBytes);
  return static_cast<uint64_t*>(p);
}

void freeCreditLine(FifoAllocator* allocator, uint64_t* line) {
  if (line == nullptr) return;
  if (allocator != nullptr) return allocator->freeData(line);
  std::free(line);
}

/// Where head is: the sender's credit line once it has one; before (a receiver whose sender has
/// not imported yet, which no kernel uses) the control part's unused place.
uint64_t* headOf(char* base) {
  uint64_t* credit = prefixOf(base)->credit.load(std::memory_order_acquire);
  return credit != nullptr ? credit : reinterpret_cast<uint64_t*>(prefixOf(base)->counters) + 64 / sizeof(uint64_t);
}

void release(char* base) {
  Prefix* prefix = prefixOf(base);
  if (prefix->count.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  FifoAllocator* allocator = prefix->allocator;
  char* counters = prefix->counters;
  const size_t blockBytes = prefix->blockBytes;
  freeCreditLine(prefix->creditAllocator, prefix->credit.load(std::memory_order_relaxed));
  prefix->~Prefix();
  if (allocator == nullptr) {
    munmap(base - kPrefix, blockBytes);
    return;
  }
  allocator->freeData(counters);  // (the allocation: the counters, then the slots)
  allocator->freeControl(base - kPrefix);
}

class HeapFifo final : public FifoMemory {
 public:
  HeapFifo(const FifoSizes& sizes, FifoAllocator* allocator) : FifoMemory(sizes) {
    const uint64_t control = allocator == nullptr ? sizes.bytes() : fifoControlBytes();
    const size_t blockBytes = kPrefix + (control + 4095) / 4096 * 4096;
    // On the host, anonymous memory: zero already, and backed only where it is touched, so the
    // slots of a protocol a connection never uses (LL128 on CPUs, mostly) take no memory.
    char* block = nullptr;
    if (allocator == nullptr) {
      void* p = mmap(nullptr, blockBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      block = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
    } else {
      block = static_cast<char*>(allocator->allocateControl(blockBytes));
    }
    if (block == nullptr) fail(ncclSystemError, "cannot allocate %llu bytes of FIFO memory", (unsigned long long)sizes.bytes());
    memory_ = block + kPrefix;
    char* data = memory_ + fifoControlBytes();
    char* counters = memory_;
    if (allocator != nullptr) {  // a GPU: the counters and slots in its memory (fifo.h)
      try {
        counters = static_cast<char*>(allocator->allocateData(deviceDataBytes(sizes), false));
      } catch (...) {
        allocator->freeControl(block);
        throw;
      }
      data = counters + kDeviceCounterBytes;
    }
    new (block) Prefix{{1}, allocator, blockBytes, data, counters};
  }
  ~HeapFifo() override { release(memory_); }
  char* base() const override { return memory_; }
  char* data() const override { return prefixOf(memory_)->data; }
  uint64_t* counters() const override { return reinterpret_cast<uint64_t*>(prefixOf(memory_)->counters); }
  uint64_t* creditWord() const override { return headOf(memory_); }

 private:
  char* memory_;
};

/// The sender's end: the receiver's memory, held, and the credit line it adds in its own.
class BorrowedFifo final : public FifoMemory {
 public:
  /// Called under Offers' lock, once per FIFO (the first sender to import it; a second gets
  /// the first's line, as before it got the same head).
  BorrowedFifo(const FifoSizes& sizes, char* memory, FifoAllocator* allocator) : FifoMemory(sizes), memory_(memory) {
    Prefix* prefix = prefixOf(memory_);
    if (prefix->credit.load(std::memory_order_relaxed) == nullptr) {
      prefix->creditAllocator = allocator;
      prefix->credit.store(newCreditLine(allocator), std::memory_order_release);  // (throws: nothing held yet)
      ownsCredit_ = allocator != nullptr;
    }
    prefix->count.fetch_add(1, std::memory_order_relaxed);
  }
  ~BorrowedFifo() override { release(memory_); }
  char* base() const override { return memory_; }
  char* data() const override { return prefixOf(memory_)->data; }
  uint64_t* counters() const override { return reinterpret_cast<uint64_t*>(prefixOf(memory_)->counters); }
  uint64_t* creditWord() const override { return headOf(memory_); }
  DeviceData creditData() const override {
    if (!ownsCredit_) return {};
    return DeviceData{reinterpret_cast<char*>(headOf(memory_)), kCreditLineBytes};
  }

 private:
  char* memory_;
  bool ownsCredit_ = false;  // its credit line is device memory from its allocator
};

/// The receivers' FIFOs of this process by token: a descriptor names its memory by a random
/// token, looked up here, so that a descriptor from the wire can never make this process use
/// an address it did not hand out. Process-wide, never destroyed.
class Offers {
 public:
  static Offers& process() {
    static Offers* offers = [] {
      auto* created = new Offers();
      pthread_atfork(nullptr, nullptr, [] { new (&process().mutex_) std::mutex(); });  // (see log.cc)
      return created;
    }();
    return *offers;
  }
  uint64_t add(char* base, const FifoSizes& sizes) {
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t token = process::random64();
    while (byToken_.count(token) != 0) token = process::random64();
    byToken_[token] = {base, sizes};
    return token;
  }
  void remove(uint64_t token) {
    std::lock_guard<std::mutex> lock(mutex_);
    byToken_.erase(token);
    // Remembered a while: a descriptor naming it comes from a peer that left while connecting,
    // not from a forger.
    withdrawn_.insert(token);
    withdrawnOrder_.push_back(token);
    if (withdrawnOrder_.size() > kWithdrawnKept) {
      withdrawn_.erase(withdrawnOrder_.front());
      withdrawnOrder_.pop_front();
    }
  }
  /// Whether `token` was offered and withdrawn lately (its receiver's communicator is gone).
  bool withdrawn(uint64_t token) {
    std::lock_guard<std::mutex> lock(mutex_);
    return withdrawn_.count(token) != 0;
  }
  /// The sender's end of the FIFO offered under token (null when none is): its memory held
  /// (the count raised under the lock, so the receiver cannot free it in between).
  std::unique_ptr<FifoMemory> borrow(uint64_t token, FifoAllocator* allocator);

 private:
  struct Offer {
    char* base;
    FifoSizes sizes;
  };
  static constexpr size_t kWithdrawnKept = 4096;
  std::mutex mutex_;
  std::unordered_map<uint64_t, Offer> byToken_;
  std::unordered_set<uint64_t> withdrawn_;
  std::deque<uint64_t> withdrawnOrder_;
};

std::unique_ptr<FifoMemory> Offers::borrow(uint64_t token, FifoAllocator* allocator) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = byToken_.find(token);
  if (it == byToken_.end()) return nullptr;
  return std::make_unique<BorrowedFifo>(it->second.sizes, it->second.base, allocator);
}

/// The receiver's end: withdraws its offer before letting go of the memory.
class OfferedFifo final : public FifoMemory {
 public:
  OfferedFifo(const FifoSizes& sizes, FifoAllocator* allocator)
      : FifoMemory(sizes), heap_(sizes, allocator), token_(Offers::process().add(heap_.base(), sizes)) {}
  ~OfferedFifo() override { Offers::process().remove(token_); }
  char* base() const override { return heap_.base(); }
  char* data() const override { return heap_.data(); }
  uint64_t* counters() const override { return heap_.counters(); }
  uint64_t* creditWord() const override { return heap_.creditWord(); }
  uint64_t token() const { return token_; }

 private:
  HeapFifo heap_;
  uint64_t token_;
};

}  // namespace

std::unique_ptr<FifoMemory> create(const FifoSizes& sizes, FifoAllocator* allocator, Descriptor* out) {
  auto memory = std::make_unique<OfferedFifo>(sizes, allocator);
  std::memset(out, 0, sizeof(*out));
  out->kind = Kind::kP2p;
  out->ownerPid = static_cast<int32_t>(getpid());
  out->address = memory->token();
  out->bytes = sizes.bytes();
  out->sizes = sizes;
  return memory;
}

std::unique_ptr<FifoMemory> import(const Descriptor& d, FifoAllocator* allocator) {
  std::unique_ptr<FifoMemory> memory = Offers::process().borrow(d.address, allocator);
  if (memory == nullptr && Offers::process().withdrawn(d.address)) {
    fail(ncclRemoteError, "p2p transport: the peer withdrew FIFO %#llx before this rank took it: its communicator was "
         "destroyed or aborted while connecting", static_cast<unsigned long long>(d.address));
  }
  if (memory == nullptr) {
    fail(ncclInvalidUsage, "p2p transport: the descriptor names FIFO %#llx, which this process (%d) does not offer "
                           "(a forged descriptor, or ranks of different processes taken for one)",
         static_cast<unsigned long long>(d.address), static_cast<int>(getpid()));
  }
  return memory;
}

}  // namespace braid::transport::p2p
