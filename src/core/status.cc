#include "core/status.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <vector>

namespace braid {

namespace {
thread_local std::string tlsLastError;
}

void fail(ncclResult_t code, const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  const int length = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::vector<char> text(length > 0 ? static_cast<size_t>(length) + 1 : 1, '\0');
  if (length > 0) std::vsnprintf(text.data(), text.size(), format, args);
  va_end(args);
  throw Error(code, text.data());
}

const char* resultString(ncclResult_t result) noexcept { return resultCodeString(rawCode(result)); }

const char* resultCodeString(int code) noexcept {
  if (code < 0 || code >= ncclNumResults) return "unknown result code";
  switch (static_cast<ncclResult_t>(code)) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the Braid developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    case ncclTimeout: return "timeout";
    case ncclNumResults: break;
  }
  return "unknown result code";
}

const char* threadLastError() noexcept { return tlsLastError.c_str(); }

void setThreadLastError(const std::string& text) { tlsLastError = text; }

namespace {
std::atomic<bool> gCallerBefore230{false};
}  // namespace

void noteCallerVersion(unsigned version) noexcept {
  if (version < NCCL_VERSION(2, 30, 3)) gCallerBefore230.store(true, std::memory_order_relaxed);
}

ncclResult_t codeForCaller(ncclResult_t code) noexcept {
  return code == ncclTimeout && gCallerBefore230.load(std::memory_order_relaxed) ? ncclSystemError : code;
}

}  // namespace braid
