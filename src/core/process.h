// Who this process is among the processes of one host, and whether another one has exited.
//
// A pid names a process only within its pid namespace: two containers that share the host's
// network (so the same hostname and boot id) may each run a rank as pid 1. Ranks therefore
// tell processes apart by a random id drawn per process (and again in a forked child), and
// watch a peer by its pid only when both are in the same pid namespace.
#pragma once

#include <cstddef>
#include <cstdint>

namespace braid::process {

/// `bytes` random bytes from the kernel (getrandom, retried when interrupted); throws
/// ncclSystemError when it has none to give. Every secret, token, nonce and id of Braid comes
/// from here.
void randomBytes(void* out, size_t bytes);
/// Eight random bytes (randomBytes), never 0.
uint64_t random64();

/// A random 64-bit id of this process (random64), never 0, drawn at first use and drawn anew
/// in a forked child. Unlike the pid it differs between processes of different pid namespaces.
uint64_t randomId();

/// The inode of this process's pid namespace (stat("/proc/self/ns/pid")), 0 when unreadable.
uint64_t pidNamespace();

/// Device and inode of the directory that holds POSIX shared memory (/dev/shm), both 0 when
/// it cannot be read: processes share segments only when theirs are the same.
struct FileIdentity {
  uint64_t device = 0;
  uint64_t inode = 0;
};
FileIdentity sharedMemoryDirectory();

/// Whether no process `pid` exists in this pid namespace (kill(pid, 0) fails with ESRCH; a
/// zombie still exists).
bool pidGone(int pid);

/// Watches a process of this pid namespace for its exit, a zombie's included (kill(pid, 0)
/// succeeds for a killed process its parent has not reaped). Uses a pidfd (pidfd_open, Linux
/// 5.3); where there is none, or `usePidfd` is false, /proc/PID/stat: state Z or X, or a start
/// time other than the one recorded here (the pid now names another process); where that
/// cannot be read either (/proc mounted with hidepid), kill(pid, 0), which misses zombies.
class ProcessWatch {
 public:
  explicit ProcessWatch(int pid, bool usePidfd = true);
  ~ProcessWatch();
  ProcessWatch(ProcessWatch&& other) noexcept;
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;
  ProcessWatch& operator=(ProcessWatch&&) = delete;

  int pid() const { return pid_; }
  /// True once the process has exited (or was already gone when the watch began).
  bool exited() const;
  /// True while the process is stopped (SIGSTOP, a terminal's stop, a debugger): its
  /// /proc/PID/stat state is T or t. False once it has exited, or where /proc cannot tell.
  bool stopped() const;
  /// "pidfd", "/proc" or "kill", for logs and tests.
  const char* method() const { return fd_ >= 0 ? "pidfd" : byProc_ ? "/proc" : "kill"; }

 private:
  int pid_;
  int fd_ = -1;
  uint64_t startTime_ = 0;  // /proc/PID/stat field 22, when there is no pidfd
  bool byProc_ = false;     // no pidfd: /proc/PID/stat could be read at the start
  bool goneAtStart_ = false;
};

}  // namespace braid::process
