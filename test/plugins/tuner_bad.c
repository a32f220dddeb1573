/*
 * Broken tuner plugins for Braid's tests, one per -D flag: TUNER_NO_SYMBOL exports no
 * ncclTunerPlugin_vN at all; TUNER_INIT_FAILS has an init that fails; TUNER_NULL_FUNCTION has
 * no getCollInfo. Braid must warn once and run without them.
 */
#include "nccl_tuner.h"

#ifdef TUNER_NO_SYMBOL
int notATuner = 1;
#else
static ncclResult_t badInit(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                            ncclNvlDomainInfo_v5_t* domains, ncclTunerConstants_v5_t* constants) {
  (void)commId;
  (void)nRanks;
  (void)nNodes;
  (void)logFunction;
  (void)domains;
  (void)constants;
  *ctx = 0;
#ifdef TUNER_INIT_FAILS
  return ncclInternalError;
#else
  return ncclSuccess;
#endif
}

#ifndef TUNER_NULL_FUNCTION
static ncclResult_t badGetCollInfo(void* ctx, ncclFunc_t collType, size_t nBytes, int numPipeOps, float** table,
                                   int numAlgo, int numProto, int regBuff, int* nChannels) {
  (void)ctx;
  (void)collType;
  (void)nBytes;
  (void)numPipeOps;
  (void)table;
  (void)numAlgo;
  (void)numProto;
  (void)regBuff;
  (void)nChannels;
  return ncclSuccess;
}
#endif

static ncclResult_t badFinalize(void* ctx) {
  (void)ctx;
  return ncclSuccess;
}

const ncclTuner_v5_t ncclTunerPlugin_v5 = {
    .name = "bad",
    .init = badInit,
#ifdef TUNER_NULL_FUNCTION
    .getCollInfo = 0,
#else
    .getCollInfo = badGetCollInfo,
#endif
    .finalize = badFinalize,
};
#endif
