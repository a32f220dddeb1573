// This process's identity, and watching another process's exit (a zombie's included).
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "core/process.h"

using namespace braid;

TEST_CASE("the random process id stays for the process and changes in a forked child", "[unit][core]") {
  const uint64_t mine = process::randomId();
  CHECK(mine != 0);
  CHECK(process::randomId() == mine);
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const uint64_t theirs = process::randomId();
    _exit(write(fds[1], &theirs, sizeof theirs) == sizeof theirs ? 0 : 1);
  }
  uint64_t theirs = 0;
  CHECK(read(fds[0], &theirs, sizeof theirs) == sizeof theirs);
  close(fds[0]);
  close(fds[1]);
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(theirs != 0);
  CHECK(theirs != mine);
  CHECK(process::randomId() == mine);
}

TEST_CASE("the pid namespace and /dev/shm are identified", "[unit][core]") {
  CHECK(process::pidNamespace() != 0);
  const process::FileIdentity shm = process::sharedMemoryDirectory();
  CHECK((shm.device != 0 || shm.inode != 0));
}

TEST_CASE("a watched process that is killed is seen to exit while still a zombie", "[unit][core]") {
  for (bool pidfd : {true, false}) {
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      for (;;) pause();
    }
    process::ProcessWatch watch(child, pidfd);
    INFO("watched by " << watch.method());
    if (!pidfd) CHECK(std::string(watch.method()) == "/proc");
    // (a kernel before 5.3, or a seccomp filter, has no pidfd_open: /proc then)
    if (pidfd && std::string(watch.method()) != "pidfd") WARN("no pidfd here: watched through " << watch.method());
    CHECK_FALSE(watch.exited());
    kill(child, SIGKILL);
    bool seen = false;
    for (int i = 0; i < 200 && !seen; ++i) {  // (the kernel takes a moment to end it)
      seen = watch.exited();
      if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(seen);
    CHECK(kill(child, 0) == 0);  // a zombie: the check the watchdog used to make finds it alive
    CHECK_FALSE(process::pidGone(child));
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(watch.exited());
    CHECK(process::pidGone(child));
  }
}

TEST_CASE("a process already gone when the watch begins counts as exited", "[unit][core]") {
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(0);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(process::ProcessWatch(child, true).exited());
  CHECK(process::ProcessWatch(child, false).exited());
}
