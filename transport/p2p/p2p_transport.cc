#include "transport/p2p/p2p_transport.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "core/status.h"

namespace braid::transport::p2p {

namespace {

class HeapFifo final : public FifoMemory {
 public:
  explicit HeapFifo(const FifoSizes& sizes) : FifoMemory(sizes) {
    memory_ = static_cast<char*>(std::aligned_alloc(4096, (sizes.bytes() + 4095) / 4096 * 4096));
    if (memory_ == nullptr) fail(ncclSystemError, "cannot allocate %llu bytes of FIFO memory", (unsigned long long)sizes.bytes());
    std::memset(memory_, 0, sizes.bytes());
  }
  ~HeapFifo() override { std::free(memory_); }
  char* base() const override { return memory_; }

 private:
  char* memory_;
};

class BorrowedFifo final : public FifoMemory {
 public:
  BorrowedFifo(const FifoSizes& sizes, char* memory) : FifoMemory(sizes), memory_(memory) {}
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
