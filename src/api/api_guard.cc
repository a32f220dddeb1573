#include "api/api.h"

#include <string>

#include "braid_config.h"
#include "comm/communicator.h"
#include "core/log.h"

namespace braid::api {

ncclResult_t report(const char* function, Communicator* held, ncclResult_t code, const char* text) noexcept {
  code = codeForCaller(code);
  try {
    const std::string message = std::string(function) + ": " + text;
    setThreadLastError(message);
    if (held != nullptr) held->setLastError(message);
    BRAID_WARN("%s (%s)", message.c_str(), resultString(code));
  } catch (...) {
    // Out of memory while reporting: the code alone must still reach the caller.
  }
  return code;
}

void notImplemented(const char* when) {
  fail(ncclInvalidUsage, "not implemented yet in Braid %s (arrives with %s)", BRAID_VERSION, when);
}

}  // namespace braid::api
