// Buffers registered with a communicator (ncclCommRegister). On the host backend the
// registration is bookkeeping: handles are checked, and a buffer's range can be looked up
// by later optimisations (direct access).
#pragma once

#include <cstddef>
#include <map>
#include <mutex>

namespace braid {

class RegistrationTable {
 public:
  RegistrationTable() = default;
  RegistrationTable(const RegistrationTable&) = delete;
  RegistrationTable& operator=(const RegistrationTable&) = delete;
  ~RegistrationTable();
  /// Registers [buffer, buffer+size); returns the handle.
  void* add(void* buffer, size_t size);
  /// Throws ncclInvalidArgument unless handle came from add() on this table and is still live.
  void remove(void* handle);
  size_t size() const;

 private:
  struct Entry {
    void* buffer;
    size_t size;
  };
  mutable std::mutex mutex_;
  std::map<void*, Entry> entries_;  // by handle
};

}  // namespace braid
