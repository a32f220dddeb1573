#include "runtime/host/scratch.h"

#include <sys/mman.h>

namespace braid::runtime::host {

void* Scratch::reserve(uint64_t bytes) {
  if (bytes <= bytes_) return base_;
  unmap();
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  base_ = p;
  bytes_ = bytes;
  return base_;
}

void Scratch::unmap() {
  if (base_ != nullptr) munmap(base_, bytes_);
  base_ = nullptr;
  bytes_ = 0;
}

}  // namespace braid::runtime::host
