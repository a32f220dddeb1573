// One operation as the user asked for it, after validation: what the group collects and the
// planner turns into work.
#pragma once

#include <nccl.h>

#include <cstddef>

#include "kernels/work.h"

namespace braid::plan {

struct Task {
  kernels::Func func;
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t count = 0;  ///< elements, as passed to the API (per rank block for AllGather/ReduceScatter)
  ncclDataType_t dtype = ncclInt8;
  kernels::RedKind red = kernels::RedKind::kSum;
  int userOp = -1;   ///< the ncclRedOp_t as called (for the mismatch check and its messages)
  kernels::RedOpArgs opArgs{};
  const void* scalarAtRun = nullptr;  ///< PreMulSum scalar read when the operation runs (ncclScalarDevice)
  int root = 0;
  int peer = -1;     ///< send/recv only
  bool isSend = false;
  void* stream = nullptr;  ///< the cudaStream_t passed (the CUDA backend enqueues on it; the host ignores it)
  const char* name = "";  ///< the API function, for messages
  void* apiEvent = nullptr;  ///< its Coll API or P2P API event in the profiler plugin (null: none)
};

/// Bytes of one element of each ncclDataType_t.
size_t typeSize(ncclDataType_t t);

}  // namespace braid::plan
