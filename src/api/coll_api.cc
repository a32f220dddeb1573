// Collectives, point-to-point, groups and reduction operators.
#include "api/api.h"
#include "comm/communicator.h"
#include "group/group.h"

using namespace braid;

namespace {

constexpr const char* kDataPathWork = "the host data-path work";

/// The body every data-path entry point has until the data path lands: check the
/// communicator, then say plainly that the call is not available yet.
ncclResult_t pendingOnComm(const char* function, ncclComm_t comm, const char* when) {
  return api::guarded(function, comm, [&]() -> ncclResult_t {
    communicatorFrom(comm);
    api::notImplemented(when);
  });
}

}  // namespace

BRAID_API(ncclResult_t, ncclReduce, const void* sendbuff, void* recvbuff, size_t count,
          ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t comm,
                         cudaStream_t) {
  return pendingOnComm("ncclReduce", comm, kDataPathWork);
}

BRAID_API(ncclResult_t, ncclBcast, void* buff, size_t count, ncclDataType_t datatype, int root,
          ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclBcast(void*, size_t, ncclDataType_t, int, ncclComm_t comm, cudaStream_t) {
  return pendingOnComm("ncclBcast", comm, kDataPathWork);
}

BRAID_API(ncclResult_t, ncclBroadcast, const void* sendbuff, void* recvbuff, size_t count,
          ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclBroadcast(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t comm, cudaStream_t) {
  return pendingOnComm("ncclBroadcast", comm, kDataPathWork);
}

BRAID_API(ncclResult_t, ncclAllReduce, const void* sendbuff, void* recvbuff, size_t count,
          ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t comm,
                            cudaStream_t) {
  return pendingOnComm("ncclAllReduce", comm, kDataPathWork);
}

BRAID_API(ncclResult_t, ncclReduceScatter, const void* sendbuff, void* recvbuff, size_t recvcount,
          ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclReduceScatter(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t comm,
                                cudaStream_t) {
  return pendingOnComm("ncclReduceScatter", comm, kDataPathWork);
}

BRAID_API(ncclResult_t, ncclAllGather, const void* sendbuff, void* recvbuff, size_t sendcount,
          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllGather(const void*, void*, size_t, ncclDataType_t, ncclComm_t comm, cudaStream_t) {
  return pendingOnComm("ncclAllGather", comm, kDataPathWork);
}

BRAID_API(ncclResult_t, ncclAlltoAll, const void* sendbuff, void* recvbuff, size_t count,
          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAlltoAll(const void*, void*, size_t, ncclDataType_t, ncclComm_t comm, cudaStream_t) {
  return pendingOnComm("ncclAlltoAll", comm, kDataPathWork);
}

BRAID_API(ncclResult_t, ncclGather, const void* sendbuff, void* recvbuff, size_t count,
          ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclGather(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t comm, cudaStream_t) {
  return pendingOnComm("ncclGather", comm, kDataPathWork);
}

BRAID_API(ncclResult_t, ncclScatter, const void* sendbuff, void* recvbuff, size_t count,
          ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclScatter(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t comm, cudaStream_t) {
  return pendingOnComm("ncclScatter", comm, kDataPathWork);
}

BRAID_API(ncclResult_t, ncclSend, const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
          ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclSend(const void*, size_t, ncclDataType_t, int, ncclComm_t comm, cudaStream_t) {
  return pendingOnComm("ncclSend", comm, kDataPathWork);
}

BRAID_API(ncclResult_t, ncclRecv, void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
          ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclRecv(void*, size_t, ncclDataType_t, int, ncclComm_t comm, cudaStream_t) {
  return pendingOnComm("ncclRecv", comm, kDataPathWork);
}

BRAID_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
          ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t*, void*, ncclDataType_t, ncclScalarResidence_t,
                                       ncclComm_t comm) {
  return pendingOnComm("ncclRedOpCreatePreMulSum", comm, kDataPathWork);
}

BRAID_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm);
ncclResult_t pncclRedOpDestroy(ncclRedOp_t, ncclComm_t comm) {
  return pendingOnComm("ncclRedOpDestroy", comm, kDataPathWork);
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
    api::notImplemented("the algorithms and tuner work");
  });
}
