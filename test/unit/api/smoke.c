/* A C program linked against Braid's libnccl.so.2: asks for the version, makes one call fail
 * on purpose, and prints both. Driven by api_test.cc with different environments. */
#include <nccl.h>
#include <stdio.h>

int main(void) {
  int version = 0;
  ncclResult_t r = ncclGetVersion(&version);
  printf("smoke: version %d result %d\n", version, (int)r);
  int count = 0;
  r = ncclCommCount(NULL, &count);
  printf("smoke: ncclCommCount(NULL) -> %d: %s\n", (int)r, ncclGetLastError(NULL));
  return 0;
}
