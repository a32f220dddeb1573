// User-created reduction operators of one communicator (ncclRedOpCreatePreMulSum).
#pragma once

#include <nccl.h>

#include <cstdint>
#include <mutex>
#include <vector>

namespace braid {

/// A pre-multiplied sum: the scalar's bytes (host-immediate) or where to read it at run time.
struct PreMulSumOp {
  ncclDataType_t dtype;
  ncclScalarResidence_t residence;
  uint64_t scalarBits;       ///< ncclScalarHostImmediate: the scalar, read at creation
  const void* scalarAddress; ///< ncclScalarDevice: read when each operation runs
};

class RedOpTable {
 public:
  /// Registers an op; returns its handle (ncclNumOps and up).
  ncclRedOp_t create(const PreMulSumOp& op);
  /// Throws ncclInvalidArgument unless op is a live op of this table.
  void destroy(ncclRedOp_t op);
  /// The op behind a handle, or throws ncclInvalidArgument naming it.
  PreMulSumOp lookup(ncclRedOp_t op) const;

 private:
  mutable std::mutex mutex_;
  std::vector<PreMulSumOp> ops_;
  std::vector<bool> live_;
};

}  // namespace braid
