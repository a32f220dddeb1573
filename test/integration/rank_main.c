/*
 * One rank of a communicator, as a plain C program linked against Braid's libnccl.so.2:
 *   rank_main NRANKS RANK [allreduce]
 * The unique id comes from ncclGetUniqueId, so NCCL_COMM_ID must be set (every rank then
 * computes the same id, and rank 0 starts the root). Prints "rank R of N ok" on success.
 */
#include <nccl.h>
#include <stdio.h>
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

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    fprintf(stderr, "usage: rank_main NRANKS RANK [allreduce]\n");
    return 2;
  }
  const int nranks = atoi(argv[1]);
  const int rank = atoi(argv[2]);
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  int count = -1, me = -1;
  CHECK(ncclGetUniqueId(&id));
  CHECK(ncclCommInitRank(&comm, nranks, id, rank));
  CHECK(ncclCommCount(comm, &count));
  CHECK(ncclCommUserRank(comm, &me));
  if (argc == 4) {
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
