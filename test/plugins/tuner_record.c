/*
 * A tuner plugin for Braid's tests, written against include/nccl_tuner.h, that records what
 * it is told and leaves every choice to Braid: for each getCollInfo it logs, through the
 * logger NCCL hands it, the collective, its size, numPipeOps, regBuff and the Ring/Simple
 * and Tree/Simple entries of the cost table it was given ("test tuner record: ..."), so the
 * test can read them in the output.
 * Built with -DTUNER_SLOW_RING its (v5) init changes the constants: Ring's base latency
 * becomes 1e6 us for every protocol, Tree/Simple's per-step latency over the network 50 us,
 * and one LL bandwidth ceiling 99 GB/s (which Braid's model has no place for).
 * Built with -DTUNER_BAD_CONSTANTS its init sets Tree/LL's base latency to NaN and Ring/Simple's
 * per-step latency over NVLink to -1 us: no times (Braid must warn and keep its own).
 * Built with -DTUNER_RECORD_V4 it exports only ncclTunerPlugin_v4.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "nccl_tuner.h"

struct context {
  ncclDebugLogger_t log;
};

static const char* const funcNames[] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"};

static ncclResult_t start(ncclDebugLogger_t logFunction, void** ctx) {
  struct context* c = calloc(1, sizeof *c);
  if (c == NULL) return ncclSystemError;
  c->log = logFunction;
  *ctx = c;
  return ncclSuccess;
}

#ifndef TUNER_RECORD_V4
static ncclResult_t recordInitV5(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                                 ncclDebugLogger_t logFunction, ncclNvlDomainInfo_v5_t* domains,
                                 ncclTunerConstants_v5_t* constants) {
  (void)commId;
  (void)nRanks;
  (void)nNodes;
  (void)domains;
#ifdef TUNER_SLOW_RING
  for (int p = 0; p < NCCL_NUM_PROTOCOLS; ++p) constants->baseLatencies[NCCL_ALGO_RING][p] = 1e6;
  constants->hwLatencies[NCCL_HW_NET][NCCL_ALGO_TREE][NCCL_PROTO_SIMPLE] = 50.0;
  constants->llMaxBws[NCCL_HOPPER_COMPCAP_IDX][NCCL_TUNING_SCALE_1NODE] = 99.0;
#elif defined(TUNER_BAD_CONSTANTS)
  constants->baseLatencies[NCCL_ALGO_TREE][NCCL_PROTO_LL] = NAN;
  constants->hwLatencies[NCCL_HW_NVLINK][NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] = -1.0;
#else
  (void)constants;
#endif
  return start(logFunction, ctx);
}
#else
static ncclResult_t recordInitV4(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** ctx) {
  (void)nRanks;
  (void)nNodes;
  return start(logFunction, ctx);
}
#endif

static ncclResult_t recordGetCollInfo(void* ctx, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                                      float** collCostTable, int numAlgo, int numProto, int regBuff, int* nChannels) {
  struct context* c = ctx;
  float(*table)[NCCL_NUM_PROTOCOLS] = (float(*)[NCCL_NUM_PROTOCOLS])collCostTable;
  (void)nChannels;
  if (numAlgo != NCCL_NUM_ALGORITHMS || numProto != NCCL_NUM_PROTOCOLS || (int)collType < 0 || (int)collType > 4) {
    return ncclInternalError;
  }
  c->log(NCCL_LOG_INFO, NCCL_TUNING, __FILE__, __LINE__,
         "test tuner record: %s of %zu bytes, numPipeOps %d, regBuff %d, Ring/Simple %s, Tree/Simple %s",
         funcNames[collType], nBytes, numPipeOps, regBuff,
         table[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] >= 1e6f ? "over 1e6 us" : "under 1e6 us",
         table[NCCL_ALGO_TREE][NCCL_PROTO_SIMPLE] >= 1e6f ? "over 1e6 us" : "under 1e6 us");
  return ncclSuccess;
}

static ncclResult_t recordFinalize(void* ctx) {
  free(ctx);
  return ncclSuccess;
}

#ifdef TUNER_RECORD_V4
const ncclTuner_v4_t ncclTunerPlugin_v4 = {
    .name = "record-v4",
    .init = recordInitV4,
    .getCollInfo = recordGetCollInfo,
    .destroy = recordFinalize,
};
#else
const ncclTuner_v5_t ncclTunerPlugin_v5 = {
    .name = "record",
    .init = recordInitV5,
    .getCollInfo = recordGetCollInfo,
    .finalize = recordFinalize,
};
#endif
