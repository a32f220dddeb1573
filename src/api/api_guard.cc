#include "api/api.h"

#include <string>

#include "braid_config.h"
#include "comm/communicator.h"
#include "core/log.h"
#include "group/group.h"

namespace braid::api {

ncclResult_t dispatch(Communicator& host, std::function<void()> job) {
  if (group::active()) {
    group::defer(&host, std::move(job));
    return ncclSuccess;
  }
  return host.run(std::move(job), /*background=*/false);
}

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
