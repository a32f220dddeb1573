/*
 * The baseline of perf/compare_allreduce.sh: MPI_Allreduce (float, sum) timed the way
 * all_reduce_perf times Braid (warm-up, then the average of N calls, averaged over ranks),
 * printing "size time_us busbw_GBps" lines. Built by the script with mpicc.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  for (int a = 1; a + 1 < argc; a += 2) {
    const size_t bytes = strtoull(argv[a], NULL, 10);
    const int iters = atoi(argv[a + 1]);
    const size_t count = bytes / sizeof(float);
    float* in = malloc(bytes > 0 ? bytes : 4);
    float* out = malloc(bytes > 0 ? bytes : 4);
    for (size_t i = 0; i < count; ++i) in[i] = (float)(rank + i % 7);
    for (int i = 0; i < 5; ++i) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    for (int i = 0; i < iters; ++i) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double us = (MPI_Wtime() - start) * 1e6 / iters, sum = 0;
    MPI_Allreduce(&us, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    us = sum / n;
    if (rank == 0) printf("%zu %.3f %.3f\n", bytes, us, bytes / us / 1000.0 * 2.0 * (n - 1) / n);
    free(in);
    free(out);
  }
  MPI_Finalize();
  return 0;
}
