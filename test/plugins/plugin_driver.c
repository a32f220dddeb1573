/*
 * Runs AllReduces on ranks that are threads or processes of one host, as a plain C program
 * linked against Braid's libnccl.so.2, for the plugin tests (each run is a fresh process, so
 * NCCL_TUNER_PLUGIN and NCCL_ENV_PLUGIN are read anew):
 *   plugin_driver NRANKS threads|processes destroy|abort COUNT|group...
 * Every rank sums rank+1 over COUNT floats and checks every element is exactly
 * NRANKS*(NRANKS+1)/2, then ends its communicator with ncclCommDestroy or ncclCommAbort.
 * A COUNT of "group" runs instead one group of an AllReduce (256 floats), a Broadcast from
 * rank 0 (64 floats) and an AllGather (32 floats), then a send of 16 floats to the next rank
 * and a receive from the previous one, and checks them all ("rank R: group ok").
 * A COUNT of "registered" runs an AllReduce of 256 floats in place on a buffer registered with
 * ncclCommRegister ("rank R: registered ok"); "sendregistered" one out of place where only the
 * send buffer is registered ("rank R: sendregistered ok"). "aggregate" runs one group of float
 * AllReduces of 1000, 3500, 3000, 5000, 100000 and 12000 elements, a double AllReduce of 1000 and a
 * float Broadcast of 1000 ("rank R: aggregate ok"): what a tuner plugin is asked about them.
 * "processes" forks the ranks and needs NCCL_COMM_ID (each computes the same unique id).
 * Prints "rank R: COUNT ok" per AllReduce and "rank R: done"; exits 0 when every rank did.
 */
#define _POSIX_C_SOURCE 200809L
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int nranks;
static int useAbort;
static int ncounts;
static size_t counts[16];
static ncclUniqueId id;

#define GROUP_RUN ((size_t)-1)
#define REGISTERED_RUN ((size_t)-2)
#define SEND_REGISTERED_RUN ((size_t)-3)
#define AGGREGATE_RUN ((size_t)-4)

/* An AllReduce of 256 floats over registered memory: in place (both buffers registered), or
 * out of place with only the send buffer registered; 0 when the result is exact. */
static int runRegistered(ncclComm_t comm, int rank, int inPlace) {
  enum { n = 256 };
  static __thread float send[n], recv[n];
  float* out = inPlace ? send : recv;
  for (int k = 0; k < n; ++k) send[k] = (float)(rank + 1);
  void* handle = NULL;
  ncclResult_t r = ncclCommRegister(comm, send, sizeof send, &handle);
  if (r == ncclSuccess) r = ncclAllReduce(send, out, n, ncclFloat, ncclSum, comm, NULL);
  if (handle != NULL) {
    const ncclResult_t d = ncclCommDeregister(comm, handle);
    if (r == ncclSuccess) r = d;
  }
  const char* what = inPlace ? "registered" : "sendregistered";
  int bad = r != ncclSuccess;
  if (bad) printf("rank %d: %s failed: %s: %s\n", rank, what, ncclGetErrorString(r), ncclGetLastError(comm));
  for (int k = 0; !bad && k < n; ++k) bad = out[k] != (float)(nranks * (nranks + 1) / 2);
  printf(bad ? "rank %d: %s wrong\n" : "rank %d: %s ok\n", rank, what);
  return bad;
}

/* The group of three collectives and a send/receive pair; 0 when every result is exact. */
static int runGroup(ncclComm_t comm, int rank) {
  enum { nReduce = 256, nBcast = 64, nGather = 32, nPeer = 16 };
  float reduce[nReduce], bcast[nBcast], mine[nGather], peerSend[nPeer], peerRecv[nPeer];
  float* gathered = malloc(sizeof(float) * nGather * (size_t)nranks);
  for (int k = 0; k < nReduce; ++k) reduce[k] = (float)(rank + 1);
  for (int k = 0; k < nBcast; ++k) bcast[k] = rank == 0 ? (float)(k + 7) : -1.0f;
  for (int k = 0; k < nGather; ++k) mine[k] = (float)(rank * 100 + k);
  for (int k = 0; k < nPeer; ++k) peerSend[k] = (float)(rank * 1000 + k), peerRecv[k] = -1.0f;
  const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  ncclResult_t r = ncclGroupStart();
  if (r == ncclSuccess) r = ncclAllReduce(reduce, reduce, nReduce, ncclFloat, ncclSum, comm, NULL);
  if (r == ncclSuccess) r = ncclBroadcast(bcast, bcast, nBcast, ncclFloat, 0, comm, NULL);
  if (r == ncclSuccess) r = ncclAllGather(mine, gathered, nGather, ncclFloat, comm, NULL);
  if (r == ncclSuccess) r = ncclSend(peerSend, nPeer, ncclFloat, next, comm, NULL);
  if (r == ncclSuccess) r = ncclRecv(peerRecv, nPeer, ncclFloat, prev, comm, NULL);
  const ncclResult_t ended = ncclGroupEnd();
  if (r == ncclSuccess) r = ended;
  int bad = r != ncclSuccess;
  if (bad) printf("rank %d: group failed: %s: %s\n", rank, ncclGetErrorString(r), ncclGetLastError(comm));
  const float sum = (float)(nranks * (nranks + 1) / 2);
  for (int k = 0; !bad && k < nReduce; ++k) bad = reduce[k] != sum;
  for (int k = 0; !bad && k < nBcast; ++k) bad = bcast[k] != (float)(k + 7);
  for (int p = 0; !bad && p < nranks; ++p)
    for (int k = 0; !bad && k < nGather; ++k) bad = gathered[p * nGather + k] != (float)(p * 100 + k);
  for (int k = 0; !bad && k < nPeer; ++k) bad = peerRecv[k] != (float)(prev * 1000 + k);
  free(gathered);
  printf(bad ? "rank %d: group wrong\n" : "rank %d: group ok\n", rank);
  return bad;
}

/* A group for a tuner plugin's aggregates (NCCL asks once for same-function collectives
 * within 4x of the smallest's size): float AllReduces of 1000, 3500 and 3000 elements (one
 * aggregate of 30000 bytes), 5000 and 12000 (20000 bytes, 5x the first: the next aggregate,
 * of 68000 bytes), 100000 (its own), a double AllReduce of 1000 (another type) and a float
 * Broadcast of 1000 (another function); 0 when every result is exact. */
static int runAggregate(ncclComm_t comm, int rank) {
  static const size_t sizes[] = {1000, 3500, 3000, 5000, 100000, 12000};
  enum { nSizes = 6, nOther = 1000 };
  float* x[nSizes];
  double* d = malloc(sizeof(double) * nOther);
  float* b = malloc(sizeof(float) * nOther);
  for (int i = 0; i < nSizes; ++i) {
    x[i] = malloc(sizeof(float) * sizes[i]);
    for (size_t k = 0; k < sizes[i]; ++k) x[i][k] = (float)(rank + 1 + i);
  }
  for (int k = 0; k < nOther; ++k) d[k] = rank + 0.5, b[k] = rank == 0 ? (float)k : -1.0f;
  ncclResult_t r = ncclGroupStart();
  for (int i = 0; i < nSizes && r == ncclSuccess; ++i) r = ncclAllReduce(x[i], x[i], sizes[i], ncclFloat, ncclSum, comm, NULL);
  if (r == ncclSuccess) r = ncclAllReduce(d, d, nOther, ncclDouble, ncclSum, comm, NULL);
  if (r == ncclSuccess) r = ncclBroadcast(b, b, nOther, ncclFloat, 0, comm, NULL);
  const ncclResult_t ended = ncclGroupEnd();
  if (r == ncclSuccess) r = ended;
  int bad = r != ncclSuccess;
  if (bad) printf("rank %d: aggregate failed: %s: %s\n", rank, ncclGetErrorString(r), ncclGetLastError(comm));
  for (int i = 0; i < nSizes; ++i) {
    const float want = (float)(nranks * (nranks + 1) / 2 + nranks * i);
    for (size_t k = 0; !bad && k < sizes[i]; ++k) bad = x[i][k] != want;
    free(x[i]);
  }
  for (int k = 0; !bad && k < nOther; ++k) bad = d[k] != nranks * (nranks - 1) / 2.0 + nranks * 0.5 || b[k] != (float)k;
  free(d);
  free(b);
  printf(bad ? "rank %d: aggregate wrong\n" : "rank %d: aggregate ok\n", rank);
  return bad;
}

static int runRank(int rank) {
  ncclComm_t comm = NULL;
  ncclResult_t r = ncclCommInitRank(&comm, nranks, id, rank);
  if (r != ncclSuccess) {
    printf("rank %d: init failed: %s: %s\n", rank, ncclGetErrorString(r), ncclGetLastError(NULL));
    return 1;
  }
  const float expected = (float)(nranks * (nranks + 1) / 2);
  for (int i = 0; i < ncounts; ++i) {
    const size_t n = counts[i];
    if (n == GROUP_RUN || n == REGISTERED_RUN || n == SEND_REGISTERED_RUN || n == AGGREGATE_RUN) {
      const int bad = n == GROUP_RUN       ? runGroup(comm, rank)
                      : n == AGGREGATE_RUN ? runAggregate(comm, rank)
                                           : runRegistered(comm, rank, n == REGISTERED_RUN);
      if (bad != 0) {
        ncclCommAbort(comm);
        return 1;
      }
      continue;
    }
    float* x = malloc((n > 0 ? n : 1) * sizeof(float));
    for (size_t k = 0; k < n; ++k) x[k] = (float)(rank + 1);
    r = ncclAllReduce(x, x, n, ncclFloat, ncclSum, comm, NULL);
    if (r != ncclSuccess) {
      printf("rank %d: AllReduce of %zu floats failed: %s: %s\n", rank, n, ncclGetErrorString(r), ncclGetLastError(comm));
      free(x);
      ncclCommAbort(comm);
      return 1;
    }
    for (size_t k = 0; k < n; ++k) {
      if (x[k] != expected) {
        printf("rank %d: AllReduce of %zu floats: element %zu is %f, not %f\n", rank, n, k, x[k], expected);
        free(x);
        ncclCommAbort(comm);
        return 1;
      }
    }
    free(x);
    printf("rank %d: %zu ok\n", rank, n);
    fflush(stdout);
  }
  r = useAbort ? ncclCommAbort(comm) : ncclCommDestroy(comm);
  if (r != ncclSuccess) {
    printf("rank %d: %s failed: %s\n", rank, useAbort ? "abort" : "destroy", ncclGetErrorString(r));
    return 1;
  }
  printf("rank %d: done\n", rank);
  fflush(stdout);
  return 0;
}

static void* threadMain(void* arg) {
  const int rank = (int)(size_t)arg;
  return (void*)(size_t)runRank(rank);
}

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: plugin_driver NRANKS threads|processes destroy|abort COUNT...\n");
    return 2;
  }
  nranks = atoi(argv[1]);
  const int processes = strcmp(argv[2], "processes") == 0;
  useAbort = strcmp(argv[3], "abort") == 0;
  for (int i = 4; i < argc && ncounts < 16; ++i) {
    counts[ncounts++] = strcmp(argv[i], "group") == 0            ? GROUP_RUN
                        : strcmp(argv[i], "registered") == 0     ? REGISTERED_RUN
                        : strcmp(argv[i], "sendregistered") == 0 ? SEND_REGISTERED_RUN
                        : strcmp(argv[i], "aggregate") == 0      ? AGGREGATE_RUN
                                                                 : (size_t)strtoull(argv[i], NULL, 10);
  }
  if (nranks < 1 || nranks > 64) return 2;
  setvbuf(stdout, NULL, _IOLBF, 0);
  int failed = 0;
  if (processes) {
    pid_t pids[64];
    for (int r = 0; r < nranks; ++r) {
      pids[r] = fork();
      if (pids[r] == 0) {
        if (ncclGetUniqueId(&id) != ncclSuccess) _exit(1);  /* the same id on every rank: NCCL_COMM_ID */
        _exit(runRank(r));
      }
    }
    for (int r = 0; r < nranks; ++r) {
      int status = 0;
      waitpid(pids[r], &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
    }
  } else {
    if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
    pthread_t threads[64];
    for (int r = 0; r < nranks; ++r) pthread_create(&threads[r], NULL, threadMain, (void*)(size_t)r);
    for (int r = 0; r < nranks; ++r) {
      void* result = NULL;
      pthread_join(threads[r], &result);
      if (result != NULL) failed = 1;
    }
  }
  printf("%s\n", failed ? "FAILED" : "all ranks ok");
  return failed;
}
