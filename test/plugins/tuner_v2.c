/*
 * A tuner plugin for Braid's tests exporting only the oldest version Braid loads (v2): every
 * AllReduce runs Ring/LL. Its declarations come from include/nccl_tuner.h.
 */
#include <stdlib.h>

#include "nccl_tuner.h"

static int contexts;

static ncclResult_t v2Init(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context) {
  logFunction(NCCL_LOG_INFO, NCCL_TUNING, __FILE__, __LINE__, "test tuner v2: init nRanks %zu nNodes %zu", nRanks,
              nNodes);
  *context = &contexts;
  return ncclSuccess;
}

static ncclResult_t v2GetCollInfo(void* context, ncclFunc_t collType, size_t nBytes, int collNetSupport,
                                  int nvlsSupport, int numPipeOps, int* algorithm, int* protocol, int* nChannels) {
  (void)context;
  (void)nBytes;
  (void)collNetSupport;
  (void)nvlsSupport;
  (void)numPipeOps;
  (void)nChannels;
  if (collType == ncclFuncAllReduce) {
    *algorithm = NCCL_ALGO_RING;
    *protocol = NCCL_PROTO_LL;
  }
  return ncclSuccess;
}

static ncclResult_t v2Destroy(void* context) {
  (void)context;
  return ncclSuccess;
}

const ncclTuner_v2_t ncclTunerPlugin_v2 = {
    .name = "only-v2",
    .init = v2Init,
    .getCollInfo = v2GetCollInfo,
    .destroy = v2Destroy,
};
