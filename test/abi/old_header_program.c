/*
 * Built against NVIDIA's nccl.h 2.28.9 (/usr/local/cuda/include) and linked against Braid's
 * libnccl.so.2 (NCCL 2.30.7's ABI): what a program compiled before 2.29 relies on must hold.
 * Its ncclConfig_t is 16 bytes shorter; bytes after it must never be read as the 2.30 fields.
 * Its result codes end at ncclInProgress. Exits 0 when every check passes, else prints the
 * failed ones. Ranks run on the host backend: buffers are host memory, the stream is NULL.
 */
#define _POSIX_C_SOURCE 200809L  /* setenv */
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if NCCL_VERSION_CODE != 22809
#error "built against a header other than NVIDIA's 2.28.9"
#endif

static int failures = 0;
#define CHECK(cond)                                                  \
  do {                                                               \
    if (!(cond)) {                                                   \
      printf("FAILED %s:%d: %s\n", __FILE__, __LINE__, #cond);       \
      ++failures;                                                    \
    }                                                                \
  } while (0)

enum { kRanks = 2, kCount = 1000 };

/* A 2.28.9 config, followed by what a 2.30 reader would take for graphUsageMode..graphStreamOrdering:
 * values every one of those fields refuses. */
struct OldConfigInMemory {
  ncclConfig_t config;
  int poison[4];
};

struct RankArgs {
  ncclUniqueId id;
  int rank;
  ncclResult_t initResult, reduceResult;
  float out[kCount];
};

static void* runRank(void* p) {
  struct RankArgs* a = (struct RankArgs*)p;
  struct OldConfigInMemory mem;
  ncclConfig_t initializer = NCCL_CONFIG_INITIALIZER;
  mem.config = initializer;
  mem.config.blocking = 1;
  mem.config.commName = "old-header";
  for (int i = 0; i < 4; ++i) mem.poison[i] = -7;
  ncclComm_t comm = NULL;
  a->initResult = ncclCommInitRankConfig(&comm, kRanks, a->id, a->rank, &mem.config);
  if (a->initResult != ncclSuccess) return NULL;
  float in[kCount];
  for (int i = 0; i < kCount; ++i) in[i] = (float)(a->rank + 1) * (float)(i % 17);
  a->reduceResult = ncclAllReduce(in, a->out, kCount, ncclFloat32, ncclSum, comm, NULL);
  ncclCommDestroy(comm);
  return NULL;
}

int main(void) {
  int version = 0;
  setenv("BRAID_BOOTSTRAP_TIMEOUT", "2", 1);  /* (read once, at the first call) */
  CHECK(ncclGetVersion(&version) == ncclSuccess);
  CHECK(version == 23007);
  CHECK(version >= NCCL_VERSION_CODE);  /* what programs test before using a feature */
  CHECK(sizeof(ncclConfig_t) == 80);    /* the 2.28.9 layout this program was built with */

  /* Result codes and texts this header knows. */
  int count = 0;
  CHECK(ncclCommCount(NULL, &count) == ncclInvalidArgument);
  CHECK(strcmp(ncclGetErrorString(ncclInvalidArgument), "invalid argument (run with NCCL_DEBUG=WARN for details)") == 0);
  CHECK(strcmp(ncclGetErrorString(ncclInProgress), "NCCL operation in progress") == 0);
  CHECK(strcmp(ncclGetErrorString(ncclNumResults), "timeout") == 0);  /* code 8: 2.30's ncclTimeout */

  /* ncclCommInitAll and a grouped AllReduce from one thread. */
  ncclComm_t comms[kRanks];
  CHECK(ncclCommInitAll(comms, kRanks, NULL) == ncclSuccess);
  static int inAll[kRanks][kCount], outAll[kRanks][kCount];
  for (int r = 0; r < kRanks; ++r)
    for (int i = 0; i < kCount; ++i) inAll[r][i] = r * 100 + i;
  CHECK(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < kRanks; ++r)
    CHECK(ncclAllReduce(inAll[r], outAll[r], kCount, ncclInt32, ncclSum, comms[r], NULL) == ncclSuccess);
  CHECK(ncclGroupEnd() == ncclSuccess);
  for (int r = 0; r < kRanks; ++r) {
    for (int i = 0; i < kCount; ++i) {
      if (outAll[r][i] != 100 + 2 * i) {
        printf("FAILED: InitAll AllReduce rank %d element %d is %d, expected %d\n", r, i, outAll[r][i], 100 + 2 * i);
        ++failures;
        break;
      }
    }
    ncclResult_t async = ncclInternalError;
    CHECK(ncclCommGetAsyncError(comms[r], &async) == ncclSuccess && async == ncclSuccess);
    CHECK(ncclCommDestroy(comms[r]) == ncclSuccess);
  }

  /* A config whose magic is wrong is refused with this header's code. */
  struct OldConfigInMemory bad;
  ncclConfig_t initializer = NCCL_CONFIG_INITIALIZER;
  bad.config = initializer;
  bad.config.magic = 0;
  ncclUniqueId badId;
  CHECK(ncclGetUniqueId(&badId) == ncclSuccess);
  ncclComm_t badComm = NULL;
  CHECK(ncclCommInitRankConfig(&badComm, 1, badId, 0, &bad.config) == ncclInvalidArgument);

  /* ncclCommInitRankConfig with the 2.28.9 config, one thread per rank. */
  static struct RankArgs ranks[kRanks];
  pthread_t threads[kRanks];
  ncclUniqueId id;
  CHECK(ncclGetUniqueId(&id) == ncclSuccess);
  for (int r = 0; r < kRanks; ++r) {
    ranks[r].id = id;
    ranks[r].rank = r;
    ranks[r].initResult = ranks[r].reduceResult = ncclInternalError;
    pthread_create(&threads[r], NULL, runRank, &ranks[r]);
  }
  for (int r = 0; r < kRanks; ++r) pthread_join(threads[r], NULL);
  for (int r = 0; r < kRanks; ++r) {
    if (ranks[r].initResult != ncclSuccess) {
      printf("FAILED: rank %d ncclCommInitRankConfig -> %d: %s\n", r, (int)ranks[r].initResult, ncclGetLastError(NULL));
      ++failures;
      continue;
    }
    CHECK(ranks[r].reduceResult == ncclSuccess);
    for (int i = 0; i < kCount; ++i) {
      const float want = 3.0f * (float)(i % 17);
      if (ranks[r].out[i] != want) {
        printf("FAILED: config AllReduce rank %d element %d is %g, expected %g\n", r, i, ranks[r].out[i], want);
        ++failures;
        break;
      }
    }
  }

  /* A wait that runs out: NCCL 2.30 says ncclTimeout (8), which this caller's header does not
   * have; a caller whose config says 2.28.9 gets ncclSystemError, as its NCCL gave. Rank 1 of
   * 2 never comes (BRAID_BOOTSTRAP_TIMEOUT=2, set before the first call). */
  {
    ncclUniqueId lonelyId;
    ncclComm_t lonely = NULL;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    CHECK(ncclGetUniqueId(&lonelyId) == ncclSuccess);
    const ncclResult_t r = ncclCommInitRankConfig(&lonely, 2, lonelyId, 0, &config);
    if (r != ncclSystemError) printf("FAILED: a timed-out init returned %d: %s\n", (int)r, ncclGetLastError(NULL));
    CHECK(r == ncclSystemError);
    if (strstr(ncclGetLastError(NULL), "waited 2 s") == NULL) printf("FAILED: its text: %s\n", ncclGetLastError(NULL));
    CHECK(strstr(ncclGetLastError(NULL), "waited 2 s") != NULL);
  }

  if (failures == 0) printf("old-header program: every check passed\n");
  return failures == 0 ? 0 : 1;
}
