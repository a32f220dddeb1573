/*
 * Braid: the environment plugin interface of NCCL 2.28.9 (version 1), ABI-identical to NVIDIA's.
 *
 * An env plugin is a shared library exporting `const ncclEnv_v1_t ncclEnvPlugin_v1`.
 * NCCL_ENV_PLUGIN names it (a path, or a name X found as libnccl-env-X.so or X; unset:
 * libnccl-env.so; "none": no plugin). Loaded once per process, before the first NCCL_*
 * variable is read: init is called once, then getEnv for every NCCL_* variable the library
 * reads (instead of getenv), and finalize when the process exits.
 */
#ifndef NCCL_ENV_H_
#define NCCL_ENV_H_

#include <stdint.h>

#include "nccl.h"
#include "nccl_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  const char* name;
  /* The library's version (2, 28, 9) and its suffix text. A failure: the plugin is not used. */
  ncclResult_t (*init)(uint8_t ncclMajor, uint8_t ncclMinor, uint8_t ncclPatch, const char* suffix);
  ncclResult_t (*finalize)(void);
  /* The value of variable `name`, or NULL when it is unset. The text must stay valid until
   * getEnv is called again for the same name, or finalize. */
  const char* (*getEnv)(const char* name);
} ncclEnv_v1_t;

typedef ncclEnv_v1_t ncclEnv_t;
#define NCCL_ENV_PLUGIN_SYMBOL "ncclEnvPlugin_v1"

#ifdef __cplusplus
}
#endif

#endif /* NCCL_ENV_H_ */
