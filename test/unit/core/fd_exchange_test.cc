// fds::offer/fetch: a file descriptor passed to another process of this host (how a GPU's
// memory exported as a descriptor reaches the process that maps it), within one process, to a
// parent from a forked child (whose server is its own), refused once withdrawn, for a wrong
// token, to another user, or when the owner is gone; a requester that never reads its answers
// does not hold up the next; the request parser takes only well-formed requests.
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>
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

std::string errorOf(const fds::Offer& from) {
  try {
    const int fd = fds::fetch(from, std::chrono::milliseconds(2000));
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
  const fds::Offer offer = fds::offer(fd);
  CHECK(!offer.token.empty());
  CHECK(offer.server == fds::serverId());
  CHECK(offer.pid == getpid());
  close(fd);  // (the offer keeps a duplicate)
  const int got = fds::fetch(offer);
  CHECK(contentsOf(got) == "here");
  close(got);
  fds::withdraw(offer.token);
  CHECK_THAT(errorOf(offer), Catch::Contains("no file descriptor offered"));
}

TEST_CASE("fds: tokens are 128 random bits; a wrong token fails clearly and at once", "[fds]") {
  const int fd = fileWith("secret");
  const fds::Offer offer = fds::offer(fd);
  close(fd);
  const int otherFd = fileWith("other");
  const fds::Offer other = fds::offer(otherFd);
  close(otherFd);
  CHECK(other.token != offer.token);
  CHECK(other.token.word[0] != offer.token.word[0]);  // (both words random, not a counter)
  CHECK(other.token.word[1] != offer.token.word[1]);
  for (int word = 0; word < 2; ++word) {
    fds::Offer wrong = offer;
    wrong.token.word[word] ^= 1;  // one bit off in either half
    const auto start = std::chrono::steady_clock::now();
    CHECK_THAT(errorOf(wrong), Catch::Contains("no file descriptor offered") && Catch::Contains("wrong token"));
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
  }
  fds::Offer empty = offer;
  empty.token = fds::Token{{0, 0}};
  try {
    fds::fetch(empty);
    FAIL("an empty token was fetched");
  } catch (const Error& e) {
    CHECK(e.code() == ncclInvalidArgument);
  }
  const int got = fds::fetch(offer);  // (the right one still works)
  CHECK(contentsOf(got) == "secret");
  close(got);
  fds::withdraw(offer.token);
  fds::withdraw(other.token);
}

TEST_CASE("fds: a request from another user is refused", "[fds]") {
  if (geteuid() != 0) {
    WARN("skipped: needs root, to run a child as another user (uid 65534)");
    return;
  }
  const int fd = fileWith("mine");
  const fds::Offer offer = fds::offer(fd);
  close(fd);
  int result[2];
  REQUIRE(pipe(result) == 0);
  const pid_t child = fork();
  if (child == 0) {
    alarm(20);
    char verdict[256] = "setuid failed";
    if (setgid(65534) == 0 && setuid(65534) == 0) {
      try {
        const int got = fds::fetch(offer, std::chrono::milliseconds(3000));
        std::snprintf(verdict, sizeof(verdict), "fetched: %s", contentsOf(got).c_str());
      } catch (const Error& e) {
        std::snprintf(verdict, sizeof(verdict), "%s", e.what());
      }
    }
    (void)!write(result[1], verdict, std::strlen(verdict));
    _exit(0);
  }
  close(result[1]);
  char verdict[257] = {};
  const ssize_t n = read(result[0], verdict, sizeof(verdict) - 1);
  close(result[0]);
  int status = 0;
  waitpid(child, &status, 0);
  REQUIRE(n > 0);
  CHECK_THAT(std::string(verdict), Catch::Contains("refused") && Catch::Contains("its own user and root"));
  const int again = fds::fetch(offer);  // (this user still served)
  CHECK(contentsOf(again) == "mine");
  close(again);
  fds::withdraw(offer.token);
}

TEST_CASE("fds: a requester that never reads its answers does not hold up the next fetch", "[fds]") {
  const int fd = fileWith("served");
  const fds::Offer offer = fds::offer(fd);
  close(fd);
  // A socket that asks again and again and never reads: its queue fills with answers.
  const int hog = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  REQUIRE(hog >= 0);
  sa_family_t family = AF_UNIX;
  REQUIRE(bind(hog, reinterpret_cast<sockaddr*>(&family), sizeof(family)) == 0);
  sockaddr_un to{};
  to.sun_family = AF_UNIX;
  const int len = std::snprintf(to.sun_path + 1, sizeof(to.sun_path) - 1, "braid-fd-%016llx",
                                static_cast<unsigned long long>(offer.server));
  const socklen_t toLen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + len);
  const auto request = fds::encodeRequest(fds::Token{{1, 2}});  // an unknown token: answered "not found"
  // The kernel queues at most net.unix.max_dgram_qlen datagrams for a socket (10 by default).
  int queue = 10;
  if (FILE* f = std::fopen("/proc/sys/net/unix/max_dgram_qlen", "r")) {
    if (std::fscanf(f, "%d", &queue) != 1) queue = 10;
    std::fclose(f);
  }
  const int wanted = std::min(4 * queue + 100, 20000);
  int sent = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (sent < wanted && std::chrono::steady_clock::now() < until) {
    if (sendto(hog, request.data(), request.size(), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&to), toLen) ==
        static_cast<ssize_t>(request.size())) {
      ++sent;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  INFO("requests sent by the socket that never reads: " << sent);
  CHECK(sent > 2 * queue + 10);  // (more answers than its queue holds)
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto start = std::chrono::steady_clock::now();
  std::string error;
  int got = -1;
  try {
    got = fds::fetch(offer, std::chrono::milliseconds(3000));
  } catch (const Error& e) {
    error = e.what();
  }
  CHECK(error == "");
  CHECK(contentsOf(got) == "served");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
  if (got >= 0) close(got);
  close(hog);
  fds::withdraw(offer.token);
}

TEST_CASE("fds: the server's parser takes only a whole request with its magic and a token", "[fds]") {
  const fds::Token sent{{0x1234, 0x5678}};
  const auto request = fds::encodeRequest(sent);
  fds::Token token{};
  REQUIRE(fds::parseRequest(request.data(), request.size(), &token));
  CHECK(token == sent);
  unsigned char bytes[64] = {};
  std::memcpy(bytes, request.data(), request.size());
  for (size_t size = 0; size <= sizeof(bytes); ++size) {
    if (size != request.size()) CHECK_FALSE(fds::parseRequest(bytes, size, &token));  // short, or longer
  }
  for (size_t i = 0; i < 8; ++i) {  // any byte of the magic wrong
    auto bad = request;
    bad[i] ^= 0x40;
    CHECK_FALSE(fds::parseRequest(bad.data(), bad.size(), &token));
  }
  CHECK_FALSE(fds::parseRequest(fds::encodeRequest(fds::Token{{0, 0}}).data(), request.size(), &token));
  CHECK(fds::peerAllowed(1000, 1000));
  CHECK(fds::peerAllowed(0, 1000));
  CHECK_FALSE(fds::peerAllowed(65534, 1000));
  CHECK_FALSE(fds::peerAllowed(1000, 0));
}

TEST_CASE("fds: a forked child serves its own offers; a gone process is named", "[fds]") {
  const int parentFile = fileWith("parent");
  const fds::Offer mine = fds::offer(parentFile);  // (this process's server runs before the fork)
  close(parentFile);
  int toParent[2], toChild[2];
  REQUIRE(pipe(toParent) == 0);
  REQUIRE(pipe(toChild) == 0);
  const pid_t child = fork();
  if (child == 0) {
    alarm(20);
    fds::Offer token{};
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
  fds::Offer token{};
  REQUIRE(read(toParent[0], &token, sizeof(token)) == sizeof(token));
  REQUIRE(!token.token.empty());
  CHECK(token.pid == child);
  CHECK(token.server != mine.server);  // (the child drew its own id)
  const int got = fds::fetch(token);
  CHECK(contentsOf(got) == "child");
  close(got);
  const int again = fds::fetch(mine);  // the parent's own still served
  CHECK(contentsOf(again) == "parent");
  close(again);
  REQUIRE(write(toChild[1], "x", 1) == 1);
  int status = 0;
  waitpid(child, &status, 0);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  const auto start = std::chrono::steady_clock::now();
  CHECK_THAT(errorOf(token), Catch::Contains("does not serve file descriptors"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));  // refused at once, no timeout
  fds::withdraw(mine.token);
  for (int fd : {toParent[0], toParent[1], toChild[0], toChild[1]}) close(fd);
}
