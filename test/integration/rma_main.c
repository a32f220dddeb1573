/*
 * One rank of a one-sided test, as a plain C program linked against Braid's libnccl.so.2, for
 * ranks on different hosts (network namespaces, or NCCL_HOSTID on one machine):
 *   rma_main NRANKS RANK check BIG [strict]
 *   rma_main NRANKS RANK die
 *   rma_main NRANKS RANK diewarm
 * NCCL_COMM_ID must be set (every rank computes the same unique id). Communicators have two
 * RMA contexts.
 * "check": every rank registers a window of ncclMemAlloc's memory (NCCL_WIN_STRICT_ORDERING with
 * "strict") and puts to the next rank, on ctx 1, pieces of 0, 1, 4099, 1 MiB + 3 and BIG bytes,
 * each in its own region of the window, then one ncclSignal on ctx 0. The receiver waits for
 * that one signal only, then checks every byte of every piece (data before signal, in call
 * order), then waits for the five puts' signals on ctx 1. Then every rank puts 4099 bytes into
 * every other rank's window (its own slice of the window's last region) and each waits for all
 * of them with one descriptor per peer and checks them. A put at an offset past the window's end
 * must fail with ncclInvalidArgument naming the offset. Prints "rank R: rma ok" and the
 * refusal's text, or what went wrong (exit status 1).
 * "die": rank 1 registers the window and exits without a word (SIGKILL); rank 0 waits for a
 * signal from it and prints "rank 0: wait on the dead rank -> RESULT after S s: TEXT".
 * "diewarm" (2 ranks): each rank puts 1 MiB to the other and waits for it (the one-sided paths
 * exist both ways), rank 0 tells rank 1 its put landed, then rank 1 is killed (SIGKILL); rank 0 waits for a second signal from it
 * ("rank 0: second wait on the dead rank -> RESULT after S s: TEXT"), then puts 1 MiB to it until
 * a put fails or 30 s passed ("rank 0: puts to the dead rank -> RESULT after S s: TEXT").
 */
#define _POSIX_C_SOURCE 200809L
#include <nccl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                         \
  do {                                                                                      \
    ncclResult_t r_ = (call);                                                               \
    if (r_ != ncclSuccess) {                                                                \
      printf("%s failed: %s: %s\n", #call, ncclGetErrorString(r_), ncclGetLastError(NULL)); \
      fflush(stdout);                                                                       \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

enum { kPieces = 5, kSliceBytes = 4099 };

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The byte rank `from` writes at position i of piece k. */
static unsigned char pattern(int from, int k, size_t i) {
  return (unsigned char)(from * 31 + k * 17 + i * 7 + (i >> 12) * 3 + 1);
}

static size_t roundUp(size_t x) {
  return (x + 4095) / 4096 * 4096;
}

static int check(ncclComm_t comm, int nranks, int rank, size_t big, int flags) {
  const size_t sizes[kPieces] = {0, 1, kSliceBytes, (1u << 20) + 3, big};
  size_t offsets[kPieces], total = 0;
  for (int k = 0; k < kPieces; ++k) {
    offsets[k] = total;
    total += roundUp(sizes[k] + 1);
  }
  const size_t slices = total;  /* then one slice of kSliceBytes per source rank */
  const size_t windowBytes = roundUp(slices + (size_t)nranks * kSliceBytes);
  const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  void* memory = NULL;
  ncclWindow_t win = NULL;
  CHECK(ncclMemAlloc(&memory, windowBytes));
  unsigned char* window = memory;
  memset(window, 0, windowBytes);
  CHECK(ncclCommWindowRegister(comm, memory, windowBytes, &win, flags));
  size_t largest = 0;
  for (int k = 0; k < kPieces; ++k) largest = sizes[k] > largest ? sizes[k] : largest;
  unsigned char* source = malloc(largest);
  if (nranks > 1) {
    for (int k = 0; k < kPieces; ++k) {
      for (size_t i = 0; i < sizes[k]; ++i) source[i] = pattern(rank, k, i);
      CHECK(ncclPutSignal(source, sizes[k], ncclUint8, next, win, offsets[k], 0, 1, 0, comm, NULL));
    }
    CHECK(ncclSignal(next, 0, 0, 0, comm, NULL));
    ncclWaitSignalDesc_t last = {1, prev, 0, 0};
    CHECK(ncclWaitSignal(1, &last, comm, NULL));
    for (int k = 0; k < kPieces; ++k) {
      for (size_t i = 0; i < sizes[k]; ++i) {
        if (window[offsets[k] + i] != pattern(prev, k, i)) {
          printf("rank %d: byte %zu of piece %d (%zu bytes) from rank %d is %u, not %u, when its signal came\n", rank,
                 i, k, sizes[k], prev, window[offsets[k] + i], pattern(prev, k, i));
          return 1;
        }
      }
      if (window[offsets[k] + sizes[k]] != 0) {
        printf("rank %d: the byte after piece %d was written\n", rank, k);
        return 1;
      }
    }
    ncclWaitSignalDesc_t puts = {kPieces, prev, 0, 1};
    CHECK(ncclWaitSignal(1, &puts, comm, NULL));
  }
  /* Every rank to every other, in its own slice; one wait with a descriptor per peer. */
  for (size_t i = 0; i < kSliceBytes; ++i) source[i] = pattern(rank, kPieces, i);
  for (int peer = 0; peer < nranks; ++peer) {
    if (peer == rank) continue;
    CHECK(ncclPutSignal(source, kSliceBytes, ncclUint8, peer, win, slices + (size_t)rank * kSliceBytes, 0, 0, 0, comm,
                        NULL));
  }
  ncclWaitSignalDesc_t* descs = calloc((size_t)nranks, sizeof *descs);
  int nDesc = 0;
  for (int from = 0; from < nranks; ++from) {
    if (from == rank) continue;
    descs[nDesc].opCnt = 1;
    descs[nDesc].peer = from;
    descs[nDesc].sigIdx = 0;
    descs[nDesc].ctx = 0;
    ++nDesc;
  }
  CHECK(ncclWaitSignal(nDesc, descs, comm, NULL));
  for (int from = 0; from < nranks; ++from) {
    if (from == rank) continue;
    for (size_t i = 0; i < kSliceBytes; ++i) {
      if (window[slices + (size_t)from * kSliceBytes + i] != pattern(from, kPieces, i)) {
        printf("rank %d: byte %zu of rank %d's slice is wrong\n", rank, i, from);
        return 1;
      }
    }
  }
  /* Past the window's end: refused before anything moves. */
  ncclResult_t r = ncclPutSignal(source, 2, ncclUint8, next, win, windowBytes - 1, 0, 0, 0, comm, NULL);
  if (r != ncclInvalidArgument || strstr(ncclGetLastError(comm), "peerWinOffset") == NULL) {
    printf("rank %d: a put past the window's end gave %d: %s\n", rank, (int)r, ncclGetLastError(comm));
    return 1;
  }
  printf("rank %d: refused: %s\n", rank, ncclGetLastError(comm));
  /* No put is in flight once every rank got all of its own: deregistering is safe. */
  float x = 1;
  CHECK(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, NULL));
  CHECK(ncclCommWindowDeregister(comm, win));
  CHECK(ncclMemFree(memory));
  free(source);
  free(descs);
  printf("rank %d: rma ok (%d ranks, pieces up to %zu bytes, flags %d)\n", rank, nranks, big, flags);
  return 0;
}

static int die(ncclComm_t comm, int rank) {
  void* memory = NULL;
  ncclWindow_t win = NULL;
  CHECK(ncclMemAlloc(&memory, 4096));
  CHECK(ncclCommWindowRegister(comm, memory, 4096, &win, NCCL_WIN_DEFAULT));
  if (rank == 1) raise(SIGKILL);
  if (rank != 0) return 0;
  ncclWaitSignalDesc_t d = {1, 1, 0, 0};
  const double start = now();
  ncclResult_t r = ncclWaitSignal(1, &d, comm, NULL);
  printf("rank 0: wait on the dead rank -> %d after %.1f s: %s\n", (int)r, now() - start, ncclGetLastError(comm));
  return r == ncclSuccess ? 1 : 0;
}

static int dieWarm(ncclComm_t comm, int rank) {
  const size_t bytes = 1 << 20;
  void* memory = NULL;
  ncclWindow_t win = NULL;
  CHECK(ncclMemAlloc(&memory, bytes));
  CHECK(ncclCommWindowRegister(comm, memory, bytes, &win, NCCL_WIN_DEFAULT));
  char* source = calloc(bytes, 1);
  if (source == NULL) return 1;
  const int peer = 1 - rank;
  CHECK(ncclPutSignal(source, bytes, ncclInt8, peer, win, 0, 0, 0, 0, comm, NULL));
  ncclWaitSignalDesc_t d = {1, peer, 0, 0};
  CHECK(ncclWaitSignal(1, &d, comm, NULL));
  /* (rank 1's put has landed only when rank 0 says so on ctx 1: a put returns once its bytes
   * are copied, and a process killed before they left would take them along) */
  if (rank == 0) CHECK(ncclSignal(1, 0, 1, 0, comm, NULL));
  if (rank == 1) {
    ncclWaitSignalDesc_t landed = {1, 0, 0, 1};
    CHECK(ncclWaitSignal(1, &landed, comm, NULL));
    raise(SIGKILL);
  }
  double start = now();
  ncclResult_t r = ncclWaitSignal(1, &d, comm, NULL);
  printf("rank 0: second wait on the dead rank -> %d after %.1f s: %s\n", (int)r, now() - start,
         ncclGetLastError(comm));
  fflush(stdout);
  start = now();
  do {
    r = ncclPutSignal(source, bytes, ncclInt8, peer, win, 0, 0, 0, 0, comm, NULL);
  } while (r == ncclSuccess && now() - start < 30);
  printf("rank 0: puts to the dead rank -> %d after %.1f s: %s\n", (int)r, now() - start, ncclGetLastError(comm));
  free(source);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: rma_main NRANKS RANK check BIG [strict] | die | diewarm\n");
    return 2;
  }
  const int nranks = atoi(argv[1]), rank = atoi(argv[2]);
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.numRmaCtx = 2;
  CHECK(ncclGetUniqueId(&id));
  CHECK(ncclCommInitRankConfig(&comm, nranks, id, rank, &config));
  int rc = 2;
  if (argc >= 5 && strcmp(argv[3], "check") == 0) {
    const int strict = argc == 6 && strcmp(argv[5], "strict") == 0;
    rc = check(comm, nranks, rank, (size_t)strtoull(argv[4], NULL, 10),
               strict ? NCCL_WIN_STRICT_ORDERING : NCCL_WIN_DEFAULT);
  } else if (strcmp(argv[3], "die") == 0) {
    rc = die(comm, rank);
  } else if (strcmp(argv[3], "diewarm") == 0) {
    rc = dieWarm(comm, rank);
  }
  fflush(stdout);
  if (rc != 0) {
    ncclCommAbort(comm);
    return rc;
  }
  CHECK(ncclCommDestroy(comm));
  return 0;
}
