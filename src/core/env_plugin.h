// The env plugin (NCCL's ncclEnv_v1_t, include/nccl_env.h): when NCCL_ENV_PLUGIN names one (or
// libnccl-env.so exists), its getEnv answers for every NCCL_* variable the parameter registry
// reads, instead of the process environment.
//
// Loaded once per process, by the first variable read (thread-safe): NCCL_ENV_PLUGIN itself is
// read from the process environment, as NCCL does. init is called with 2.28.9; a library
// without ncclEnvPlugin_v1, or whose init fails, is a WARN and the environment is read as
// usual. finalize runs when the process exits; reads after that use getenv.
#pragma once

#include <string>

namespace braid::envplugin {

/// The value of variable `name` (nullptr when unset): the plugin's answer for NCCL_* names when
/// a plugin is loaded, else getenv's. The text stays valid for the life of the process.
const char* get(const char* name);

/// Logs, once, what loading the plugin found (the load may run before logging is configured,
/// and logging itself reads variables through get()). Called by core::initOnce.
void reportLoad();

/// The loaded plugin's name ("" when none).
std::string loadedName();

}  // namespace braid::envplugin
