// The communicator object behind ncclComm_t.
//
// This is the part of the communicator every entry point needs: identity (rank,
// size, device, the ranks sharing this node) and error state. Lifecycle, channels,
// transports and configuration are separate objects owned by it (Bootstrap issue on).
#pragma once

#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "core/status.h"

namespace braid {

/// Who a communicator's rank is; fixed at init.
struct RankIdentity {
  int rank = 0;
  int nRanks = 1;
  int cudaDevice = -1;  ///< -1 on the host backend
  int localRank = 0;    ///< index among the ranks that share this rank's node (NCCL's "LSA" team)
  int localRanks = 1;   ///< ranks on this node; nodes are assumed to hold consecutive ranks
};

class Communicator {
 public:
  explicit Communicator(const RankIdentity& identity) : identity_(identity) {}
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  ~Communicator() { magic_ = 0; }

  /// True for a live communicator (guards against stale or foreign handles).
  bool live() const noexcept { return magic_ == kMagic; }
  const RankIdentity& identity() const noexcept { return identity_; }

  /// The asynchronous error (ncclSuccess while healthy); never blocks.
  ncclResult_t asyncError() const noexcept { return asyncError_.load(std::memory_order_acquire); }
  /// Records the first asynchronous error; later ones do not overwrite it.
  void setAsyncError(ncclResult_t error) noexcept {
    ncclResult_t expected = ncclSuccess;
    asyncError_.compare_exchange_strong(expected, error, std::memory_order_acq_rel);
  }

  /// Text of the last failure on this communicator.
  std::string lastError() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return lastError_;
  }
  void setLastError(const std::string& text) {
    std::lock_guard<std::mutex> lock(mutex_);
    lastError_ = text;
  }

 private:
  static constexpr uint64_t kMagic = 0xb4a1dc0aa11c0de5ull;
  uint64_t magic_ = kMagic;
  RankIdentity identity_;
  std::atomic<ncclResult_t> asyncError_{ncclSuccess};
  mutable std::mutex mutex_;
  std::string lastError_;
};

}  // namespace braid

/// The handle type of the C ABI is the communicator under NCCL's name.
struct ncclComm final : braid::Communicator {
  using braid::Communicator::Communicator;
};

namespace braid {

/// The communicator behind a handle; throws ncclInvalidArgument naming `argument` when the
/// handle is NULL or not a live communicator.
inline Communicator& communicatorFrom(ncclComm_t handle, const char* argument = "comm") {
  if (handle == nullptr) fail(ncclInvalidArgument, "%s is NULL", argument);
  if (!handle->live()) {
    fail(ncclInvalidArgument, "%s %p is not a live communicator (destroyed or corrupt)", argument,
         static_cast<void*>(handle));
  }
  return *handle;
}

}  // namespace braid
