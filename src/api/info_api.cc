// Version, error texts and logging control.
#include "api/api.h"
#include "comm/communicator.h"
#include "core/log.h"

using namespace braid;

BRAID_API(ncclResult_t, ncclGetVersion, int* version);
ncclResult_t pncclGetVersion(int* version) {
  return api::guarded("ncclGetVersion", nullptr, [&] {
    api::requireNonNull(version, "version");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
  });
}

BRAID_API(const char*, ncclGetErrorString, ncclResult_t result);
const char* pncclGetErrorString(ncclResult_t result) {
  return resultCodeString(rawCode(result));  // (a C caller may pass any int: never loaded as the enum)
}

BRAID_API(const char*, ncclGetLastError, ncclComm_t comm);
const char* pncclGetLastError(ncclComm_t comm) {
  // A live communicator keeps its own text; the returned pointer stays valid until the
  // next failure on the same thread.
  static thread_local std::string copy;
  if (comm != nullptr && handles::enter(comm)) {  // (held while it is read: a destroy waits)
    try {
      copy = comm->lastError();
      handles::leave(comm);
      return copy.c_str();
    } catch (...) {
      handles::leave(comm);
    }
  }
  return threadLastError();
}

namespace {
void resetDebugInit() noexcept {
  try {
    log::reconfigure();
  } catch (...) {
    // Logging stays as it was.
  }
}
}  // namespace

BRAID_API(void, ncclResetDebugInit);
void pncclResetDebugInit() { resetDebugInit(); }

// NVIDIA exports this one without a 'p' twin.
extern "C" __attribute__((visibility("default"))) void ncclResetDebugInitInternal() { resetDebugInit(); }
