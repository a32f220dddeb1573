/*
 * One rank of a communicator, as a plain C program linked against Braid's libnccl.so.2:
 *   rank_main NRANKS RANK [allreduce]
 *   rank_main NRANKS RANK stream COUNT [kill-at K R | stop-at K R] [shrink]
 *   rank_main NRANKS RANK grow FROM FILE
 *   rank_main NRANKS RANK suspend
 * The unique id comes from ncclGetUniqueId, so NCCL_COMM_ID must be set (every rank then
 * computes the same id, and rank 0 starts the root). Prints "rank R of N ok" on success.
 * "stream" runs COUNT AllReduces of 1000 floats; with kill-at/stop-at, rank R sends itself
 * SIGKILL/SIGSTOP just before the K-th. A rank whose operation fails prints
 * "rank R: op #I failed after S s: <result>: <last error>", destroys its communicator and
 * exits with status 3. With "shrink", a survivor instead shrinks the communicator without rank R
 * (ncclCommShrink), runs 20 AllReduces of ones on the new one, checks them exactly, prints
 * "rank R2: shrink ok, 20 exact AllReduces on M ranks" and exits with 0.
 * "grow": ranks below FROM make a communicator of FROM ranks, rank 0 asks it for a grow id
 * (ncclCommGetUniqueId) and leaves it in FILE (a path every rank sees), and they grow it to
 * NRANKS; the other ranks wait for FILE (30 s at most) and join with its id. Every rank then
 * checks 20 AllReduces on the grown communicator exactly (the old ones also 5 on the parent) and
 * prints "rank R: grow ok, 20 exact AllReduces on NRANKS ranks".
 * "suspend": ncclCommSuspend(NCCL_SUSPEND_MEM) then ncclCommResume, printing "rank R: suspend:
 * RESULT: TEXT" and the same for resume.
 */
#define _POSIX_C_SOURCE 200809L
#include <nccl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <stdlib.h>

/* On failure: say why, release the communicator, and flush (a sanitizer's exit may not). */
#define CHECK(call)                                                                              \
  do {                                                                                           \
    ncclResult_t r_ = (call);                                                                    \
    if (r_ != ncclSuccess) {                                                                     \
      printf("%s failed: %s: %s\n", #call, ncclGetErrorString(r_), ncclGetLastError(NULL));      \
      fflush(stdout);                                                                            \
      ncclCommAbort(comm);                                                                       \
      return 1;                                                                                  \
    }                                                                                            \
  } while (0)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* After a death: the survivors' communicator without rank `dead`, checked by 20 AllReduces. */
static int shrinkAndGoOn(ncclComm_t comm, int nranks, int rank, int dead) {
  ncclComm_t next = NULL;
  int excluded[1] = {dead}, count = 0, me = -1;
  float x[1000];
  ncclResult_t r = ncclCommShrink(comm, excluded, 1, &next, NULL, NCCL_SHRINK_DEFAULT);
  if (r != ncclSuccess) {
    printf("rank %d: shrink failed: %s: %s\n", rank, ncclGetErrorString(r), ncclGetLastError(NULL));
    return 4;
  }
  if (ncclCommCount(next, &count) != ncclSuccess || ncclCommUserRank(next, &me) != ncclSuccess ||
      count != nranks - 1 || me != (rank < dead ? rank : rank - 1)) {
    printf("rank %d: the new communicator has %d ranks, this one %d\n", rank, count, me);
    return 4;
  }
  for (int op = 1; op <= 20; ++op) {
    for (int i = 0; i < 1000; ++i) x[i] = 1.0f;
    r = ncclAllReduce(x, x, 1000, ncclFloat, ncclSum, next, NULL);
    if (r != ncclSuccess) {
      printf("rank %d: AllReduce #%d after the shrink failed: %s: %s\n", rank, op, ncclGetErrorString(r),
             ncclGetLastError(NULL));
      return 4;
    }
    for (int i = 0; i < 1000; ++i) {
      if (x[i] != (float)count) {
        printf("rank %d: AllReduce #%d after the shrink gave %f at %d\n", rank, op, x[i], i);
        return 4;
      }
    }
  }
  if (ncclCommDestroy(next) != ncclSuccess || ncclCommDestroy(comm) != ncclSuccess) {
    printf("rank %d: destroy after the shrink failed: %s\n", rank, ncclGetLastError(NULL));
    return 4;
  }
  printf("rank %d: shrink ok, 20 exact AllReduces on %d ranks\n", rank, count);
  fflush(stdout);
  return 0;
}

/* n exact AllReduces (rank r adds r + 1); prints the failure and returns nonzero on one. */
static int exactAllReduces(ncclComm_t comm, int n, const char* which) {
  float x[1000];
  int count = 0, me = -1;
  if (ncclCommCount(comm, &count) != ncclSuccess || ncclCommUserRank(comm, &me) != ncclSuccess) return 5;
  for (int op = 1; op <= n; ++op) {
    for (int i = 0; i < 1000; ++i) x[i] = (float)(me + 1);
    ncclResult_t r = ncclAllReduce(x, x, 1000, ncclFloat, ncclSum, comm, NULL);
    if (r != ncclSuccess || x[999] != (float)(count * (count + 1) / 2)) {
      printf("rank %d: AllReduce #%d on the %s failed or gave %f: %s: %s\n", me, op, which, x[999],
             ncclGetErrorString(r), ncclGetLastError(NULL));
      return 5;
    }
  }
  return 0;
}

/* The "grow" mode (see the top of the file). */
static int growMode(int nranks, int rank, int from, const char* file) {
  ncclComm_t comm = NULL, grown = NULL;
  ncclUniqueId id;
  int count = 0, me = -1;
  if (rank < from) {
    CHECK(ncclGetUniqueId(&id));
    CHECK(ncclCommInitRank(&comm, from, id, rank));
    if (rank == 0) {
      char tmp[4096];
      snprintf(tmp, sizeof tmp, "%s.tmp", file);
      CHECK(ncclCommGetUniqueId(comm, &id));
      FILE* f = fopen(tmp, "wb");
      if (f == NULL || fwrite(&id, sizeof id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, file) != 0) {
        printf("rank 0: could not write %s\n", file);
        return 1;
      }
    }
    CHECK(ncclCommGrow(comm, nranks, rank == 0 ? &id : NULL, -1, &grown, NULL));
  } else {
    const double until = now() + 30;
    FILE* f = NULL;
    const struct timespec pause = {0, 10 * 1000 * 1000};
    while ((f = fopen(file, "rb")) == NULL && now() < until) nanosleep(&pause, NULL);
    if (f == NULL || fread(&id, sizeof id, 1, f) != 1) {
      printf("rank %d: no grow id in %s within 30 s\n", rank, file);
      return 1;
    }
    fclose(f);
    CHECK(ncclCommGrow(NULL, nranks, &id, rank, &grown, NULL));
  }
  CHECK(ncclCommCount(grown, &count));
  CHECK(ncclCommUserRank(grown, &me));
  if (count != nranks || me != rank) {
    printf("rank %d: the grown communicator says rank %d of %d\n", rank, me, count);
    return 1;
  }
  if (exactAllReduces(grown, 20, "grown communicator") != 0) return 5;
  if (comm != NULL && exactAllReduces(comm, 5, "parent") != 0) return 5;
  CHECK(ncclCommDestroy(grown));
  if (comm != NULL) CHECK(ncclCommDestroy(comm));
  printf("rank %d: grow ok, 20 exact AllReduces on %d ranks\n", rank, nranks);
  return 0;
}

/* The "stream" mode: COUNT AllReduces; a failure is reported, not fatal to the test program. */
static int stream(ncclComm_t comm, int nranks, int rank, int count, int signalAt, int signalRank, int sig,
                  int shrink) {
  float x[1000];
  for (int op = 1; op <= count; ++op) {
    if (rank == signalRank && op == signalAt) {
      printf("rank %d: raising signal %d before op #%d\n", rank, sig, op);
      fflush(stdout);
      raise(sig);
    }
    for (int i = 0; i < 1000; ++i) x[i] = (float)rank;
    const double start = now();
    ncclResult_t r = ncclAllReduce(x, x, 1000, ncclFloat, ncclSum, comm, NULL);
    if (r != ncclSuccess) {
      printf("rank %d: op #%d failed after %.1f s: %s: %s\n", rank, op, now() - start, ncclGetErrorString(r),
             ncclGetLastError(NULL));
      fflush(stdout);
      if (shrink) return shrinkAndGoOn(comm, nranks, rank, signalRank);
      ncclResult_t d = ncclCommDestroy(comm);
      printf("rank %d: destroy: %s\n", rank, ncclGetErrorString(d));
      fflush(stdout);
      return 3;
    }
    if (x[999] != (float)(nranks * (nranks - 1) / 2)) {
      printf("rank %d: op #%d gave %f\n", rank, op, x[999]);
      return 1;
    }
  }
  if (shrink) {
    printf("rank %d: no failure in %d AllReduces, so nothing to shrink\n", rank, count);
    return 6;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 3 || argc > 9) {
    fprintf(stderr, "usage: rank_main NRANKS RANK [allreduce | stream COUNT [kill-at K R | stop-at K R] [shrink] | "
                    "grow FROM FILE | suspend]\n");
    return 2;
  }
  const int nranks = atoi(argv[1]);
  const int rank = atoi(argv[2]);
  if (argc == 6 && strcmp(argv[3], "grow") == 0) return growMode(nranks, rank, atoi(argv[4]), argv[5]);
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  int count = -1, me = -1;
  CHECK(ncclGetUniqueId(&id));
  CHECK(ncclCommInitRank(&comm, nranks, id, rank));
  CHECK(ncclCommCount(comm, &count));
  CHECK(ncclCommUserRank(comm, &me));
  if (argc >= 5 && strcmp(argv[3], "stream") == 0) {
    int at = -1, who = -1, sig = 0;
    const int shrink = argc == 9 && strcmp(argv[8], "shrink") == 0;
    if (argc >= 8) {
      at = atoi(argv[6]);
      who = atoi(argv[7]);
      sig = strcmp(argv[5], "kill-at") == 0 ? SIGKILL : SIGSTOP;
    }
    int rc = stream(comm, nranks, rank, atoi(argv[4]), at, who, sig, shrink);
    if (rc != 0 || shrink) return rc;
  } else if (argc == 4 && strcmp(argv[3], "suspend") == 0) {
    /* Suspend and resume, each result printed (NCCL_DISABLE_MEM_MANAGER=1 refuses both). */
    ncclResult_t r = ncclCommSuspend(comm, NCCL_SUSPEND_MEM);
    printf("rank %d: suspend: %s: %s\n", rank, ncclGetErrorString(r), r == ncclSuccess ? "" : ncclGetLastError(comm));
    r = ncclCommResume(comm);
    printf("rank %d: resume: %s: %s\n", rank, ncclGetErrorString(r), r == ncclSuccess ? "" : ncclGetLastError(comm));
  } else if (argc == 4) {
    float x[1000];
    for (int i = 0; i < 1000; ++i) x[i] = (float)rank;
    CHECK(ncclAllReduce(x, x, 1000, ncclFloat, ncclSum, comm, NULL));
    if (x[999] != (float)(nranks * (nranks - 1) / 2)) {
      printf("rank %d: allreduce gave %f\n", rank, x[999]);
      return 1;
    }
  }
  CHECK(ncclCommDestroy(comm));
  if (count != nranks || me != rank) {
    printf("rank %d of %d: wrong count %d or rank %d\n", rank, nranks, count, me);
    return 1;
  }
  printf("rank %d of %d ok\n", rank, nranks);
  return 0;
}
