/* memcpy of SIZE bytes, N times: prints "size time_us GBps" (the memory-bound ceiling). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char** argv) {
  for (int a = 1; a + 1 < argc; a += 2) {
    const size_t bytes = strtoull(argv[a], NULL, 10);
    const int iters = atoi(argv[a + 1]);
    char* src = malloc(bytes + 1);
    char* dst = malloc(bytes + 1);
    memset(src, 1, bytes + 1);
    memset(dst, 2, bytes + 1);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < iters; ++i) {
      memcpy(dst, src, bytes);
      __asm__ volatile("" ::: "memory");
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double us = ((t1.tv_sec - t0.tv_sec) * 1e6 + (t1.tv_nsec - t0.tv_nsec) / 1e3) / iters;
    printf("%zu %.3f %.3f\n", bytes, us, bytes / us / 1000.0);
    free(src);
    free(dst);
  }
  return 0;
}
