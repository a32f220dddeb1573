// The host kernels' scratch memory (CollPlan::scratchBytes: Bruck's packed blocks, the halving
// ReduceScatter's and Binomial's partial sums): an anonymous mapping, grown on demand. Up to
// kKeptBytes stays mapped between calls; a larger region goes back to the system after the
// call that needed it, so one large collective does not leave its input's size resident for
// the communicator's life (issue 26: a rank's memory after a warm-up must not depend on what
// the largest call once needed).
#pragma once

#include <cstdint>

namespace braid::runtime::host {

class Scratch {
 public:
  static constexpr uint64_t kKeptBytes = uint64_t(4) << 20;  // NCCL_BUFFSIZE's default: one FIFO's worth

  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { unmap(); }

  /// At least `bytes` (page-aligned), or nullptr where the system refuses the mapping.
  void* reserve(uint64_t bytes);
  /// After a call: unmaps a region larger than kKeptBytes.
  void release() {
    if (bytes_ > kKeptBytes) unmap();
  }
  uint64_t mappedBytes() const { return bytes_; }
  /// Unmaps whatever is mapped (a suspended communicator's); the next reserve maps anew.
  void drop() { unmap(); }

 private:
  void unmap();
  void* base_ = nullptr;
  uint64_t bytes_ = 0;
};

}  // namespace braid::runtime::host
