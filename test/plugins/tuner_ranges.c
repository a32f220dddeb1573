/*
 * A tuner plugin for Braid's tests, written against include/nccl_tuner.h (v5). For AllReduce:
 * up to 4 KiB it makes Tree/LL the cheapest entry; from 64 KiB on Ring/Simple on one channel;
 * in between it leaves the table alone (Braid's own choice must stand). It logs its init
 * arguments and its finalize through the logger NCCL hands it, so the test can see them.
 * Built with -DTUNER_BAD_ANSWERS it answers nonsense instead: NaN for every entry Braid
 * filled and 1000 channels (Braid must warn and keep its own choice).
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "nccl_tuner.h"

/* The layouts NVIDIA's nccl_tuner.h gives (LP64): a plugin built against it sees the same. */
#define LAYOUT(name, cond) typedef char name[(cond) ? 1 : -1]
LAYOUT(constantsSize, sizeof(ncclTunerConstants_v5_t) == (3 * 7 + 3 * 7 * 3 + 5 * 4 * 3) * sizeof(double));
LAYOUT(constantsLlMaxBws, offsetof(ncclTunerConstants_v5_t, llMaxBws) == (21 + 63) * sizeof(double));
LAYOUT(domainsSize, sizeof(ncclNvlDomainInfo_v5_t) == 3 * sizeof(int));
LAYOUT(tunerV5Size, sizeof(ncclTuner_v5_t) == 4 * sizeof(void*) && offsetof(ncclTuner_v5_t, finalize) == 3 * sizeof(void*));
LAYOUT(tunerV2Size, sizeof(ncclTuner_v2_t) == 4 * sizeof(void*));
LAYOUT(tableShape, NCCL_NUM_ALGORITHMS == 7 && NCCL_NUM_PROTOCOLS == 3);
LAYOUT(indices, NCCL_ALGO_TREE == 0 && NCCL_ALGO_RING == 1 && NCCL_ALGO_PAT == 6 && NCCL_PROTO_LL == 0 &&
                    NCCL_PROTO_LL128 == 1 && NCCL_PROTO_SIMPLE == 2 && ncclFuncAllReduce == 4);

struct context {
  ncclDebugLogger_t log;
  size_t nRanks;
};

static ncclResult_t rangesInit(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                               ncclNvlDomainInfo_v5_t* domains, ncclTunerConstants_v5_t* constants) {
  struct context* c = calloc(1, sizeof *c);
  if (c == NULL) return ncclSystemError;
  c->log = logFunction;
  c->nRanks = nRanks;
  logFunction(NCCL_LOG_INFO, NCCL_TUNING, __FILE__, __LINE__,
              "test tuner: init comm %llx nRanks %zu nNodes %zu nvlDomains %d ranks per domain %d..%d ring/simple base "
              "latency %.2f",
              (unsigned long long)commId, nRanks, nNodes, domains->nNvlDomains, domains->minRanksPerNvlDomain,
              domains->maxRanksPerNvlDomain, constants->baseLatencies[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE]);
  *ctx = c;
  return ncclSuccess;
}

static ncclResult_t rangesGetCollInfo(void* ctx, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                                      float** collCostTable, int numAlgo, int numProto, int regBuff, int* nChannels) {
  float(*table)[NCCL_NUM_PROTOCOLS] = (float(*)[NCCL_NUM_PROTOCOLS])collCostTable;
  (void)ctx;
  (void)numPipeOps;
  (void)regBuff;
  if (numAlgo != NCCL_NUM_ALGORITHMS || numProto != NCCL_NUM_PROTOCOLS) return ncclInternalError;
  if (collType != ncclFuncAllReduce) return ncclSuccess;
#ifdef TUNER_BAD_ANSWERS
  (void)nBytes;
  for (int a = 0; a < numAlgo; ++a)
    for (int p = 0; p < numProto; ++p)
      if (table[a][p] != NCCL_ALGO_PROTO_IGNORE) table[a][p] = NAN;
  *nChannels = 1000;
#else
  if (nBytes <= 4096) {
    if (table[NCCL_ALGO_TREE][NCCL_PROTO_LL] != NCCL_ALGO_PROTO_IGNORE) table[NCCL_ALGO_TREE][NCCL_PROTO_LL] = 0.0f;
  } else if (nBytes >= 65536) {
    if (table[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] != NCCL_ALGO_PROTO_IGNORE) {
      table[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] = 0.0f;
      *nChannels = 1;
    }
  }
#endif
  return ncclSuccess;
}

static ncclResult_t rangesFinalize(void* ctx) {
  struct context* c = ctx;
  c->log(NCCL_LOG_INFO, NCCL_TUNING, __FILE__, __LINE__, "test tuner: finalize (%zu ranks)", c->nRanks);
  free(c);
  return ncclSuccess;
}

const ncclTuner_v5_t ncclTunerPlugin_v5 = {
    .name = "ranges",
    .init = rangesInit,
    .getCollInfo = rangesGetCollInfo,
    .finalize = rangesFinalize,
};
