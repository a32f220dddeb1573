// Page tables for the FIFO slots a call is about to use, made before it runs.
//
// Host FIFO memory is backed where it is touched (between threads anonymous mappings, between
// processes shared-memory segments: transport/fifo.h), so the memory of a connection a small
// message uses stays small. The price was paid late: a message moves through the kSteps slots
// one step after another, so the first kSteps calls of a size each reach new pages and take
// their faults, in both processes, inside a benchmark's timed iterations (nccl-tests' -w 1 -n
// 20 timed 32 KiB AllGathers on 2 processes at 3x their steady time) or a loop's later steps.
// The first call of each size class maps them at once, writable, with
// madvise(MADV_POPULATE_WRITE): page tables only, the contents untouched, so it is safe while
// the other end uses the FIFO. It maps what the calls of that size reach anyway, so memory is
// what the steady state takes. Where the kernel lacks it (before Linux 5.14) nothing happens
// and the pages fault on use, as before.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "kernels/work.h"

namespace braid::runtime::host {

class SlotPrefault {
 public:
  /// Maps the part of each of conn's kSteps slots of `proto` that a message of `bytes` reaches
  /// (at most a whole slot), unless an earlier call mapped as much. Host memory only.
  void cover(const kernels::ConnHandle& conn, kernels::Proto proto, uint64_t bytes);

 private:
  std::unordered_map<const void*, uint64_t> covered_;  ///< by the slots' base: bytes of each slot mapped
};

}  // namespace braid::runtime::host
