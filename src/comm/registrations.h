// Buffers registered with a communicator (ncclCommRegister) and its memory windows
// (ncclCommWindowRegister): handles are checked, and a buffer's range is looked up where it
// matters (the CUDA backend offers registered receive buffers to senders in other processes:
// datapath/offered_buffers.h).
#pragma once

#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>
#include <memory>
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
  struct Entry {
    void* buffer;
    size_t size;
  };
  /// Throws ncclInvalidArgument unless handle came from add() on this table and is still live;
  /// returns what it registered.
  Entry remove(void* handle);
  size_t size() const;
  /// Whether one live registration holds all of [p, p + bytes).
  bool covers(const void* p, size_t bytes) const;
  /// Whether any live registration shares a byte with [p, p + bytes).
  bool overlaps(const void* p, size_t bytes) const;

 private:
  /// Whether test(start, size) holds for a live registration.
  bool any(const std::function<bool(uintptr_t start, size_t size)>& test) const;

  mutable std::mutex mutex_;
  std::map<void*, Entry> entries_;  // by handle
};

/// Why a rank does not address a peer's part of a window.
enum class WindowReach : uint8_t {
  kMapped,        ///< it does (a thread of this process, or mapped from another process of this host)
  kOtherHost,     ///< the peer runs on another host
  kNotShareable,  ///< the peer's memory is not from ncclMemAlloc (a memory file), so no other process maps it
  kNetwork,       ///< puts and signals to the peer go over a one-sided link (transport/net/one_sided_links.h)
};

/// What ncclWindow_t points to: one rank's part of a window.
struct WindowEntry {
  void* buffer;
  size_t size;
  int flags;  ///< NCCL_WIN_* flags
  int rank = 0;        ///< this rank in the window's communicator
  int localRank = 0;   ///< and among the ranks of its host (the load/store team)
  int localRanks = 1;
  /// Every rank's buffer of this window, where this rank can address it (ranks that are threads
  /// of this process), else null.
  std::vector<void*> peerBuffers;
  std::vector<WindowReach> peerReach;  ///< by rank: why peerBuffers is null
  /// This rank's id of the window, and every rank's (what a put over a link names: never an address).
  uint64_t id = 0;
  std::vector<uint64_t> peerIds;
  /// The mappings of other processes' memory behind peerBuffers, unmapped with the last copy
  /// of the entry (the window's deregistration).
  std::shared_ptr<void> peerMappings;
};

class WindowTable {
 public:
  WindowTable() = default;
  ~WindowTable();
  WindowTable(const WindowTable&) = delete;
  WindowTable& operator=(const WindowTable&) = delete;
  /// A new window of this rank; the handle lives until remove() or the table's end.
  ncclWindow_t add(const WindowEntry& entry);
  /// Throws ncclInvalidArgument unless win is a live window of this table.
  void remove(ncclWindow_t win);
  size_t size() const;
  /// A copy of the entry behind win; throws ncclInvalidArgument unless it is a live window of this table.
  WindowEntry find(ncclWindow_t win) const;
  /// The same for a live window of any communicator (the device API's calls name only the window).
  static WindowEntry findAnywhere(ncclWindow_t win);

 private:
  mutable std::mutex mutex_;
  std::map<ncclWindow_t, std::unique_ptr<ncclWindow_vidmem>> windows_;
};

}  // namespace braid

/// The handle type of windows in the C ABI.
struct ncclWindow_vidmem final : braid::WindowEntry {};
