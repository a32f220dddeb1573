#include "comm/handles.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

#include "core/status.h"
#include "kernels/platform.h"

namespace braid::handles {

namespace {

// A registry word: allocated (storage handed out), live (constructed, not yet freed), closing
// (destroy or abort began), and the calls in progress.
constexpr uint32_t kAllocated = 1u << 31;
constexpr uint32_t kLive = 1u << 30;
constexpr uint32_t kClosing = 1u << 29;
constexpr uint32_t kCalls = kClosing - 1;

/// The reserved range and one word per page of it. Reserving costs address space only (the
/// pages are inaccessible until handed out); the words are touched as pages are used. Smaller
/// ranges are tried where a process's address space is limited.
class Arena {
 public:
  Arena() {
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    if (page_ < 4096 || (page_ & (page_ - 1)) != 0) page_ = 4096;
    pageShift_ = static_cast<unsigned>(__builtin_ctzll(page_));
    for (size_t bytes = size_t(64) << 30; bytes >= (size_t(16) << 20) && base_ == nullptr; bytes /= 4) {
      void* range = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (range == MAP_FAILED) continue;
      const size_t slots = bytes / page_;
      void* words = mmap(nullptr, slots * kWordStride * sizeof(uint32_t), PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (words == MAP_FAILED) {
        munmap(range, bytes);
        continue;
      }
      base_ = static_cast<char*>(range);
      slots_ = slots;
      words_ = static_cast<std::atomic<uint32_t>*>(words);
    }
  }

  /// The word of the page `handle` starts, or null when it is not the start of one of ours.
  std::atomic<uint32_t>* word(const void* handle) const noexcept {
    const auto at = reinterpret_cast<uintptr_t>(handle);
    const auto base = reinterpret_cast<uintptr_t>(base_);
    if (base_ == nullptr || at < base || at >= base + slots_ * page_ || ((at - base) & (page_ - 1)) != 0) return nullptr;
    return &words_[((at - base) >> pageShift_) * kWordStride];
  }

  void* allocate(size_t bytes) {
    if (base_ == nullptr) fail(ncclSystemError, "cannot reserve address space for communicator handles");
    if (bytes > page_) fail(ncclInternalError, "a communicator of %zu bytes does not fit a page of %zu", bytes, page_);
    // Pages in order, never one in use; once the range has been gone through, round again.
    for (size_t tried = 0; tried < slots_; ++tried) {
      const size_t i = next_.fetch_add(1, std::memory_order_relaxed) % slots_;
      uint32_t expected = 0;
      if (!words_[i * kWordStride].compare_exchange_strong(expected, kAllocated, std::memory_order_acq_rel)) continue;
      char* page = base_ + i * page_;
      if (mprotect(page, page_, PROT_READ | PROT_WRITE) != 0) {
        words_[i * kWordStride].store(0, std::memory_order_release);
        fail(ncclSystemError, "cannot map a page for a communicator");
      }
      return page;
    }
    fail(ncclSystemError, "every one of %zu communicator handles is in use", slots_);
  }

  void release(void* storage) noexcept {
    std::atomic<uint32_t>* w = word(storage);
    if (w == nullptr) return;
    madvise(storage, page_, MADV_DONTNEED);  // (its memory back to the system, zero if handed out again)
    mprotect(storage, page_, PROT_NONE);     // a stale handle read by mistake faults, never reads a newer object
    w->store(0, std::memory_order_release);
  }

 private:
  // Each word on a cache line of its own: ranks that are threads of one process enter and leave
  // calls on their own communicators at once, and words side by side had made the line move
  // between their cores at every call.
  static constexpr size_t kWordStride = 64 / sizeof(uint32_t);
  size_t page_ = 4096;
  unsigned pageShift_ = 12;
  char* base_ = nullptr;
  size_t slots_ = 0;
  std::atomic<uint32_t>* words_ = nullptr;
  std::atomic<size_t> next_{0};
};

Arena& arena() {
  static Arena* a = new Arena();  // never destroyed: a handle may be checked during exit
  return *a;
}

}  // namespace

void* allocate(size_t bytes) { return arena().allocate(bytes); }

void release(void* storage) noexcept { arena().release(storage); }

void publish(const void* handle) noexcept {
  if (std::atomic<uint32_t>* w = arena().word(handle)) w->fetch_or(kLive, std::memory_order_acq_rel);
}

void abandon(const void* handle) noexcept {
  if (std::atomic<uint32_t>* w = arena().word(handle)) w->store(kAllocated, std::memory_order_release);
}

bool enter(const void* handle) noexcept {
  std::atomic<uint32_t>* w = arena().word(handle);
  if (w == nullptr) return false;
  uint32_t s = w->load(std::memory_order_acquire);
  while ((s & (kLive | kClosing)) == kLive && (s & kCalls) != kCalls) {
    if (w->compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) return true;
  }
  return false;
}

void leave(const void* handle) noexcept {
  if (std::atomic<uint32_t>* w = arena().word(handle)) w->fetch_sub(1, std::memory_order_acq_rel);
}

CloseStart beginClose(const void* handle) noexcept {
  std::atomic<uint32_t>* w = arena().word(handle);
  if (w == nullptr) return CloseStart::kNotLive;
  uint32_t s = w->load(std::memory_order_acquire);
  for (;;) {
    if ((s & kLive) == 0) return CloseStart::kNotLive;
    if ((s & kClosing) != 0) return CloseStart::kAlreadyClosing;
    if (w->compare_exchange_weak(s, s | kClosing, std::memory_order_acq_rel)) return CloseStart::kStarted;
  }
}

void waitIdle(const void* handle) noexcept {
  std::atomic<uint32_t>* w = arena().word(handle);
  if (w == nullptr) return;
  for (uint32_t spins = 0; (w->load(std::memory_order_acquire) & kCalls) != 0; ++spins) {
    kernels::backOff(spins < 4096 ? spins : 4096);
  }
}

bool live(const void* handle) noexcept {
  std::atomic<uint32_t>* w = arena().word(handle);
  return w != nullptr && (w->load(std::memory_order_acquire) & (kLive | kClosing)) == kLive;
}

bool closing(const void* handle) noexcept {
  std::atomic<uint32_t>* w = arena().word(handle);
  return w != nullptr && (w->load(std::memory_order_acquire) & (kLive | kClosing)) == (kLive | kClosing);
}

}  // namespace braid::handles
