// Logging in NCCL's format, so existing log tooling keeps working:
//   host:pid:tid [dev] NCCL INFO <message>
// and for warnings a blank line, then
//   host:pid:tid [dev] file:line NCCL WARN <message>
// The level and subsystem mask are checked before anything is formatted.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace braid::params {
class Store;
}

namespace braid::log {

enum class Level : int { None = 0, Version = 1, Warn = 2, Info = 3, Abort = 4, Trace = 5 };

/// Subsystem bits, the same values as NCCL's.
enum Subsys : uint64_t {
  kInit = 0x1,
  kColl = 0x2,
  kP2p = 0x4,
  kShm = 0x8,
  kNet = 0x10,
  kGraph = 0x20,
  kTuning = 0x40,
  kEnv = 0x80,
  kAlloc = 0x100,
  kCall = 0x200,
  kProxy = 0x400,
  kNvls = 0x800,
  kBootstrap = 0x1000,
  kReg = 0x2000,
  kProfile = 0x4000,
  kRas = 0x8000,
  /// Not a subsystem: marks a warning about what a stranger sent (BRAID_WARN_STRANGER).
  kStranger = uint64_t(1) << 62,
  kAll = ~uint64_t(0),
};

/// What NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE ask for.
struct Settings {
  Level level = Level::None;
  uint64_t mask = kInit | kBootstrap | kEnv;
  std::string file;                   ///< expanded path; "" means stdout
  std::string filePattern;            ///< NCCL_DEBUG_FILE as given (a forked child expands %p again)
  std::vector<std::string> problems;  ///< unknown level or subsystem names, to WARN about
};

/// Reads the logging knobs from a store; host and pid expand %h and %p in the file name.
Settings readSettings(params::Store& store, const std::string& host, long pid);
/// Parses a subsystem list ("INIT,NET", "^COLL", "ALL"); unknown names are appended to problems.
uint64_t parseSubsysMask(const std::string& text, std::vector<std::string>* problems);
/// Expands %h (host) and %p (pid) and %% in a NCCL_DEBUG_FILE pattern.
std::string expandFileName(const std::string& pattern, const std::string& host, long pid);
/// The short host name (up to the first dot), as NCCL prints it.
std::string shortHostName();

/// Current level; -1 until the logger is configured. Read by the macros before formatting.
extern std::atomic<int> gLevel;
extern std::atomic<uint64_t> gMask;

/// Configures the logger from the process environment once (later calls return at once).
int ensureConfigured();
/// Re-reads the logging knobs (ncclResetDebugInit).
void reconfigure();
/// Applies settings directly; used by configure and by tests.
void apply(const Settings& settings);

inline bool enabled(Level level, uint64_t subsys) {
  int current = gLevel.load(std::memory_order_relaxed);
  if (current < 0) current = ensureConfigured();
  if (current < static_cast<int>(level)) return false;
  return level <= Level::Warn || (gMask.load(std::memory_order_relaxed) & subsys) != 0;
}

/// Formats and writes one line. Callers go through the BRAID_* macros.
void write(Level level, uint64_t subsys, const char* file, int line, const char* format, ...)
    __attribute__((format(printf, 5, 6)));

/// The CUDA device printed in the prefix for the calling thread (set by a communicator).
void setThreadDevice(int device);

}  // namespace braid::log

#define BRAID_LOG_AT(level, subsys, ...)                                               \
  do {                                                                                 \
    if (::braid::log::enabled(level, subsys))                                          \
      ::braid::log::write(level, subsys, __FILE__, __LINE__, __VA_ARGS__);             \
  } while (0)

/// A warning: printed at NCCL_DEBUG=WARN and above, whatever the subsystem mask.
#define BRAID_WARN(...) BRAID_LOG_AT(::braid::log::Level::Warn, ::braid::log::kAll, __VA_ARGS__)
/// A warning about input from outside the job (a connection without the key, say): printed
/// as a WARN, but NCCL_DEBUG=ABORT does not abort on it, or anyone who can connect could kill
/// the process.
#define BRAID_WARN_STRANGER(...) BRAID_LOG_AT(::braid::log::Level::Warn, ::braid::log::kStranger, __VA_ARGS__)
/// Information for subsystem mask bits `subsys` (e.g. braid::log::kInit).
#define BRAID_INFO(subsys, ...) BRAID_LOG_AT(::braid::log::Level::Info, subsys, __VA_ARGS__)
/// Per-call tracing.
#define BRAID_TRACE(subsys, ...) BRAID_LOG_AT(::braid::log::Level::Trace, subsys, __VA_ARGS__)
