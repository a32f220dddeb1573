// Collectives, point-to-point, groups and reduction operators.
//
// Every call is validated completely before anything is queued (no partial execution), then
// added to the current group; a call outside a group is a group of one, so on the host
// backend it returns when the operation is complete.
#include <cstring>
#include <vector>

#include "kernels/types.h"

#include "api/api.h"
#include "comm/communicator.h"
#include "group/group.h"
#include "plan/task.h"
#include "datapath/data_path.h"

using namespace braid;

namespace {

/// The communicator, ready for operations (init complete, not revoked or finalized).
Communicator& readyComm(ncclComm_t comm) {
  Communicator& c = communicatorFrom(comm);
  if (!c.hasBootstrap()) fail(ncclInvalidUsage, "the communicator has not completed init");
  if (c.asyncError() == ncclInProgress) {
    fail(ncclInvalidUsage, "an earlier nonblocking call on this communicator is still in progress; wait until "
                           "ncclCommGetAsyncError no longer reports ncclInProgress");
  }
  if (c.revoked()) fail(ncclInvalidUsage, "the communicator was revoked");
  if (c.finalized()) fail(ncclInvalidUsage, "the communicator was finalized");
  return c;
}

void checkType(ncclDataType_t datatype) {
  if (datatype < 0 || datatype >= ncclNumTypes) {
    fail(ncclInvalidArgument, "datatype is %d; valid types are 0..%d", static_cast<int>(datatype), ncclNumTypes - 1);
  }
}

void checkBuffer(const void* buffer, size_t count, const char* name) {
  if (buffer == nullptr && count > 0) fail(ncclInvalidArgument, "%s is NULL with count %zu", name, count);
}

void checkRank(int value, int nRanks, const char* name) {
  if (value < 0 || value >= nRanks) fail(ncclInvalidArgument, "%s is %d; ranks are 0..%d", name, value, nRanks - 1);
}

/// Refuses sendbuff and recvbuff whose byte ranges overlap, but for the call's in-place form:
/// sendbuff == recvbuff + inPlaceOffset (0 for the same buffer; AllGather's input is its rank's
/// block of the output, ReduceScatter's output its rank's block of the input). Partly
/// overlapping buffers would return wrong data without a word (undefined in NCCL too).
void checkOverlap(const char* name, const void* sendbuff, size_t sendBytes, const void* recvbuff, size_t recvBytes,
                  int64_t inPlaceOffset, const char* inPlaceForm) {
  if (sendbuff == nullptr || recvbuff == nullptr || sendBytes == 0 || recvBytes == 0) return;
  const uintptr_t s = reinterpret_cast<uintptr_t>(sendbuff), r = reinterpret_cast<uintptr_t>(recvbuff);
  if (s + sendBytes < s || r + recvBytes < r) return;  // (wrapping ranges are no buffers: nothing to compare)
  if (s >= r + recvBytes || r >= s + sendBytes) return;  // apart
  if (static_cast<int64_t>(s - r) == inPlaceOffset) return;
  fail(ncclInvalidArgument, "%s: sendbuff %p (bytes %p..%p) and recvbuff %p (bytes %p..%p) overlap; pass separate "
       "buffers or the in-place form (%s)", name, sendbuff, sendbuff, reinterpret_cast<const void*>(s + sendBytes),
       recvbuff, recvbuff, reinterpret_cast<const void*>(r + recvBytes), inPlaceForm);
}

/// bytes x n, or SIZE_MAX when that overflows (no buffer is that large: then nothing overlaps).
size_t timesRanks(size_t bytes, size_t n) {
  size_t out;
  return __builtin_mul_overflow(bytes, n, &out) ? SIZE_MAX : out;
}

bool isFloating(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16 || t == ncclFloat8e4m3 ||
         t == ncclFloat8e5m2;
}

/// The scalar 1/n in the element type, as bits (Avg on floating types pre-multiplies by it).
uint64_t inverseBits(ncclDataType_t t, int n) {
  uint64_t bits = 0;
  const float f = 1.0f / static_cast<float>(n);
  switch (t) {
    case ncclFloat64: {
      const double d = 1.0 / n;
      std::memcpy(&bits, &d, sizeof(d));
      break;
    }
    case ncclFloat32: std::memcpy(&bits, &f, sizeof(f)); break;
    case ncclFloat16: bits = kernels::toHalf(f).bits; break;
    case ncclBfloat16: bits = kernels::toBFloat16(f).bits; break;
    case ncclFloat8e4m3: bits = kernels::toFp8E4M3(f).bits; break;
    default: bits = kernels::toFp8E5M2(f).bits; break;
  }
  return bits;
}

/// Fills task.red/opArgs from op (built-in, Avg, or a PreMulSum created on this communicator).
void resolveOp(Communicator& c, ncclRedOp_t op, ncclDataType_t datatype, plan::Task& task) {
  const int n = c.identity().nRanks;
  task.opArgs.nRanks = n;
  task.userOp = static_cast<int>(op);
  switch (op) {
    case ncclSum: task.red = kernels::RedKind::kSum; return;
    case ncclProd: task.red = kernels::RedKind::kProd; return;
    case ncclMax: task.red = kernels::RedKind::kMax; return;
    case ncclMin: task.red = kernels::RedKind::kMin; return;
    case ncclAvg:
      if (isFloating(datatype)) {
        task.red = kernels::RedKind::kPreMulSum;
        task.opArgs.scalarBits = inverseBits(datatype, n);
      } else {
        task.red = kernels::RedKind::kSumPostDiv;
      }
      return;
    default: break;
  }
  if (op < 0) fail(ncclInvalidArgument, "op is %d; not a reduction operator", static_cast<int>(op));
  const PreMulSumOp user = c.redOps().lookup(op);
  if (user.dtype != datatype) {
    fail(ncclInvalidArgument, "op %d was created for datatype %d but is used with datatype %d", static_cast<int>(op),
         static_cast<int>(user.dtype), static_cast<int>(datatype));
  }
  task.red = kernels::RedKind::kPreMulSum;
  if (user.residence == ncclScalarHostImmediate) {
    task.opArgs.scalarBits = user.scalarBits;
  } else {
    task.scalarAtRun = user.scalarAddress;
  }
}

/// Queues the task in the current group, or runs it as a group of one.
ncclResult_t submit(Communicator& c, const plan::Task& task) {
  c.refuseIfSuspended(task.name);
  if (group::active()) {
    group::enqueue(&c, task);
    return ncclSuccess;
  }
  if (c.config().blocking && c.profiler() == nullptr) {  // a lone call: run it here and now
    // (with a profiler plugin a lone call is an implicit group, whose events it reports)
    c.waitForJob();
    c.dataPath().run(task);
    return ncclSuccess;
  }
  group::start(/*implicit=*/true);
  group::enqueue(&c, task);
  return group::end();
}

plan::Task makeTask(const char* name, kernels::Func func, const void* sendbuff, void* recvbuff, size_t count,
                    ncclDataType_t datatype, cudaStream_t stream) {
  checkType(datatype);
  if (count > (SIZE_MAX >> 4) / plan::typeSize(datatype)) fail(ncclInvalidArgument, "count %zu is too large", count);
  plan::Task t;
  t.name = name;
  t.func = func;
  t.sendbuff = sendbuff;
  t.recvbuff = recvbuff;
  t.count = count;
  t.dtype = datatype;
  t.stream = stream;
  return t;
}

/// Validates and submits a reduction collective (AllReduce, ReduceScatter, Reduce).
ncclResult_t reduction(const char* name, kernels::Func func, const void* sendbuff, void* recvbuff, size_t count,
                       ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  Communicator& c = readyComm(comm);
  plan::Task t = makeTask(name, func, sendbuff, recvbuff, count, datatype, stream);
  const int n = c.identity().nRanks;
  const int me = c.identity().rank;
  const size_t bytes = count * plan::typeSize(datatype);
  if (func == kernels::Func::kReduce) {
    checkRank(root, n, "root");
    checkBuffer(sendbuff, count, "sendbuff");
    if (me == root) checkBuffer(recvbuff, count, "recvbuff");
  } else {
    checkBuffer(sendbuff, count, "sendbuff");
    checkBuffer(recvbuff, count, "recvbuff");
  }
  t.root = root;
  resolveOp(c, op, datatype, t);
  if (func == kernels::Func::kReduceScatter) {  // recvbuff is this rank's block of sendbuff
    checkOverlap(name, sendbuff, timesRanks(bytes, n), recvbuff, bytes, -static_cast<int64_t>(bytes) * me,
                 "recvbuff == sendbuff + rank x recvcount x size");
  } else if (func == kernels::Func::kAllReduce || me == root) {  // (a Reduce's recvbuff matters at the root only)
    checkOverlap(name, sendbuff, bytes, recvbuff, bytes, 0, "sendbuff == recvbuff");
  }
  return submit(c, t);
}

ncclResult_t peer(const char* name, bool isSend, const void* sendbuff, void* recvbuff, size_t count,
                  ncclDataType_t datatype, int peerRank, ncclComm_t comm, cudaStream_t stream) {
  Communicator& c = readyComm(comm);
  plan::Task t = makeTask(name, kernels::Func::kSendRecv, sendbuff, recvbuff, count, datatype, stream);
  checkRank(peerRank, c.identity().nRanks, "peer");
  checkBuffer(isSend ? sendbuff : recvbuff, count, isSend ? "sendbuff" : "recvbuff");
  t.peer = peerRank;
  t.isSend = isSend;
  return submit(c, t);
}

}  // namespace

BRAID_API(ncclResult_t, ncclAllReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
          ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                            ncclComm_t comm, cudaStream_t stream) {
  return api::guarded("ncclAllReduce", comm, [&] {
    return reduction("ncclAllReduce", kernels::Func::kAllReduce, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
  });
}

BRAID_API(ncclResult_t, ncclReduceScatter, const void* sendbuff, void* recvbuff, size_t recvcount,
          ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                                ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return api::guarded("ncclReduceScatter", comm, [&] {
    return reduction("ncclReduceScatter", kernels::Func::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op,
                     0, comm, stream);
  });
}

BRAID_API(ncclResult_t, ncclReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
          ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                         int root, ncclComm_t comm, cudaStream_t stream) {
  return api::guarded("ncclReduce", comm, [&] {
    return reduction("ncclReduce", kernels::Func::kReduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
  });
}

BRAID_API(ncclResult_t, ncclAllGather, const void* sendbuff, void* recvbuff, size_t sendcount,
          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                            ncclComm_t comm, cudaStream_t stream) {
  return api::guarded("ncclAllGather", comm, [&] {
    Communicator& c = readyComm(comm);
    plan::Task t = makeTask("ncclAllGather", kernels::Func::kAllGather, sendbuff, recvbuff, sendcount, datatype, stream);
    checkBuffer(sendbuff, sendcount, "sendbuff");
    checkBuffer(recvbuff, sendcount, "recvbuff");
    const size_t bytes = sendcount * plan::typeSize(datatype);  // sendbuff is this rank's block of recvbuff
    checkOverlap("ncclAllGather", sendbuff, bytes, recvbuff, timesRanks(bytes, c.identity().nRanks),
                 static_cast<int64_t>(bytes) * c.identity().rank, "sendbuff == recvbuff + rank x sendcount x size");
    return submit(c, t);
  });
}

namespace {
ncclResult_t broadcast(const char* name, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                       int root, ncclComm_t comm, cudaStream_t stream) {
  Communicator& c = readyComm(comm);
  plan::Task t = makeTask(name, kernels::Func::kBroadcast, sendbuff, recvbuff, count, datatype, stream);
  checkRank(root, c.identity().nRanks, "root");
  if (c.identity().rank == root) checkBuffer(sendbuff, count, "sendbuff");
  checkBuffer(recvbuff, count, "recvbuff");
  if (c.identity().rank == root) {  // (elsewhere sendbuff is not read)
    const size_t bytes = count * plan::typeSize(datatype);
    checkOverlap(name, sendbuff, bytes, recvbuff, bytes, 0, "sendbuff == recvbuff");
  }
  t.root = root;
  return submit(c, t);
}
}  // namespace

BRAID_API(ncclResult_t, ncclBroadcast, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
          int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                            ncclComm_t comm, cudaStream_t stream) {
  return api::guarded("ncclBroadcast", comm,
                      [&] { return broadcast("ncclBroadcast", sendbuff, recvbuff, count, datatype, root, comm, stream); });
}

BRAID_API(ncclResult_t, ncclBcast, void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
          cudaStream_t stream);
ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  return api::guarded("ncclBcast", comm, [&] { return broadcast("ncclBcast", buff, buff, count, datatype, root, comm, stream); });
}

BRAID_API(ncclResult_t, ncclSend, const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
          ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peerRank, ncclComm_t comm,
                       cudaStream_t stream) {
  return api::guarded("ncclSend", comm,
                      [&] { return peer("ncclSend", true, sendbuff, nullptr, count, datatype, peerRank, comm, stream); });
}

BRAID_API(ncclResult_t, ncclRecv, void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
          cudaStream_t stream);
ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peerRank, ncclComm_t comm,
                       cudaStream_t stream) {
  return api::guarded("ncclRecv", comm,
                      [&] { return peer("ncclRecv", false, nullptr, recvbuff, count, datatype, peerRank, comm, stream); });
}

namespace {
/// AlltoAll: a collective, whose algorithms (Direct: sends and receives; Pairwise; Bruck) the
/// tuner chooses.
ncclResult_t allToAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                      cudaStream_t stream) {
  Communicator& c = readyComm(comm);
  plan::Task t = makeTask("ncclAlltoAll", kernels::Func::kAlltoAll, sendbuff, recvbuff, count, datatype, stream);
  const size_t n = static_cast<size_t>(c.identity().nRanks);
  checkBuffer(sendbuff, count * n, "sendbuff");
  checkBuffer(recvbuff, count * n, "recvbuff");
  const size_t bytes = timesRanks(count * plan::typeSize(datatype), n);
  checkOverlap("ncclAlltoAll", sendbuff, bytes, recvbuff, bytes, 0, "sendbuff == recvbuff");
  return submit(c, t);
}

/// Gather and Scatter are groups of sends and receives.
ncclResult_t exchange(const char* name, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                      int root, ncclComm_t comm, cudaStream_t stream) {
  Communicator& c = readyComm(comm);
  plan::Task base = makeTask(name, kernels::Func::kSendRecv, sendbuff, recvbuff, count, datatype, stream);
  const int n = c.identity().nRanks;
  const int me = c.identity().rank;
  const size_t bytes = count * plan::typeSize(datatype);
  const bool gather = std::strcmp(name, "ncclGather") == 0;
  checkRank(root, n, "root");
  if (gather || me == root) checkBuffer(sendbuff, gather ? count : count * n, "sendbuff");  // Scatter: the root sends
  if (!gather || me == root) checkBuffer(recvbuff, gather ? count * n : count, "recvbuff");  // Gather: the root receives
  if (me == root && gather) {  // the root's sendbuff may be its block of recvbuff
    checkOverlap(name, sendbuff, bytes, recvbuff, timesRanks(bytes, n), static_cast<int64_t>(bytes) * root,
                 "sendbuff == recvbuff + root x count x size");
  } else if (me == root) {  // the root's recvbuff may be its block of sendbuff
    checkOverlap(name, sendbuff, timesRanks(bytes, n), recvbuff, bytes, -static_cast<int64_t>(bytes) * root,
                 "recvbuff == sendbuff + root x count x size");
  }
  std::vector<plan::Task> tasks;
  for (int p = 0; p < n; ++p) {
    plan::Task s = base, r = base;
    s.isSend = true;
    s.peer = p;
    r.isSend = false;
    r.peer = p;
    if (gather) {  // else scatter
      if (p == root) {
        s.sendbuff = sendbuff;
        tasks.push_back(s);
      }
      if (me == root) {
        r.recvbuff = static_cast<char*>(recvbuff) + p * bytes;
        tasks.push_back(r);
      }
    } else {
      if (me == root) {
        s.sendbuff = static_cast<const char*>(sendbuff) + p * bytes;
        tasks.push_back(s);
      }
      if (p == root) {
        r.recvbuff = recvbuff;
        tasks.push_back(r);
      }
    }
  }
  const bool outer = !group::active();
  if (outer) group::start(/*implicit=*/true);
  for (const auto& t : tasks) group::enqueue(&c, t);
  return outer ? group::end() : ncclSuccess;
}
}  // namespace

BRAID_API(ncclResult_t, ncclAlltoAll, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
          ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                           cudaStream_t stream) {
  return api::guarded("ncclAlltoAll", comm, [&] { return allToAll(sendbuff, recvbuff, count, datatype, comm, stream); });
}

BRAID_API(ncclResult_t, ncclGather, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
          int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t stream) {
  return api::guarded("ncclGather", comm,
                      [&] { return exchange("ncclGather", sendbuff, recvbuff, count, datatype, root, comm, stream); });
}

BRAID_API(ncclResult_t, ncclScatter, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
          int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                          ncclComm_t comm, cudaStream_t stream) {
  return api::guarded("ncclScatter", comm,
                      [&] { return exchange("ncclScatter", sendbuff, recvbuff, count, datatype, root, comm, stream); });
}

BRAID_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
          ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                       ncclScalarResidence_t residence, ncclComm_t comm) {
  return api::guarded("ncclRedOpCreatePreMulSum", comm, [&] {
    Communicator& c = communicatorFrom(comm);
    api::requireNonNull(op, "op");
    api::requireNonNull(scalar, "scalar");
    checkType(datatype);
    if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate) {
      fail(ncclInvalidArgument, "residence is %d; expected ncclScalarDevice or ncclScalarHostImmediate",
           static_cast<int>(residence));
    }
    PreMulSumOp p{datatype, residence, 0, nullptr};
    if (residence == ncclScalarHostImmediate) {
      std::memcpy(&p.scalarBits, scalar, plan::typeSize(datatype));
    } else {
      p.scalarAddress = scalar;  // host backend: read from this (host) address when each operation runs
    }
    *op = c.redOps().create(p);
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm);
ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return api::guarded("ncclRedOpDestroy", comm, [&] {
    communicatorFrom(comm).redOps().destroy(op);
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclGroupStart);
ncclResult_t pncclGroupStart() {
  return api::guarded("ncclGroupStart", nullptr, [] {
    group::start();
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclGroupEnd);
ncclResult_t pncclGroupEnd() {
  return api::guarded("ncclGroupEnd", nullptr, [] { return group::end(); });
}

BRAID_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t* simInfo);
ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  return api::guarded("ncclGroupSimulateEnd", nullptr, [&]() -> ncclResult_t {
    api::requireNonNull(simInfo, "simInfo");
    if (simInfo->magic != 0x74685283u || simInfo->size < sizeof(ncclSimInfo_t)) {
      fail(ncclInvalidArgument, "simInfo (size %zu, magic 0x%x) was not initialised with NCCL_SIM_INFO_INITIALIZER",
           simInfo->size, simInfo->magic);
    }
    float estimate = 0;
    const ncclResult_t result = group::simulateEnd(&estimate);
    simInfo->estimatedTime = estimate;
    return result;
  });
}
