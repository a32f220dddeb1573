/*
 * Prints every fact of nccl.h that a compiled program depends on: type sizes and
 * alignments, field offsets, enumerator values, macro values, initializer contents,
 * and (in C++) the exact type of every declared function. Built once against NVIDIA's
 * header and once against Braid's; the outputs must be identical.
 */
#include <nccl.h>
#include <stddef.h>
#include <stdio.h>
#ifdef __cplusplus
#include <typeinfo>
#endif

#define SIZE(T) printf("sizeof(%s)=%zu alignof=%zu\n", #T, sizeof(T), (size_t)__alignof__(T))
#define FIELD(T, f) printf("offsetof(%s,%s)=%zu size=%zu\n", #T, #f, offsetof(T, f), sizeof(((T*)0)->f))
#define VALUE(v) printf("%s=%lld\n", #v, (long long)(v))

static void dumpTypes(void) {
  SIZE(ncclUniqueId);
  SIZE(ncclResult_t);
  SIZE(ncclRedOp_t);
  SIZE(ncclRedOp_dummy_t);
  SIZE(ncclDataType_t);
  SIZE(ncclScalarResidence_t);
  SIZE(ncclComm_t);
  SIZE(ncclWindow_t);
  SIZE(cudaStream_t);
  SIZE(ncclConfig_t);
  SIZE(struct ncclConfig_v23000);
  SIZE(ncclCommMemStat_t);
  SIZE(ncclWaitSignalDesc_t);
  SIZE(ncclParamHandle_t);
  SIZE(ncclSimInfo_t);
  SIZE(struct ncclSimInfo_v22200);
  FIELD(ncclUniqueId, internal);
  FIELD(ncclConfig_t, size);
  FIELD(ncclConfig_t, magic);
  FIELD(ncclConfig_t, version);
  FIELD(ncclConfig_t, blocking);
  FIELD(ncclConfig_t, cgaClusterSize);
  FIELD(ncclConfig_t, minCTAs);
  FIELD(ncclConfig_t, maxCTAs);
  FIELD(ncclConfig_t, netName);
  FIELD(ncclConfig_t, splitShare);
  FIELD(ncclConfig_t, trafficClass);
  FIELD(ncclConfig_t, commName);
  FIELD(ncclConfig_t, collnetEnable);
  FIELD(ncclConfig_t, CTAPolicy);
  FIELD(ncclConfig_t, shrinkShare);
  FIELD(ncclConfig_t, nvlsCTAs);
  FIELD(ncclConfig_t, nChannelsPerNetPeer);
  FIELD(ncclConfig_t, nvlinkCentricSched);
  FIELD(ncclConfig_t, graphUsageMode);
  FIELD(ncclConfig_t, numRmaCtx);
  FIELD(ncclConfig_t, maxP2pPeers);
  FIELD(ncclConfig_t, graphStreamOrdering);
  FIELD(ncclWaitSignalDesc_t, opCnt);
  FIELD(ncclWaitSignalDesc_t, peer);
  FIELD(ncclWaitSignalDesc_t, sigIdx);
  FIELD(ncclWaitSignalDesc_t, ctx);
  FIELD(ncclSimInfo_t, size);
  FIELD(ncclSimInfo_t, magic);
  FIELD(ncclSimInfo_t, version);
  FIELD(ncclSimInfo_t, estimatedTime);
}

static void dumpValues(void) {
  VALUE(ncclSuccess); VALUE(ncclUnhandledCudaError); VALUE(ncclSystemError);
  VALUE(ncclInternalError); VALUE(ncclInvalidArgument); VALUE(ncclInvalidUsage);
  VALUE(ncclRemoteError); VALUE(ncclInProgress); VALUE(ncclTimeout); VALUE(ncclNumResults);
  VALUE(ncclNumOps_dummy);
  VALUE(ncclSum); VALUE(ncclProd); VALUE(ncclMax); VALUE(ncclMin); VALUE(ncclAvg);
  VALUE(ncclNumOps); VALUE(ncclMaxRedOp);
  VALUE(ncclInt8); VALUE(ncclChar); VALUE(ncclUint8); VALUE(ncclInt32); VALUE(ncclInt);
  VALUE(ncclUint32); VALUE(ncclInt64); VALUE(ncclUint64); VALUE(ncclFloat16); VALUE(ncclHalf);
  VALUE(ncclFloat32); VALUE(ncclFloat); VALUE(ncclFloat64); VALUE(ncclDouble);
  VALUE(ncclBfloat16); VALUE(ncclFloat8e4m3); VALUE(ncclFloat8e5m2); VALUE(ncclNumTypes);
  VALUE(ncclScalarDevice); VALUE(ncclScalarHostImmediate);
  VALUE(ncclStatGpuMemSuspend); VALUE(ncclStatGpuMemSuspended); VALUE(ncclStatGpuMemPersist);
  VALUE(ncclStatGpuMemTotal);
  VALUE(NCCL_API_MAGIC); VALUE(NCCL_WIN_STRICT_ORDERING); VALUE(NCCL_SUSPEND_MEM);
  VALUE(NCCL_MAJOR); VALUE(NCCL_MINOR); VALUE(NCCL_PATCH); VALUE(NCCL_VERSION_CODE);
  printf("NCCL_SUFFIX=\"%s\"\n", NCCL_SUFFIX);
  VALUE(NCCL_VERSION(2, 28, 9)); VALUE(NCCL_VERSION(2, 30, 7)); VALUE(NCCL_VERSION(2, 8, 4)); VALUE(NCCL_VERSION(3, 0, 1));
  VALUE(NCCL_VERSION(1, 9, 0));
  VALUE(NCCL_UNIQUE_ID_BYTES);
  VALUE(NCCL_CONFIG_UNDEF_INT);
  printf("NCCL_CONFIG_UNDEF_PTR=%s\n", NCCL_CONFIG_UNDEF_PTR == NULL ? "NULL" : "not NULL");
  printf("NCCL_COMM_NULL=%s\n", NCCL_COMM_NULL == NULL ? "NULL" : "not NULL");
  VALUE(NCCL_SPLIT_NOCOLOR);
  printf("NCCL_UNDEF_FLOAT=%a size=%zu\n", (double)NCCL_UNDEF_FLOAT, sizeof(NCCL_UNDEF_FLOAT));
  VALUE(NCCL_WIN_DEFAULT); VALUE(NCCL_WIN_COLL_SYMMETRIC); VALUE(NCCL_WIN_REQUIRED_ALIGNMENT);
  VALUE(NCCL_CTA_POLICY_DEFAULT); VALUE(NCCL_CTA_POLICY_EFFICIENCY); VALUE(NCCL_CTA_POLICY_ZERO);
  VALUE(NCCL_SHRINK_DEFAULT); VALUE(NCCL_SHRINK_ABORT); VALUE(NCCL_REVOKE_DEFAULT);
}

static void dumpInitializers(void) {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  ncclSimInfo_t s = NCCL_SIM_INFO_INITIALIZER;
  printf("config: size=%zu magic=%#x version=%u blocking=%d cga=%d minCTAs=%d maxCTAs=%d net=%p "
         "splitShare=%d tc=%d name=%p collnet=%d cta=%d shrinkShare=%d nvlsCTAs=%d perNetPeer=%d "
         "nvlinkCentric=%d graphUsage=%d rmaCtx=%d p2pPeers=%d streamOrdering=%d\n",
         c.size, c.magic, c.version, c.blocking, c.cgaClusterSize, c.minCTAs, c.maxCTAs,
         (const void*)c.netName, c.splitShare, c.trafficClass, (const void*)c.commName,
         c.collnetEnable, c.CTAPolicy, c.shrinkShare, c.nvlsCTAs, c.nChannelsPerNetPeer,
         c.nvlinkCentricSched, c.graphUsageMode, c.numRmaCtx, c.maxP2pPeers, c.graphStreamOrdering);
  printf("siminfo: size=%zu magic=%#x version=%u time=%a\n", s.size, s.magic, s.version,
         (double)s.estimatedTime);
}

#ifdef __cplusplus
#define FUNC(f) printf("type(%s)=%s\n", #f, typeid(&f).name()); \
                printf("type(p%s)=%s\n", #f, typeid(&p##f).name());
static void dumpFunctions() {
  FUNC(ncclMemAlloc) FUNC(ncclMemFree) FUNC(ncclGetVersion) FUNC(ncclGetUniqueId)
  FUNC(ncclCommInitRankConfig) FUNC(ncclCommInitRank) FUNC(ncclCommInitAll) FUNC(ncclCommFinalize)
  FUNC(ncclCommDestroy) FUNC(ncclCommAbort) FUNC(ncclCommRevoke) FUNC(ncclCommSplit)
  FUNC(ncclCommShrink) FUNC(ncclCommInitRankScalable) FUNC(ncclGetErrorString)
  FUNC(ncclGetLastError) FUNC(ncclResetDebugInit) FUNC(ncclCommGetAsyncError) FUNC(ncclCommCount)
  FUNC(ncclCommCuDevice) FUNC(ncclCommUserRank) FUNC(ncclCommRegister) FUNC(ncclCommDeregister)
  FUNC(ncclCommWindowRegister) FUNC(ncclCommWindowDeregister) FUNC(ncclRedOpCreatePreMulSum)
  FUNC(ncclRedOpDestroy) FUNC(ncclReduce) FUNC(ncclBcast) FUNC(ncclBroadcast) FUNC(ncclAllReduce)
  FUNC(ncclReduceScatter) FUNC(ncclAllGather) FUNC(ncclAlltoAll) FUNC(ncclGather) FUNC(ncclScatter)
  FUNC(ncclSend) FUNC(ncclRecv) FUNC(ncclGroupStart) FUNC(ncclGroupEnd) FUNC(ncclGroupSimulateEnd)
  FUNC(ncclCommGetUniqueId) FUNC(ncclCommGrow) FUNC(ncclCommSuspend) FUNC(ncclCommResume)
  FUNC(ncclCommMemStats) FUNC(ncclWinGetUserPtr) FUNC(ncclPutSignal) FUNC(ncclSignal)
  FUNC(ncclWaitSignal) FUNC(ncclParamBind) FUNC(ncclParamGetI8) FUNC(ncclParamGetI16)
  FUNC(ncclParamGetI32) FUNC(ncclParamGetI64) FUNC(ncclParamGetU8) FUNC(ncclParamGetU16)
  FUNC(ncclParamGetU32) FUNC(ncclParamGetU64) FUNC(ncclParamGetStr) FUNC(ncclParamGet)
  FUNC(ncclParamGetParameter) FUNC(ncclParamGetAllParameterKeys) FUNC(ncclParamDumpAll)
}
#endif

int main(void) {
  dumpTypes();
  dumpValues();
  dumpInitializers();
#ifdef __cplusplus
  dumpFunctions();
#endif
  return 0;
}
