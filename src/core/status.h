// Errors: one mechanism for the whole library.
//
// Internal code reports a failure by throwing braid::Error (a result code plus
// a readable message). The C ABI layer (src/api) catches it, records the text
// for ncclGetLastError, logs it at WARN and returns the code. Nothing else in
// the library returns error codes by hand.
#pragma once

#include <nccl.h>

#include <cstring>
#include <stdexcept>
#include <string>

namespace braid {

/// A failure with the ncclResult_t a caller of the C API should see.
class Error : public std::runtime_error {
 public:
  Error(ncclResult_t code, const std::string& message) : std::runtime_error(message), code_(code) {}
  /// The result code the C API returns for this failure.
  ncclResult_t code() const noexcept { return code_; }

 private:
  ncclResult_t code_;
};

/// Formats like printf and throws Error(code, text).
[[noreturn]] void fail(ncclResult_t code, const char* format, ...)
    __attribute__((format(printf, 2, 3)));

/// The fixed text NCCL users expect for each result code.
const char* resultString(ncclResult_t result) noexcept;

/// A caller built on an nccl.h older than 2.30.3 does not know ncclTimeout (8, its
/// ncclNumResults). Its config's version says so (noteCallerVersion, when a config is read);
/// from then on the process's calls return ncclSystemError, the code such a caller's NCCL gave
/// for a wait that ran out, in place of ncclTimeout (codeForCaller). The text says "timed out".
void noteCallerVersion(unsigned version) noexcept;
ncclResult_t codeForCaller(ncclResult_t code) noexcept;
/// The same for a code read as an int (any value: "unknown result code" outside NCCL's).
const char* resultCodeString(int code) noexcept;
/// An ABI enum parameter's value as an int, read from its bytes: a C caller may pass any int,
/// and loading a value outside an enum's range as the enum is undefined in C++ (clang's
/// -fsanitize=enum reports it).
template <typename Enum>
int rawCode(const Enum& value) noexcept {
  static_assert(sizeof(Enum) == sizeof(int), "an int-sized enum");
  int code = 0;
  std::memcpy(&code, &value, sizeof code);
  return code;
}

/// Text of the last failure seen on the calling thread ("" when none).
const char* threadLastError() noexcept;
/// Records text as the calling thread's last failure.
void setThreadLastError(const std::string& text);

}  // namespace braid

/// Invariant check that prints both values on failure (ncclInternalError).
#define BRAID_CHECK_EQ(a, b)                                                                  \
  do {                                                                                        \
    const auto braidA_ = (a);                                                                 \
    const auto braidB_ = (b);                                                                 \
    if (!(braidA_ == braidB_))                                                                \
      ::braid::fail(ncclInternalError, "%s:%d: check failed: %s == %s (%lld vs %lld)",        \
                    __FILE__, __LINE__, #a, #b, (long long)braidA_, (long long)braidB_);      \
  } while (0)
