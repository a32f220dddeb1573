#include "core/process.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <string>

#include "core/status.h"

namespace braid::process {

namespace {

#ifndef SYS_pidfd_open
constexpr long SYS_pidfd_open = 434;  // the same number on every architecture
#endif

struct IdState {
  std::mutex mutex;
  uint64_t id = 0;
  pid_t pid = 0;  // whose id it is: a child made without fork()'s handlers (clone) draws anew too
};

IdState& idState() {
  static IdState* s = [] {
    auto* created = new IdState;  // never destroyed: used until the process ends
    pthread_atfork(nullptr, nullptr, [] {
      new (&idState().mutex) std::mutex;  // (another thread of the parent may have held it)
      idState().id = 0;
    });
    return created;
  }();
  return *s;
}

/// /proc/PID/stat's state (field 3) and start time (field 22); false when it cannot be read
/// (errno ENOENT: no such process).
bool readStat(int pid, char* state, uint64_t* startTime) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return false;
  errno = EINVAL;
  char text[1024];
  const size_t n = std::fread(text, 1, sizeof text - 1, f);
  std::fclose(f);
  text[n] = '\0';
  const char* rest = std::strrchr(text, ')');  // the command name may hold spaces and parentheses
  if (rest == nullptr) return false;
  unsigned long long start = 0;
  // After ") ": state (3), then fields 4..21 skipped, then the start time (22).
  if (std::sscanf(rest + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu", state,
                  &start) != 2) {
    return false;
  }
  *startTime = start;
  return true;
}

}  // namespace

void randomBytes(void* out, size_t bytes) {
  char* p = static_cast<char*>(out);
  while (bytes > 0) {
    const ssize_t got = getrandom(p, bytes, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) fail(ncclSystemError, "getrandom of %zu bytes failed: %s", bytes, strerror(errno));
    p += got;
    bytes -= static_cast<size_t>(got);
  }
}

uint64_t random64() {
  uint64_t v = 0;
  while (v == 0) randomBytes(&v, sizeof v);
  return v;
}

uint64_t randomId() {
  IdState& s = idState();
  std::lock_guard<std::mutex> lock(s.mutex);
  const pid_t me = getpid();
  if (s.id == 0 || s.pid != me) {
    s.id = random64();
    s.pid = me;
  }
  return s.id;
}

uint64_t pidNamespace() {
  struct stat st {};
  return stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

FileIdentity sharedMemoryDirectory() {
  struct stat st {};
  if (stat("/dev/shm", &st) != 0) return {};
  return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

bool pidGone(int pid) { return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH; }

ProcessWatch::ProcessWatch(int pid, bool usePidfd) : pid_(pid) {
  if (usePidfd) {
    fd_ = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    if (fd_ >= 0) return;
    if (errno == ESRCH) {
      goneAtStart_ = true;
      return;
    }
    // ENOSYS (before Linux 5.3), EPERM (a seccomp filter), ...: /proc instead.
  }
  char state = 0;
  if (readStat(pid, &state, &startTime_)) {
    byProc_ = true;
    goneAtStart_ = state == 'Z' || state == 'X';
  } else {
    goneAtStart_ = errno == ENOENT || pidGone(pid);
  }
}

ProcessWatch::ProcessWatch(ProcessWatch&& other) noexcept
    : pid_(other.pid_),
      fd_(other.fd_),
      startTime_(other.startTime_),
      byProc_(other.byProc_),
      goneAtStart_(other.goneAtStart_) {
  other.fd_ = -1;
}

ProcessWatch::~ProcessWatch() {
  if (fd_ >= 0) close(fd_);
}

bool ProcessWatch::exited() const {
  if (goneAtStart_) return true;
  if (fd_ >= 0) {
    pollfd p{fd_, POLLIN, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
  }
  if (!byProc_) return pidGone(pid_);
  char state = 0;
  uint64_t start = 0;
  if (!readStat(pid_, &state, &start)) return errno == ENOENT || pidGone(pid_);  // (ENOENT: reaped)
  return state == 'Z' || state == 'X' || start != startTime_;
}

bool ProcessWatch::stopped() const {
  if (exited()) return false;
  char state = 0;
  uint64_t start = 0;
  if (!readStat(pid_, &state, &start)) return false;
  if (byProc_ && start != startTime_) return false;  // (another process took the pid)
  return state == 'T' || state == 't';
}

}  // namespace braid::process
