// Host memory other processes of this host can map: each allocation is a memory file
// (memfd) mapped shared, whose descriptor is offered to peers (core/fd_exchange.h) and mapped
// by them. ncclMemAlloc hands out such memory on the host backend, so that a window's memory
// reaches the ranks of the same host that are other processes (one-sided puts are one copy),
// and the one-sided signal counters live in it too (comm/signals.h).
//
// A forked child shares these pages with its parent (MAP_SHARED), unlike malloc's.
#pragma once

#include <cstddef>

#include "core/fd_exchange.h"

namespace braid::memfiles {

/// `bytes` (rounded up to whole pages) of zeroed memory in a memory file of its own, page
/// aligned. Throws ncclSystemError when the file cannot be made or mapped.
void* allocate(size_t bytes);
/// Unmaps and closes what allocate() returned; false (nothing done) for anything else.
bool release(void* p);
/// Where [p, p + bytes) lies inside one allocation: an offer of its file for other processes,
/// valid until withdrawn (fds::withdraw), and the range's offset in it. False when it does not.
bool offer(const void* p, size_t bytes, fds::Offer* out, size_t* offset);

/// Another process's memory mapped here: [offset, offset + bytes) of the file it offered.
class Mapping {
 public:
  /// Fetches the descriptor (throws ncclSystemError naming the owner) and maps the range.
  Mapping(const fds::Offer& from, size_t offset, size_t bytes);
  ~Mapping();
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  /// The first byte of the range.
  void* data() const { return data_; }

 private:
  void* base_ = nullptr;  // (page aligned, at or before data_)
  size_t length_ = 0;
  void* data_ = nullptr;
};

}  // namespace braid::memfiles
