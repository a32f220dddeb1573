// Shared machinery of the C entry points: exporting, exception fencing, "not yet".
#pragma once

#include <nccl.h>

#include <functional>
#include <new>
#include <stdexcept>

#include "comm/communicator.h"
#include "core/init.h"
#include "core/status.h"

/// Declares the exported pair of an entry point: `p<name>` is the real function and
/// `<name>` a weak alias of it, as in NVIDIA's library, so profilers can interpose.
/// (A macro because attributes naming a symbol can only be spelled by the preprocessor.)
#define BRAID_API(ret, name, ...)                                                          \
  extern "C" __attribute__((visibility("default"))) ret p##name(__VA_ARGS__);              \
  extern "C" __attribute__((visibility("default"), weak, alias("p" #name))) ret name(__VA_ARGS__)

namespace braid::api {

/// Records and logs a failure of `function` (also as the last error of `held`, a communicator
/// the call was admitted on, or null).
ncclResult_t report(const char* function, Communicator* held, ncclResult_t code, const char* text) noexcept;

/// Runs body (which returns ncclResult_t) after library init, turning every exception into a
/// result code and a last-error text. Every entry point's body runs inside this. While it runs,
/// a live `comm` counts the call as in progress in the handle registry, so a concurrent
/// ncclCommDestroy or ncclCommAbort (PyTorch's watchdog) waits for it to return, failure report
/// included, before freeing anything; once one of them has begun, no call is admitted (the
/// body's communicatorFrom then says why).
template <typename Body>
ncclResult_t guarded(const char* function, ncclComm_t comm, Body&& body) noexcept {
  Communicator* held = (comm != nullptr && handles::enter(comm)) ? comm : nullptr;
  ncclResult_t result;
  try {
    core::initOnce();
    result = body();
  } catch (const Error& e) {
    result = report(function, held, e.code(), e.what());
  } catch (const std::bad_alloc&) {
    result = report(function, held, ncclSystemError, "out of host memory");
  } catch (const std::exception& e) {
    result = report(function, held, ncclInternalError, e.what());
  } catch (...) {
    result = report(function, held, ncclInternalError, "unknown exception");
  }
  if (held != nullptr) handles::leave(held);
  return result;
}

/// Runs a job of `host` that meets the other ranks (creation, suspend): deferred to the end of
/// the group inside one (each communicator's on its own thread: they rendezvous), else now
/// (blocking) or in the background (nonblocking config: returns ncclInProgress).
ncclResult_t dispatch(Communicator& host, std::function<void()> job);

/// Throws ncclInvalidUsage saying that the entry point arrives with `when` (a later piece of work).
[[noreturn]] void notImplemented(const char* when);

/// Throws ncclInvalidArgument naming `argument` when pointer is NULL.
inline void requireNonNull(const void* pointer, const char* argument) {
  if (pointer == nullptr) fail(ncclInvalidArgument, "%s is NULL", argument);
}

}  // namespace braid::api
