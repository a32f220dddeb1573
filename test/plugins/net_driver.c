/*
 * Runs collectives between processes of one host, as a plain C program linked against Braid's
 * libnccl.so.2, for the net plugin tests (NCCL_NET_PLUGIN is read once per process):
 *   net_driver NRANKS destroy|abort COUNT...
 *   net_driver NRANKS rank R COUNT...
 * Forks NRANKS ranks (NCCL_COMM_ID must be set: each computes the same unique id); the second
 * form runs rank R alone, in this process, and ends it with ncclCommDestroy (ranks on separate
 * hosts, started one by one: test/netns/third_party_plugins.sh). For each
 * COUNT every rank runs, on floats whose results are exact whatever the order:
 *   AllReduce (sum of rank+1), AllGather (rank r's block holds r*1000 + i mod 1000),
 *   Broadcast from rank 1 % NRANKS, and a ring shift of COUNT floats by Send/Recv; then, on
 *   COUNT bytes (uint8), a Scatter from rank 0 and the same ring shift,
 * checks every element, then ends its communicator with ncclCommDestroy or ncclCommAbort
 * (abort: once every rank has finished, a barrier through pipes to the parent, since an
 * abort drops whatever this rank still had to send, as NCCL's does).
 * Prints "rank R: COUNT ok" per count and "rank R: done"; a failed call prints
 * "rank R: <op> of COUNT failed: <result>: <last error>", aborts the communicator, prints
 * "rank R: aborted" and exits 3. Exits 0 when every rank did all.
 * Set NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1 to put every pair of ranks on the network path.
 * NET_DRIVER_LONE_SEND=N: first an AllReduce of one float (the ring connects), then rank 0
 * sends N floats to rank 1 alone and goes on to the counts' first AllReduce while rank 1 may
 * still be receiving (with NET_LOOPBACK_FIRST_SEND_STALL_MS, a send that completed locally
 * and is still on its way: the watchdog must not call it a deadlock); prints "rank R: lone
 * send ok".
 */
#define _POSIX_C_SOURCE 200809L
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int nranks;
static int useAbort;
static int donePipe[2], goPipe[2]; /* ranks -> parent: finished; parent -> ranks: closed when all are */

static int failed(ncclComm_t comm, int rank, const char* op, size_t n, ncclResult_t r) {
  printf("rank %d: %s of %zu failed: %s: %s\n", rank, op, n, ncclGetErrorString(r), ncclGetLastError(comm));
  fflush(stdout);
  ncclCommAbort(comm);
  printf("rank %d: aborted\n", rank);
  fflush(stdout);
  return 3;
}

static int wrong(ncclComm_t comm, int rank, const char* op, size_t n, size_t i, float got, float want) {
  printf("rank %d: %s of %zu: element %zu is %f, not %f\n", rank, op, n, i, got, want);
  fflush(stdout);
  ncclCommAbort(comm);
  return 1;
}

static int runCount(ncclComm_t comm, int rank, size_t n) {
  const size_t alloc = (n > 0 ? n : 1) * (size_t)nranks;
  float* a = malloc(alloc * sizeof(float));
  float* b = malloc(alloc * sizeof(float));
  int rc = 0;
  ncclResult_t r;
  /* AllReduce */
  for (size_t k = 0; k < n; ++k) a[k] = (float)(rank + 1);
  if ((r = ncclAllReduce(a, a, n, ncclFloat, ncclSum, comm, NULL)) != ncclSuccess) {
    rc = failed(comm, rank, "AllReduce", n, r);
    goto done;
  }
  for (size_t k = 0; k < n; ++k)
    if (a[k] != (float)(nranks * (nranks + 1) / 2)) {
      rc = wrong(comm, rank, "AllReduce", n, k, a[k], (float)(nranks * (nranks + 1) / 2));
      goto done;
    }
  /* AllGather */
  for (size_t k = 0; k < n; ++k) a[k] = (float)(rank * 1000 + (int)(k % 1000));
  if ((r = ncclAllGather(a, b, n, ncclFloat, comm, NULL)) != ncclSuccess) {
    rc = failed(comm, rank, "AllGather", n, r);
    goto done;
  }
  for (size_t k = 0; k < n * (size_t)nranks; ++k) {
    const float want = (float)((int)(k / (n > 0 ? n : 1)) * 1000 + (int)(k % (n > 0 ? n : 1) % 1000));
    if (b[k] != want) {
      rc = wrong(comm, rank, "AllGather", n, k, b[k], want);
      goto done;
    }
  }
  /* Broadcast */
  const int root = 1 % nranks;
  for (size_t k = 0; k < n; ++k) a[k] = rank == root ? (float)(k % 4096) : -1.0f;
  if ((r = ncclBroadcast(a, a, n, ncclFloat, root, comm, NULL)) != ncclSuccess) {
    rc = failed(comm, rank, "Broadcast", n, r);
    goto done;
  }
  for (size_t k = 0; k < n; ++k)
    if (a[k] != (float)(k % 4096)) {
      rc = wrong(comm, rank, "Broadcast", n, k, a[k], (float)(k % 4096));
      goto done;
    }
  /* Send/Recv: a ring shift */
  const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  for (size_t k = 0; k < n; ++k) a[k] = (float)(rank * 7 + (int)(k % 999));
  ncclGroupStart();
  ncclSend(a, n, ncclFloat, next, comm, NULL);
  ncclRecv(b, n, ncclFloat, prev, comm, NULL);
  if ((r = ncclGroupEnd()) != ncclSuccess) {
    rc = failed(comm, rank, "Send/Recv", n, r);
    goto done;
  }
  for (size_t k = 0; k < n; ++k)
    if (b[k] != (float)(prev * 7 + (int)(k % 999))) {
      rc = wrong(comm, rank, "Send/Recv", n, k, b[k], (float)(prev * 7 + (int)(k % 999)));
      goto done;
    }
  /* Bytes (uint8), whose sizes need not be a multiple of 4 (1, a slot's bytes - 1, 4099): a
   * Scatter from rank 0 (rank r's block holds r*31 + i mod 251), then a ring shift. */
  unsigned char* bytesIn = (unsigned char*)a;
  unsigned char* bytesOut = (unsigned char*)b;
  for (size_t k = 0; k < n * (size_t)nranks; ++k) bytesIn[k] = (unsigned char)((k / (n > 0 ? n : 1)) * 31 + k % 251);
  memset(bytesOut, 0xee, n);
  if ((r = ncclScatter(bytesIn, bytesOut, n, ncclUint8, 0, comm, NULL)) != ncclSuccess) {
    rc = failed(comm, rank, "Scatter (uint8)", n, r);
    goto done;
  }
  for (size_t k = 0; k < n; ++k)
    if (bytesOut[k] != (unsigned char)(rank * 31 + (rank * n + k) % 251)) {
      rc = wrong(comm, rank, "Scatter (uint8)", n, k, bytesOut[k], (unsigned char)(rank * 31 + (rank * n + k) % 251));
      goto done;
    }
  for (size_t k = 0; k < n; ++k) bytesIn[k] = (unsigned char)(rank * 13 + k % 253);
  ncclGroupStart();
  ncclSend(bytesIn, n, ncclUint8, next, comm, NULL);
  ncclRecv(bytesOut, n, ncclUint8, prev, comm, NULL);
  if ((r = ncclGroupEnd()) != ncclSuccess) {
    rc = failed(comm, rank, "Send/Recv (uint8)", n, r);
    goto done;
  }
  for (size_t k = 0; k < n; ++k)
    if (bytesOut[k] != (unsigned char)(prev * 13 + k % 253)) {
      rc = wrong(comm, rank, "Send/Recv (uint8)", n, k, bytesOut[k], (unsigned char)(prev * 13 + k % 253));
      goto done;
    }
  printf("rank %d: %zu ok\n", rank, n);
  fflush(stdout);
done:
  free(a);
  free(b);
  return rc;
}

/* NET_DRIVER_LONE_SEND: see the top. */
static int loneSend(ncclComm_t comm, int rank, size_t n) {
  float one = 1.0f;
  ncclResult_t r = ncclAllReduce(&one, &one, 1, ncclFloat, ncclSum, comm, NULL);
  if (r != ncclSuccess) return failed(comm, rank, "AllReduce", 1, r);
  if (one != (float)nranks) return wrong(comm, rank, "AllReduce", 1, 0, one, (float)nranks);
  float* a = malloc((n > 0 ? n : 1) * sizeof(float));
  int rc = 0;
  if (rank == 0) {
    for (size_t k = 0; k < n; ++k) a[k] = (float)(k % 1000);
    if ((r = ncclSend(a, n, ncclFloat, 1, comm, NULL)) != ncclSuccess) rc = failed(comm, rank, "Send", n, r);
  } else if (rank == 1) {
    if ((r = ncclRecv(a, n, ncclFloat, 0, comm, NULL)) != ncclSuccess) rc = failed(comm, rank, "Recv", n, r);
    for (size_t k = 0; k < n && rc == 0; ++k)
      if (a[k] != (float)(k % 1000)) rc = wrong(comm, rank, "Recv", n, k, a[k], (float)(k % 1000));
  }
  free(a);
  if (rc == 0) printf("rank %d: lone send ok\n", rank);
  return rc;
}

static int runRank(int rank, int ncounts, char** counts) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 1; /* the same id on every rank: NCCL_COMM_ID */
  ncclComm_t comm = NULL;
  ncclResult_t r = ncclCommInitRank(&comm, nranks, id, rank);
  if (r != ncclSuccess) {
    printf("rank %d: init failed: %s: %s\n", rank, ncclGetErrorString(r), ncclGetLastError(NULL));
    return 1;
  }
  const char* lone = getenv("NET_DRIVER_LONE_SEND");
  if (lone != NULL && nranks >= 2) {
    const int rc = loneSend(comm, rank, (size_t)strtoull(lone, NULL, 10));
    if (rc != 0) return rc;
  }
  for (int i = 0; i < ncounts; ++i) {
    const int rc = runCount(comm, rank, (size_t)strtoull(counts[i], NULL, 10));
    if (rc != 0) return rc;
  }
  if (useAbort) {
    char c = 'd', sink;
    if (write(donePipe[1], &c, 1) != 1) return 1;
    while (read(goPipe[0], &sink, 1) > 0) {
    }
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

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: net_driver NRANKS destroy|abort COUNT... | net_driver NRANKS rank R COUNT...\n");
    return 2;
  }
  nranks = atoi(argv[1]);
  useAbort = strcmp(argv[2], "abort") == 0;
  if (nranks < 1 || nranks > 64) return 2;
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (strcmp(argv[2], "rank") == 0) {
    const int rank = atoi(argv[3]);
    if (argc < 5 || rank < 0 || rank >= nranks) return 2;
    return runRank(rank, argc - 4, argv + 4);
  }
  if (pipe(donePipe) != 0 || pipe(goPipe) != 0) return 2;
  pid_t pids[64];
  for (int r = 0; r < nranks; ++r) {
    pids[r] = fork();
    if (pids[r] == 0) {
      close(goPipe[1]);
      close(donePipe[0]);
      _exit(runRank(r, argc - 3, argv + 3));
    }
  }
  close(goPipe[0]);
  close(donePipe[1]);
  if (useAbort) { /* every rank finished (or failed: its end of the pipe closes), then all abort */
    char c;
    for (int n = 0; n < nranks && read(donePipe[0], &c, 1) == 1; ++n) {
    }
  }
  close(goPipe[1]);
  int worst = 0;
  for (int r = 0; r < nranks; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    if (code > worst) worst = code;
  }
  printf("%s\n", worst == 0 ? "all ranks ok" : "FAILED");
  return worst;
}
