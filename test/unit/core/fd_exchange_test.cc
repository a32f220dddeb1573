// fds::offer/fetch: a file descriptor passed to another process of this host (how a GPU's
// memory exported as a descriptor reaches the process that maps it), within one process, to a
// parent from a forked child (whose server is its own), refused once withdrawn or when the
// owner is gone.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>

#include "core/fd_exchange.h"
#include "core/status.h"

using namespace braid;

namespace {

/// A memory file holding `text`.
int fileWith(const std::string& text) {
  const int fd = memfd_create("braid-fd-test", MFD_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  return fd;
}

std::string contentsOf(int fd) {
  char buf[64] = {};
  const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

std::string errorOf(int pid, uint64_t token) {
  try {
    const int fd = fds::fetch(pid, token, std::chrono::milliseconds(2000));
    close(fd);
  } catch (const Error& e) {
    CHECK(e.code() == ncclSystemError);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("fds: offered in this process, fetched as a descriptor of its own, withdrawn", "[fds]") {
  const int fd = fileWith("here");
  const uint64_t token = fds::offer(fd);
  CHECK(token != 0);
  close(fd);  // (the offer keeps a duplicate)
  const int got = fds::fetch(getpid(), token);
  CHECK(contentsOf(got) == "here");
  close(got);
  fds::withdraw(token);
  CHECK_THAT(errorOf(getpid(), token), Catch::Contains("no file descriptor offered"));
  CHECK_THAT(errorOf(getpid(), token ^ 1), Catch::Contains("no file descriptor offered"));
}

TEST_CASE("fds: a forked child serves its own offers; a gone process is named", "[fds]") {
  const int parentFile = fileWith("parent");
  const uint64_t mine = fds::offer(parentFile);  // (this process's server runs before the fork)
  close(parentFile);
  int toParent[2], toChild[2];
  REQUIRE(pipe(toParent) == 0);
  REQUIRE(pipe(toChild) == 0);
  const pid_t child = fork();
  if (child == 0) {
    alarm(20);
    uint64_t token = 0;
    try {
      const int file = fileWith("child");
      token = fds::offer(file);
      close(file);
    } catch (...) {
    }
    (void)!write(toParent[1], &token, sizeof(token));
    char go = 0;
    (void)!read(toChild[0], &go, 1);  // until the parent has fetched
    _exit(0);
  }
  uint64_t token = 0;
  REQUIRE(read(toParent[0], &token, sizeof(token)) == sizeof(token));
  REQUIRE(token != 0);
  const int got = fds::fetch(child, token);
  CHECK(contentsOf(got) == "child");
  close(got);
  const int again = fds::fetch(getpid(), mine);  // the parent's own still served
  CHECK(contentsOf(again) == "parent");
  close(again);
  REQUIRE(write(toChild[1], "x", 1) == 1);
  int status = 0;
  waitpid(child, &status, 0);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  const auto start = std::chrono::steady_clock::now();
  CHECK_THAT(errorOf(child, token), Catch::Contains("does not serve file descriptors"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));  // refused at once, no timeout
  fds::withdraw(mine);
  for (int fd : {toParent[0], toParent[1], toChild[0], toChild[1]}) close(fd);
}
