#include "core/log.h"

#include <pthread.h>

#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "core/files.h"
#include "core/params.h"

namespace braid::log {

std::atomic<int> gLevel{-1};
std::atomic<uint64_t> gMask{kInit | kBootstrap | kEnv};

namespace {

struct SubsysName {
  const char* name;
  uint64_t bits;
};

constexpr SubsysName kSubsysNames[] = {
    {"INIT", kInit},       {"COLL", kColl},   {"P2P", kP2p},         {"SHM", kShm},
    {"NET", kNet},         {"GRAPH", kGraph}, {"TUNING", kTuning},   {"ENV", kEnv},
    {"ALLOC", kAlloc},     {"CALL", kCall},   {"PROXY", kProxy},     {"NVLS", kNvls},
    {"BOOTSTRAP", kBootstrap}, {"REG", kReg}, {"PROFILE", kProfile}, {"RAS", kRas},
    {"ALL", kAll},
};

struct Sink {
  std::mutex mutex;
  FILE* out = stdout;
  bool ownsFile = false;
  std::string host;
  long pid = 0;
  std::string pattern;  // NCCL_DEBUG_FILE as given, when the file is open
};

Sink& sink() {
  static Sink* s = [] {
    auto* created = new Sink();  // never destroyed: threads may log during exit
    // A forked child may inherit the lock from a parent thread that was logging: a fresh one.
    pthread_atfork(nullptr, nullptr, [] { new (&sink().mutex) std::mutex(); });
    return created;
  }();
  return *s;
}

/// Opens `path` as the log file (never through a symbolic link, closed on exec); on failure
/// leaves the sink as it is and says why. Under out.mutex.
void openFileLocked(Sink& out, const std::string& path, std::string* why) {
  FILE* f = files::openOutput(path);
  if (f == nullptr) {
    *why = errno == ELOOP ? "it is a symbolic link, which Braid does not follow" : strerror(errno);
    return;
  }
  setvbuf(f, nullptr, _IOLBF, 0);
  out.out = f;
  out.ownsFile = true;
}

/// A forked child's first line: its own pid in the prefix and, when NCCL_DEBUG_FILE names the
/// pid (%p), a file of its own (the parent's stays the parent's; stdout when it cannot be
/// opened). Under out.mutex.
void forkedLocked(Sink& out, long pid) {
  const long parent = out.pid;
  out.pid = pid;
  if (!out.ownsFile) return;
  const std::string path = expandFileName(out.pattern, out.host, pid);
  if (path == expandFileName(out.pattern, out.host, parent)) return;  // (no %p: the same file)
  fclose(out.out);  // (the child's copy of the parent's descriptor; nothing is left buffered)
  out.out = stdout;
  out.ownsFile = false;
  std::string why;
  openFileLocked(out, path, &why);
  if (!out.ownsFile) out.pattern.clear();
}

std::once_flag configureOnce;
thread_local int tlsDevice = 0;

}  // namespace

std::string shortHostName() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  std::string host(name);
  if (const auto dot = host.find('.'); dot != std::string::npos) host.erase(dot);
  return host;
}

std::string expandFileName(const std::string& pattern, const std::string& host, long pid) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      const char c = pattern[i + 1];
      if (c == 'h') { out += host; ++i; continue; }
      if (c == 'p') { out += std::to_string(pid); ++i; continue; }
      if (c == '%') { out += '%'; ++i; continue; }
    }
    out += pattern[i];
  }
  return out;
}

uint64_t parseSubsysMask(const std::string& text, std::vector<std::string>* problems) {
  std::string list = text;
  const bool invert = !list.empty() && list[0] == '^';
  if (invert) list.erase(0, 1);
  uint64_t mask = 0;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    const std::string token = list.substr(start, comma - start);
    if (!token.empty()) {
      bool known = false;
      for (const auto& s : kSubsysNames) {
        if (strcasecmp(token.c_str(), s.name) == 0) {
          mask |= s.bits;
          known = true;
        }
      }
      if (!known && problems != nullptr) {
        problems->push_back("unknown subsystem '" + token + "' in NCCL_DEBUG_SUBSYS (ignored)");
      }
    }
    start = comma + 1;
  }
  return invert ? ~mask : mask;
}

Settings readSettings(params::Store& store, const std::string& host, long pid) {
  Settings s;
  const std::string level = store.string("NCCL_DEBUG");
  if (level.empty()) {
    s.level = Level::None;
  } else if (strcasecmp(level.c_str(), "VERSION") == 0) {
    s.level = Level::Version;
  } else if (strcasecmp(level.c_str(), "WARN") == 0) {
    s.level = Level::Warn;
  } else if (strcasecmp(level.c_str(), "INFO") == 0) {
    s.level = Level::Info;
  } else if (strcasecmp(level.c_str(), "ABORT") == 0) {
    s.level = Level::Abort;
  } else if (strcasecmp(level.c_str(), "TRACE") == 0) {
    s.level = Level::Trace;
  } else {
    s.level = Level::Warn;
    s.problems.push_back("invalid value '" + level +
                         "' for NCCL_DEBUG (expected VERSION, WARN, INFO, ABORT or TRACE); using WARN");
  }
  s.mask = parseSubsysMask(store.string("NCCL_DEBUG_SUBSYS"), &s.problems);
  const std::string file = store.string("NCCL_DEBUG_FILE");
  if (!file.empty()) s.file = expandFileName(file, host, pid);
  s.filePattern = file;
  for (auto& p : store.takeProblems()) s.problems.push_back(p.text);
  return s;
}

void apply(const Settings& settings) {
  Sink& out = sink();
  std::string why;
  {
    std::lock_guard<std::mutex> lock(out.mutex);
    if (out.host.empty()) out.host = shortHostName();
    out.pid = static_cast<long>(getpid());
    if (out.ownsFile) fclose(out.out);
    out.out = stdout;
    out.ownsFile = false;
    out.pattern.clear();
    if (!settings.file.empty()) {
      openFileLocked(out, settings.file, &why);
      if (out.ownsFile) out.pattern = settings.filePattern;
    }
    gMask.store(settings.mask, std::memory_order_relaxed);
    gLevel.store(static_cast<int>(settings.level), std::memory_order_release);
  }
  if (!settings.file.empty() && !out.ownsFile) {
    BRAID_WARN("cannot open NCCL_DEBUG_FILE '%s' (%s); logging to stdout", settings.file.c_str(), why.c_str());
  }
  for (const auto& p : settings.problems) BRAID_WARN("%s", p.c_str());
}

namespace {
void configureFromProcess() {
  params::Store store(params::Sources::fromProcess());
  apply(readSettings(store, shortHostName(), static_cast<long>(getpid())));
}
}  // namespace

int ensureConfigured() {
  std::call_once(configureOnce, configureFromProcess);
  return gLevel.load(std::memory_order_acquire);
}

void reconfigure() {
  ensureConfigured();
  configureFromProcess();
}

void setThreadDevice(int device) { tlsDevice = device; }

void write(Level level, uint64_t subsys, const char* file, int line, const char* format, ...) {
  char message[2048];
  va_list args;
  va_start(args, format);
  vsnprintf(message, sizeof(message), format, args);
  va_end(args);

  Sink& out = sink();
  const long tid = static_cast<long>(syscall(SYS_gettid));
  const char* base = file;
  for (const char* p = file; *p != '\0'; ++p) {
    if (*p == '/') base = p + 1;
  }
  std::lock_guard<std::mutex> lock(out.mutex);
  if (const long pid = static_cast<long>(getpid()); out.pid != 0 && pid != out.pid) forkedLocked(out, pid);
  if (level == Level::Warn) {
    fprintf(out.out, "\n%s:%ld:%ld [%d] %s:%d NCCL WARN %s\n", out.host.c_str(), out.pid, tid,
            tlsDevice, base, line, message);
  } else {
    fprintf(out.out, "%s:%ld:%ld [%d] NCCL %s %s\n", out.host.c_str(), out.pid, tid, tlsDevice,
            level == Level::Trace ? "TRACE" : "INFO", message);
  }
  fflush(out.out);
  if (level == Level::Warn && subsys != kStranger &&
      gLevel.load(std::memory_order_relaxed) == static_cast<int>(Level::Abort)) {
    fprintf(out.out, "%s:%ld:%ld [%d] NCCL INFO NCCL_DEBUG=ABORT: aborting after the warning above\n",
            out.host.c_str(), out.pid, tid, tlsDevice);
    fflush(out.out);
    std::abort();
  }
}

}  // namespace braid::log
