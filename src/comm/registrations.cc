#include "comm/registrations.h"

#include <cstdint>
#include <set>

#include "core/status.h"

namespace braid {

RegistrationTable::~RegistrationTable() {
  for (auto& [handle, entry] : entries_) ::operator delete(handle);
}

void* RegistrationTable::add(void* buffer, size_t size) {
  std::lock_guard<std::mutex> lock(mutex_);
  void* handle = ::operator new(1);  // a unique token while the registration lives
  entries_.emplace(handle, Entry{buffer, size});
  return handle;
}

RegistrationTable::Entry RegistrationTable::remove(void* handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(handle);
  if (it == entries_.end()) fail(ncclInvalidArgument, "handle %p is not a registration of this communicator", handle);
  const Entry entry = it->second;
  entries_.erase(it);
  ::operator delete(handle);
  return entry;
}

bool RegistrationTable::any(const std::function<bool(uintptr_t start, size_t size)>& test) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [handle, e] : entries_)
    if (test(reinterpret_cast<uintptr_t>(e.buffer), e.size)) return true;
  return false;
}

bool RegistrationTable::covers(const void* p, size_t bytes) const {
  const auto at = reinterpret_cast<uintptr_t>(p);
  return any([&](uintptr_t start, size_t size) { return at >= start && at - start <= size && size - (at - start) >= bytes; });
}

bool RegistrationTable::overlaps(const void* p, size_t bytes) const {
  const auto at = reinterpret_cast<uintptr_t>(p);
  return any([&](uintptr_t start, size_t size) { return size > 0 && bytes > 0 && start < at + bytes && at < start + size; });
}

size_t RegistrationTable::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

namespace {

/// Every live window of the process, so that a call naming only a window can tell a live one
/// from a freed or foreign pointer without reading it. Lock order: a table's mutex, then this.
struct LiveWindows {
  std::mutex mutex;
  std::set<ncclWindow_t> windows;
};
LiveWindows& liveWindows() {
  static LiveWindows* live = new LiveWindows();  // never destroyed: tables may end during exit
  return *live;
}

}  // namespace

WindowTable::~WindowTable() {
  std::lock_guard<std::mutex> lock(liveWindows().mutex);
  for (const auto& [handle, window] : windows_) liveWindows().windows.erase(handle);
}

ncclWindow_t WindowTable::add(const WindowEntry& entry) {
  auto window = std::make_unique<ncclWindow_vidmem>();
  static_cast<WindowEntry&>(*window) = entry;
  ncclWindow_t handle = window.get();
  std::lock_guard<std::mutex> lock(mutex_);
  windows_.emplace(handle, std::move(window));
  std::lock_guard<std::mutex> liveLock(liveWindows().mutex);
  liveWindows().windows.insert(handle);
  return handle;
}

void WindowTable::remove(ncclWindow_t win) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = windows_.find(win);
  if (it == windows_.end()) {
    fail(ncclInvalidArgument, "win %p is not a window of this communicator (never registered, or deregistered already)",
         static_cast<void*>(win));
  }
  {
    std::lock_guard<std::mutex> liveLock(liveWindows().mutex);  // no longer found before it is freed
    liveWindows().windows.erase(win);
  }
  windows_.erase(it);
}

WindowEntry WindowTable::find(ncclWindow_t win) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = windows_.find(win);
  if (it == windows_.end()) {
    fail(ncclInvalidArgument, "win %p is not a window of this communicator (never registered, or deregistered already)",
         static_cast<void*>(win));
  }
  return *it->second;
}

WindowEntry WindowTable::findAnywhere(ncclWindow_t win) {
  // (Held while copying: a deregistration erases the handle here before freeing it.)
  std::lock_guard<std::mutex> lock(liveWindows().mutex);
  if (liveWindows().windows.count(win) == 0) {
    fail(ncclInvalidArgument, "window %p is not a live window (never registered, or deregistered already)",
         static_cast<void*>(win));
  }
  return *win;
}

size_t WindowTable::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return windows_.size();
}

}  // namespace braid
