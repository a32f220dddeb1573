#include "runtime/driver_presence.h"

#include <dlfcn.h>

namespace braid::runtime {

bool nvidiaDriverPresent(const char* driverLibrary) {
  void* handle = dlopen(driverLibrary, RTLD_LAZY | RTLD_LOCAL);
  if (handle == nullptr) return false;
  dlclose(handle);
  return true;
}

std::string deviceQueryFailure(const std::string& runtimeText, const char* driverLibrary) {
  if (!nvidiaDriverPresent(driverLibrary)) {
    return std::string("no NVIDIA driver found (") + driverLibrary + " cannot be loaded)";
  }
  return "CUDA runtime: " + runtimeText;
}

}  // namespace braid::runtime
