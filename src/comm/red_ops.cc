#include "comm/red_ops.h"

#include "core/status.h"

namespace braid {

ncclRedOp_t RedOpTable::create(const PreMulSumOp& op) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < live_.size(); ++i) {
    if (!live_[i]) {
      ops_[i] = op;
      live_[i] = true;
      return static_cast<ncclRedOp_t>(ncclNumOps + i);
    }
  }
  if (ncclNumOps + ops_.size() >= static_cast<size_t>(ncclMaxRedOp)) fail(ncclInvalidUsage, "too many reduction operators");
  ops_.push_back(op);
  live_.push_back(true);
  return static_cast<ncclRedOp_t>(ncclNumOps + ops_.size() - 1);
}

void RedOpTable::destroy(ncclRedOp_t op) {
  std::lock_guard<std::mutex> lock(mutex_);
  const long i = static_cast<long>(op) - ncclNumOps;
  if (op < ncclNumOps) fail(ncclInvalidArgument, "op %d is a built-in operator; only created ones can be destroyed", op);
  if (i < 0 || i >= static_cast<long>(live_.size()) || !live_[i]) {
    fail(ncclInvalidArgument, "op %d is not a reduction operator created on this communicator", op);
  }
  live_[i] = false;
}

PreMulSumOp RedOpTable::lookup(ncclRedOp_t op) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const long i = static_cast<long>(op) - ncclNumOps;
  if (i < 0 || i >= static_cast<long>(live_.size()) || !live_[i]) {
    fail(ncclInvalidArgument, "op %d is neither a built-in operator nor one created on this communicator", op);
  }
  return ops_[i];
}

}  // namespace braid
