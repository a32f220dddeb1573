/*
 * Braid: the tuner plugin interface of NCCL 2.28.9, versions 2 to 5, ABI-identical to NVIDIA's.
 *
 * A tuner plugin is a shared library exporting a struct named ncclTunerPlugin_vN (N = 5, 4, 3
 * or 2; the newest one found is used). NCCL_TUNER_PLUGIN names it (a path, or a name X found
 * as libnccl-tuner-X.so or X); unset, libnccl-tuner.so is looked for, then the same symbol in
 * the net plugin's library; "none" disables it.
 *
 * Each communicator calls init once, getCollInfo for every collective, and finalize (v5) or
 * destroy (v2-v4) when it is destroyed or aborted. From v3 on, getCollInfo receives the cost
 * table: float[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS] of predicted microseconds, passed as
 * float** (cast it back to float (*)[NCCL_NUM_PROTOCOLS]); an entry of NCCL_ALGO_PROTO_IGNORE
 * is not available. The plugin may change entries and set *nChannels; the cheapest available
 * entry runs. Version 2 returns an algorithm and a protocol instead.
 */
#ifndef NCCL_TUNER_H_
#define NCCL_TUNER_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "nccl_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Algorithm indices (first dimension of the cost table). */
#define NCCL_ALGO_UNDEF -1
#define NCCL_ALGO_TREE 0
#define NCCL_ALGO_RING 1
#define NCCL_ALGO_COLLNET_DIRECT 2
#define NCCL_ALGO_COLLNET_CHAIN 3
#define NCCL_ALGO_NVLS 4
#define NCCL_ALGO_NVLS_TREE 5
#define NCCL_ALGO_PAT 6

/* Protocol indices (second dimension). */
#define NCCL_PROTO_UNDEF -1
#define NCCL_PROTO_LL 0
#define NCCL_PROTO_LL128 1
#define NCCL_PROTO_SIMPLE 2

/* A cost-table entry that is not available. */
#define NCCL_TUNING_IGNORE -1.0
#define NCCL_ALGO_PROTO_IGNORE NCCL_TUNING_IGNORE

/* Hardware link classes, compute capabilities and node scales of the v5 constants. */
#define NCCL_HW_NVLINK 0
#define NCCL_HW_PCI 1
#define NCCL_HW_NET 2
#define NCCL_VOLTA_COMPCAP_IDX 0
#define NCCL_AMPERE_COMPCAP_IDX 1
#define NCCL_HOPPER_COMPCAP_IDX 2
#define NCCL_BLACKWELL_COMPCAP_IDX 3
#define NCCL_TUNING_SCALE_1NODE 0
#define NCCL_TUNING_SCALE_2NODES 1
#define NCCL_TUNING_SCALE_4NODES 2

/* ---- version 5 ------------------------------------------------------------------------------ */

#define NCCL_NUM_ALGORITHMS_V5 7
#define NCCL_NUM_PROTOCOLS_V5 3
#define NCCL_NUM_HW_LINKS_V5 3
#define NCCL_NUM_COMPCAPS_V5 4
#define NCCL_NUM_TUNING_SCALES_V5 3

/* How the communicator's ranks fall into NVLink domains. */
typedef struct {
  int nNvlDomains;          /* NVLink domains the communicator spans */
  int minRanksPerNvlDomain; /* ranks in the smallest */
  int maxRanksPerNvlDomain; /* ranks in the largest */
} ncclNvlDomainInfo_v5_t;

/* The constants of NCCL's own cost model, which init may read and change. */
typedef struct {
  double baseLatencies[NCCL_NUM_ALGORITHMS_V5][NCCL_NUM_PROTOCOLS_V5];
  double hwLatencies[NCCL_NUM_HW_LINKS_V5][NCCL_NUM_ALGORITHMS_V5][NCCL_NUM_PROTOCOLS_V5];
  double llMaxBws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
  double perChMaxRingLL128Bws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
  double perChMaxTreeLL128Bws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
  double perChMaxTreeBws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
  double perChMaxNVLSTreeBws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
} ncclTunerConstants_v5_t;

typedef struct {
  const char* name;
  /* Once per communicator: commId identifies it (the same on every rank); *ctx is the plugin's
   * state, handed back to the other calls. constants holds the library's cost-model figures,
   * which init may change for this communicator. */
  ncclResult_t (*init)(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                       ncclNvlDomainInfo_v5_t* nvlDomainInfo, ncclTunerConstants_v5_t* constants);
  /* Once per collective of nBytes: may edit collCostTable[numAlgo][numProto] and set *nChannels.
   * numPipeOps: the group's collectives on this communicator per channel, rounded up (1 for a
   * call outside a group); regBuff: 1 when the send and receive buffers are registered with
   * the communicator (ncclCommRegister) or the call is captured into a CUDA graph.
   * An error leaves the choice to the library. */
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int regBuff, int* nChannels);
  /* When the communicator is destroyed or aborted. */
  ncclResult_t (*finalize)(void* context);
} ncclTuner_v5_t;

/* ---- version 4 ------------------------------------------------------------------------------ */

typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int regBuff, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} ncclTuner_v4_t;

/* ---- version 3 (no regBuff) ----------------------------------------------------------------- */

typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} ncclTuner_v3_t;

/* ---- version 2 (answers an algorithm and a protocol, not a cost table) ---------------------- */

typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  /* collNetSupport, nvlsSupport: whether those algorithms could run this collective. Sets
   * *algorithm and *protocol together (or neither), and optionally *nChannels. */
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int collNetSupport,
                              int nvlsSupport, int numPipeOps, int* algorithm, int* protocol, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} ncclTuner_v2_t;

/* The newest version. */
typedef ncclTuner_v5_t ncclTuner_t;
typedef ncclTunerConstants_v5_t ncclTunerConstants_t;
typedef ncclNvlDomainInfo_v5_t ncclNvlDomainInfo_t;
#define NCCL_NUM_ALGORITHMS NCCL_NUM_ALGORITHMS_V5
#define NCCL_NUM_PROTOCOLS NCCL_NUM_PROTOCOLS_V5
#define NCCL_NUM_HW_LINKS NCCL_NUM_HW_LINKS_V5
#define NCCL_NUM_COMPCAPS NCCL_NUM_COMPCAPS_V5
#define NCCL_NUM_TUNING_SCALES NCCL_NUM_TUNING_SCALES_V5
#define NCCL_TUNER_PLUGIN_SYMBOL "ncclTunerPlugin_v5"

#ifdef __cplusplus
}
#endif

#endif /* NCCL_TUNER_H_ */
