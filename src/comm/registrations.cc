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

}  // namespace braid
