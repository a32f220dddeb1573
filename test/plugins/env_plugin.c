/*
 * An env plugin (v1) for Braid's tests, written against include/nccl_env.h: a variable NAME
 * is answered with the value of BRAID_TEST_ENV_<NAME> when that is set, else NAME's own
 * (so a test can supply NCCL_ALGO through the plugin alone). init says it ran on stderr;
 * built with -DENV_INIT_FAILS its init fails.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_env.h"

static char lastName[256];

static ncclResult_t envInit(uint8_t major, uint8_t minor, uint8_t patch, const char* suffix) {
  fprintf(stderr, "test env plugin: init %d.%d.%d%s\n", major, minor, patch, suffix != NULL ? suffix : "(null)");
#ifdef ENV_INIT_FAILS
  return ncclInternalError;
#else
  return ncclSuccess;
#endif
}

static ncclResult_t envFinalize(void) {
  fprintf(stderr, "test env plugin: finalize\n");
  return ncclSuccess;
}

static const char* envGetEnv(const char* name) {
  char key[300];
  snprintf(key, sizeof key, "BRAID_TEST_ENV_%s", name);
  snprintf(lastName, sizeof lastName, "%s", name);
  const char* supplied = getenv(key);
  return supplied != NULL ? supplied : getenv(name);
}

const ncclEnv_v1_t ncclEnvPlugin_v1 = {
    .name = "test-env",
    .init = envInit,
    .finalize = envFinalize,
    .getEnv = envGetEnv,
};
