#include "comm/registrations.h"

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

void RegistrationTable::remove(void* handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(handle);
  if (it == entries_.end()) fail(ncclInvalidArgument, "handle %p is not a registration of this communicator", handle);
  entries_.erase(it);
  ::operator delete(handle);
}

size_t RegistrationTable::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

ncclWindow_t WindowTable::add(const WindowEntry& entry) {
  auto window = std::make_unique<ncclWindow_vidmem>();
  static_cast<WindowEntry&>(*window) = entry;
  ncclWindow_t handle = window.get();
  std::lock_guard<std::mutex> lock(mutex_);
  windows_.emplace(handle, std::move(window));
  return handle;
}

void WindowTable::remove(ncclWindow_t win) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (windows_.erase(win) == 0) {
    fail(ncclInvalidArgument, "win %p is not a window of this communicator (never registered, or deregistered already)",
         static_cast<void*>(win));
  }
}

size_t WindowTable::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return windows_.size();
}

}  // namespace braid
