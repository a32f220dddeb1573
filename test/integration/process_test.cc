// Processes of one host: ranks in other pid namespaces (containers sharing the host's network),
// a peer killed and left a zombie, a communicator inherited across fork, and the shared-memory
// segments of a process killed during connection setup.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/process.h"
#include "harness/ranks.h"
#include "test_env.h"
#include "transport/shm/shm_transport.h"

using namespace braid;

namespace {

/// The environment of rank_main processes meeting at a fresh loopback port.
std::string rankEnvironment(const std::string& extra = "") {
  return "export NCCL_COMM_ID=127.0.0.1:" + std::to_string(test::freeLoopbackPort()) +
         " NCCL_SOCKET_IFNAME=lo BRAID_BOOTSTRAP_TIMEOUT=20 " + extra + "; ";
}

/// Why this test cannot run here ("" when it can): namespaces need root and unshare(1).
std::string cannotUnshare() {
  if (geteuid() != 0) return "not root: unshare --pid needs CAP_SYS_ADMIN";
  const std::string out = test::runCommand("unshare --pid --fork sh -c 'echo pid $$' 2>&1");
  return out.find("pid 1") != std::string::npos ? "" : "unshare --pid --fork does not work here: " + out;
}

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

/// Waits up to `limit` for `child`; false (and the child killed) when it has not exited by then.
bool waitBounded(pid_t child, int* status, std::chrono::seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (waitpid(child, status, WNOHANG) == child) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(child, SIGKILL);
  waitpid(child, status, 0);
  return false;
}

}  // namespace

TEST_CASE("ranks that are pid 1 of their own pid namespaces are told apart and share /dev/shm",
          "[integration][containers]") {
  const std::string why = cannotUnshare();
  if (!why.empty()) {
    WARN("skipped: " << why);
    return;
  }
  const char* program = std::getenv("BRAID_RANK_MAIN_EXE");
  REQUIRE(program != nullptr);
  // Each rank is pid 1 of a namespace of its own, on one host (same hostname and boot id).
  std::string command = rankEnvironment("NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,SHM");
  for (int r = 0; r < 2; ++r) {
    command += "timeout 60 unshare --pid --fork sh -c 'echo rank " + std::to_string(r) + " is pid $$; exec " + program +
               " 2 " + std::to_string(r) + " allreduce' & ";
  }
  const std::string out = test::runCommand(command + "wait");
  INFO(out);
  CHECK_THAT(out, Catch::Contains("rank 0 is pid 1"));
  CHECK_THAT(out, Catch::Contains("rank 1 is pid 1"));
  // rank_main checks the sum of the ranks exactly, then destroys its communicator.
  CHECK_THAT(out, Catch::Contains("rank 0 of 2 ok"));
  CHECK_THAT(out, Catch::Contains("rank 1 of 2 ok"));
  CHECK_THAT(out, Catch::Contains("rank 0 <- rank 1 via SHM"));
  CHECK_THAT(out, Catch::Contains("run on this host in another pid namespace"));
}

TEST_CASE("ranks of one host that see different /dev/shm filesystems connect through sockets",
          "[integration][containers]") {
  const std::string why = cannotUnshare();
  if (!why.empty()) {
    WARN("skipped: " << why);
    return;
  }
  const char* program = std::getenv("BRAID_RANK_MAIN_EXE");
  REQUIRE(program != nullptr);
  // Rank 1 gets a /dev/shm of its own (a container's private tmpfs); rank 0 keeps the host's.
  std::string command = rankEnvironment("NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,SHM,NET");
  command += "timeout 60 unshare --pid --fork " + std::string(program) + " 2 0 allreduce & ";
  command += "timeout 60 unshare --pid --fork --mount sh -c 'mount -t tmpfs braid-test /dev/shm && exec " +
             std::string(program) + " 2 1 allreduce' & wait";
  const std::string out = test::runCommand(command);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("rank 0 of 2 ok"));
  CHECK_THAT(out, Catch::Contains("rank 1 of 2 ok"));
  CHECK_THAT(out, Catch::Contains("see another /dev/shm"));
  CHECK_THAT(out, Catch::Contains("rank 0 <- rank 1 via NET/Socket"));
  CHECK_THAT(out, !Catch::Contains("via SHM"));
}

TEST_CASE("a killed rank left a zombie by its parent: the survivor fails naming it", "[integration][watchdog]") {
  const char* program = std::getenv("BRAID_RANK_MAIN_EXE");
  REQUIRE(program != nullptr);
  // Rank 1's parent becomes `sleep`, which never reaps it: killed, it stays a zombie, which
  // kill(pid, 0) still finds. Its sockets are closed, but nothing of the shm path reads them.
  std::string command = rankEnvironment();
  command += "timeout 30 " + std::string(program) + " 2 0 stream 100000 & p0=$!; ";
  command += "sh -c '" + std::string(program) + " 2 1 stream 100000 kill-at 50 1 & exec sleep 40' & p1=$!; ";
  command += "wait $p0; echo rank 0 exit $?; ps -o stat=,args= --ppid $p1 | sed 's/^/child of sleep: /'; "
             "kill $p1; wait $p1 2>/dev/null; true";
  const auto start = std::chrono::steady_clock::now();
  const std::string out = test::runCommand(command);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("rank 1: raising signal 9 before op #50"));
  CHECK_THAT(out, Catch::Contains("child of sleep: Z"));  // (it was a zombie when rank 0 ended)
  test::checkSurvivorsFailed(out, {0}, Catch::Contains("rank 1 (process "));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(25));
}

TEST_CASE("a forked child destroys and aborts inherited communicators at once; the parent's go on",
          "[integration][fork]") {
  for (int n : {1, 2}) {
    for (bool abort : {false, true}) {
      INFO(n << " rank(s) of this process, " << (abort ? "ncclCommAbort" : "ncclCommDestroy") << " in the child");
      std::vector<ncclComm_t> comms(n, nullptr);
      REQUIRE(ncclCommInitAll(comms.data(), n, nullptr) == ncclSuccess);
      auto allReduce = [&] {
        std::vector<std::vector<float>> x(n, std::vector<float>(4096, 1.0f));
        bool ok = ncclGroupStart() == ncclSuccess;
        for (int r = 0; r < n; ++r)
          ok = ok && ncclAllReduce(x[r].data(), x[r].data(), 4096, ncclFloat, ncclSum, comms[r], nullptr) == ncclSuccess;
        ok = ncclGroupEnd() == ncclSuccess && ok;
        for (int r = 0; r < n; ++r) ok = ok && x[r][4095] == static_cast<float>(n);
        return ok;
      };
      REQUIRE(allReduce());  // (threads and connections exist)
      const pid_t child = fork();
      REQUIRE(child >= 0);
      if (child == 0) {
        alarm(10);  // a hang ends the child with SIGALRM
        for (ncclComm_t c : comms)
          if ((abort ? ncclCommAbort(c) : ncclCommDestroy(c)) != ncclSuccess) _exit(2);
        _exit(0);
      }
      int status = 0;
      REQUIRE(waitBounded(child, &status, std::chrono::seconds(15)));
      CHECK(WIFEXITED(status));
      CHECK(WEXITSTATUS(status) == 0);
      CHECK(allReduce());  // the child left the parent's threads and connections alone
      for (ncclComm_t c : comms) CHECK(ncclCommDestroy(c) == ncclSuccess);
    }
  }
}

TEST_CASE("segments of a process killed during setup are removed by the next init, a live one's stay",
          "[integration][shm]") {
  // Two children create a segment each, as a receiver does during connection setup: one is then
  // killed, the other lives on until the parent kills it too.
  auto makeSegment = [](bool die) {
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      try {
        transport::Descriptor d{};
        auto memory = transport::shm::create(transport::FifoSizes{64 * 1024, 512, 64}, nullptr, false, &d);
        if (write(fds[1], d.shmName, sizeof d.shmName) != static_cast<ssize_t>(sizeof d.shmName)) _exit(2);
        if (die) raise(SIGKILL);
        for (;;) pause();
      } catch (...) {
        _exit(3);
      }
    }
    close(fds[1]);
    char name[sizeof(transport::Descriptor::shmName)] = {};
    const ssize_t got = read(fds[0], name, sizeof name);
    close(fds[0]);
    REQUIRE(got == static_cast<ssize_t>(sizeof name));
    return std::make_pair(child, std::string(name));
  };
  const auto [dead, deadName] = makeSegment(true);
  const auto [live, liveName] = makeSegment(false);
  int status = 0;
  REQUIRE(waitpid(dead, &status, 0) == dead);
  REQUIRE((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
  // One of another pid namespace, whose pid says nothing here (its owner may well be alive).
  int otherPid = 0;
  uint64_t ourNs = 0;
  REQUIRE(transport::shm::segmentOwner(deadName, &otherPid, &ourNs));
  CHECK(otherPid == dead);
  CHECK(ourNs == process::pidNamespace());
  char foreign[96];
  std::snprintf(foreign, sizeof foreign, "/braid-%d-%llx-%016llx-0", dead, static_cast<unsigned long long>(ourNs + 1),
                0x1234ull);
  const int fd = shm_open(foreign, O_CREAT | O_EXCL | O_RDWR, 0600);
  REQUIRE(fd >= 0);
  close(fd);
  REQUIRE(exists("/dev/shm" + deadName));
  REQUIRE(exists("/dev/shm" + liveName));

  ncclComm_t comm = nullptr;
  REQUIRE(ncclCommInitAll(&comm, 1, nullptr) == ncclSuccess);  // init sweeps /dev/shm
  CHECK_FALSE(exists("/dev/shm" + deadName));
  CHECK(exists("/dev/shm" + liveName));
  CHECK(exists(std::string("/dev/shm") + foreign));
  CHECK(ncclCommDestroy(comm) == ncclSuccess);

  kill(live, SIGKILL);
  REQUIRE(waitpid(live, &status, 0) == live);
  REQUIRE(ncclCommInitAll(&comm, 1, nullptr) == ncclSuccess);
  CHECK_FALSE(exists("/dev/shm" + liveName));
  CHECK(exists(std::string("/dev/shm") + foreign));
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
  shm_unlink(foreign);
  shm_unlink(liveName.c_str());
  shm_unlink(deadName.c_str());
}
