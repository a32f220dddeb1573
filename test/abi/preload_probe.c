/*
 * Built against NVIDIA's nccl.h and linked against NVIDIA's libnccl.so.2. Prints which
 * library provides ncclGetVersion and every libnccl file mapped into the process, so
 * preload_test.sh can check that LD_PRELOAD puts Braid in place of NVIDIA's library.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  int version = 0;
  ncclResult_t r = ncclGetVersion(&version);
  printf("ncclGetVersion -> %d, version %d\n", (int)r, version);

  Dl_info info;
  void* symbol = dlsym(RTLD_DEFAULT, "ncclGetVersion");
  if (symbol != NULL && dladdr(symbol, &info) != 0) printf("provider %s\n", info.dli_fname);

  FILE* maps = fopen("/proc/self/maps", "r");
  char line[4096];
  char last[4096] = "";
  while (maps != NULL && fgets(line, sizeof(line), maps) != NULL) {
    char* path = strchr(line, '/');
    if (path == NULL || strstr(path, "libnccl") == NULL) continue;
    path[strcspn(path, "\n")] = '\0';
    if (strcmp(path, last) != 0) printf("mapped %s\n", path);
    strncpy(last, path, sizeof(last) - 1);
  }
  if (maps != NULL) fclose(maps);
  return r == ncclSuccess ? 0 : 1;
}
