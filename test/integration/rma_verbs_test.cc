// One-sided operations over verbs (transport/net/ib/one_sided_verbs.h), on the verbs double
// (test/doubles/fake_verbs.c, which carries RDMA writes between processes and threads of this
// machine): every peer forced onto the network with the communicator's transport set to IB.
// Exact data for sizes 0, 1, odd and several MiB, staged and zero copy (from the origin's own
// window); many puts then one wait sees every byte; a put outside the published window refused
// at the origin; a put into a withdrawn window lands nothing and fails at the origin with a
// remote access error; an abort, a destroyed peer and a dead peer end a wait; the idle proxy
// sleeps on the completion channel (and polls where the library has none); nothing leaks.
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "harness/ranks.h"
#include "rma_ranks.h"
#include "test_env.h"
#include "transport/net/ib/one_sided_verbs.h"

using braid::test::expect;
using braid::test::rma::holdsPiece;
using braid::test::rma::pattern;
using braid::test::rma::waitFor;

namespace {

std::string lastError() {
  return ncclGetLastError(nullptr);
}

/// n ranks, two contexts, every peer over the verbs carrier, a window of `bytes`; "" and a
/// warning when this build has no verbs double.
std::string withVerbsWindows(int n, bool threads, size_t bytes,
                             const std::function<void(int, ncclComm_t, ncclWindow_t, unsigned char*)>& body) {
  braid::test::rma::WindowSetup setup{2, bytes};
  setup.overLinks = true;
  setup.overVerbs = true;
  return braid::test::rma::withWindows(
      n, threads, setup, [&body](int rank, ncclComm_t comm, ncclWindow_t win, char* window) {
        const braid::transport::onesided::Carrier* carrier = braid::communicatorFrom(comm).oneSidedLinks();
        expect(carrier != nullptr && braid::transport::onesided::overVerbs(*carrier),
               "the one-sided carrier is not the verbs one");
        body(rank, comm, win, reinterpret_cast<unsigned char*>(window));
      });
}

#define SKIP_WITHOUT_VERBS_DOUBLE()                                          \
  if (braid::test::verbsDouble().empty()) {                                  \
    WARN("skipped: this build has no verbs double (libibverbs-dev missing)"); \
    return;                                                                  \
  }

}  // namespace

TEST_CASE("one-sided over verbs: puts land exactly, before the signal that follows them", "[integration][rma][verbs]") {
  SKIP_WITHOUT_VERBS_DOUBLE();
  for (const int n : {2, 3}) {
    for (const bool threads : {true, false}) {
      INFO(n << " ranks as " << (threads ? "threads" : "processes"));
      // Each rank puts to every other rank, on ctx 1, pieces of 0, 1, 4099 and 3 MiB + 5 bytes
      // (staged), and 1 MiB + 1 from its own window (zero copy), in its own part of the peer's
      // window, then signals ctx 0 once. The receiver waits for that signal only, finds every
      // byte there and none past a piece, then consumes the puts' signals on ctx 1.
      const std::vector<size_t> sizes = {0, 1, 4099, (size_t{3} << 20) + 5, (size_t{1} << 20) + 1};
      const size_t part = size_t{6} << 20;
      CHECK(withVerbsWindows(n, threads, part * n, [&](int rank, ncclComm_t comm, ncclWindow_t win, unsigned char* window) {
              braid::test::rma::exchangePieces(rank, n, comm, win, window, sizes, part, true);
            }) == "");
    }
  }
}

TEST_CASE("one-sided over verbs: many puts then one wait sees them all, in order", "[integration][rma][verbs]") {
  SKIP_WITHOUT_VERBS_DOUBLE();
  // 300 puts of 997 bytes to consecutive places, then 40 of 100 KiB over the same place (the
  // last must win), more work requests than a queue pair holds and staging slots reused many
  // times; then one signal on ctx 0. The target waits for that signal alone.
  constexpr int kSmall = 300, kLarge = 40;
  constexpr size_t kSmallBytes = 997, kLargeBytes = 100 << 10;
  const size_t bytes = kSmall * kSmallBytes + kLargeBytes;
  for (const bool threads : {true, false}) {
    INFO((threads ? "threads" : "processes"));
    CHECK(withVerbsWindows(2, threads, bytes, [&](int rank, ncclComm_t comm, ncclWindow_t win, unsigned char* window) {
            if (rank == 0) {
              std::vector<unsigned char> source(kLargeBytes);
              for (int k = 0; k < kSmall; ++k) {
                for (size_t i = 0; i < kSmallBytes; ++i) source[i] = pattern(0, k, i);
                EXPECT_OK(ncclPutSignal(source.data(), kSmallBytes, ncclUint8, 1, win, k * kSmallBytes, 0, 1, 0, comm,
                                        nullptr));
              }
              for (int k = 0; k < kLarge; ++k) {
                for (size_t i = 0; i < kLargeBytes; ++i) source[i] = pattern(1, k, i);
                EXPECT_OK(ncclPutSignal(source.data(), kLargeBytes, ncclUint8, 1, win, kSmall * kSmallBytes, 0, 1, 0,
                                        comm, nullptr));
              }
              EXPECT_OK(ncclSignal(1, 0, 0, 0, comm, nullptr));
              waitFor(comm, 1, 0, 1);  // (rank 1 has checked: its window stays until then)
              return;
            }
            waitFor(comm, 0, 0, 1);
            for (int k = 0; k < kSmall; ++k)
              if (!holdsPiece(window + k * kSmallBytes, kSmallBytes, 0, k)) break;
            holdsPiece(window + kSmall * kSmallBytes, kLargeBytes, 1, kLarge - 1);
            waitFor(comm, 0, 1, kSmall + kLarge);
            EXPECT_OK(ncclSignal(0, 0, 0, 0, comm, nullptr));
          }) == "");
  }
}

TEST_CASE("one-sided over verbs: a put outside the published window is refused at the origin",
          "[integration][rma][verbs]") {
  SKIP_WITHOUT_VERBS_DOUBLE();
  CHECK(withVerbsWindows(2, true, 4096, [](int rank, ncclComm_t comm, ncclWindow_t win, unsigned char* window) {
          braid::Communicator& c = braid::communicatorFrom(comm);
          const uint64_t id = c.windows().find(win).peerIds[1 - rank];
          const unsigned char junk[16] = {0xab};
          // Past the API's checks, straight to the carrier: offset + size past the end, an offset
          // that wraps, a window id the peer never published.
          const struct {
            uint64_t window, offset;
            const char* named;
          } cases[] = {{id, 4090, "the put of 16 bytes at offset 4090 does not fit rank"},
                       {id, UINT64_MAX - 7, "at offset 18446744073709551608 does not fit"},
                       {id ^ 1, 0, "published no window with id"}};
          for (const auto& k : cases) {
            std::string what;
            try {
              c.oneSidedLinks()->put(1 - rank, k.window, k.offset, junk, sizeof junk, 0);
            } catch (const braid::Error& e) {
              what = e.what();
            }
            expect(what.find(k.named) != std::string::npos, "refused with: " + what);
          }
          const int four[2] = {1, 2};
          const ncclResult_t r = ncclPutSignal(four, 2, ncclInt32, 1 - rank, win, 4092, 0, 0, 0, comm, nullptr);
          expect(r == ncclInvalidArgument && lastError().find("peerWinOffset 4092") != std::string::npos,
                 "a put past the end: " + std::to_string(r) + ": " + lastError());
          // Both ranks are still in step (nothing was sent): a ping each way.
          EXPECT_OK(ncclPutSignal(four, 1, ncclInt32, 1 - rank, win, 0, 0, 0, 0, comm, nullptr));
          waitFor(comm, 1 - rank, 0, 1);
          expect(window[0] == 1 && window[4] == 0, "the ping's bytes");
        }) == "");
}

TEST_CASE("one-sided over verbs: a put into a withdrawn window lands nothing and fails at the origin",
          "[integration][rma][verbs]") {
  SKIP_WITHOUT_VERBS_DOUBLE();
  std::atomic<bool> withdrawn{false}, failed{false};
  CHECK(withVerbsWindows(2, true, 4096, [&](int rank, ncclComm_t comm, ncclWindow_t, unsigned char*) {
          // A second window: rank 1 deregisters it alone, then rank 0 puts into it until a put
          // fails (its writes are refused by rank 1's NIC: the queue pair breaks).
          std::vector<unsigned char> memory(8192 + NCCL_WIN_REQUIRED_ALIGNMENT, 0);
          void* aligned = memory.data() + (NCCL_WIN_REQUIRED_ALIGNMENT -
                                           reinterpret_cast<uintptr_t>(memory.data()) % NCCL_WIN_REQUIRED_ALIGNMENT);
          ncclWindow_t second = nullptr;
          EXPECT_OK(ncclCommWindowRegister(comm, aligned, 4096, &second, NCCL_WIN_DEFAULT));
          if (rank == 1) {
            EXPECT_OK(ncclCommWindowDeregister(comm, second));
            withdrawn = true;
            const auto start = std::chrono::steady_clock::now();
            while (!failed && std::chrono::steady_clock::now() - start < std::chrono::seconds(20))
              std::this_thread::sleep_for(std::chrono::milliseconds(5));
            const auto* bytes = static_cast<const unsigned char*>(aligned);
            for (int i = 0; i < 4096; ++i) {
              if (bytes[i] != 0) {
                expect(false, "byte " + std::to_string(i) + " of the withdrawn window was written");
                break;
              }
            }
            return;
          }
          while (!withdrawn) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          std::vector<unsigned char> source(1000, 0x5a);
          ncclResult_t r = ncclSuccess;
          for (int i = 0; i < 200 && r == ncclSuccess; ++i) {
            r = ncclPutSignal(source.data(), source.size(), ncclUint8, 1, second, 0, 0, 0, 0, comm, nullptr);
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
          }
          failed = true;
          expect(r == ncclRemoteError && lastError().find("rank 1 refused an RDMA write from rank 0 (remote access error") !=
                                             std::string::npos,
                 "the failed put: " + std::to_string(r) + ": " + lastError());
          EXPECT_OK(ncclCommWindowDeregister(comm, second));
        }) == "");
}

TEST_CASE("one-sided over verbs: an abort ends a wait, a destroyed or dead peer ends a wait naming it",
          "[integration][rma][verbs]") {
  SKIP_WITHOUT_VERBS_DOUBLE();
  // (not withWindows: the aborted communicator is gone, nothing of it is deregistered)
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  std::atomic<bool> done{false};
  CHECK(braid::test::runThreads(2, [&](int rank) {
          ncclComm_t comm = nullptr;
          EXPECT_OK(ncclCommInitRank(&comm, 2, id, rank));
          braid::Communicator& c = braid::communicatorFrom(comm);
          c.setOneSidedOverNetwork(true);
          c.dataPath().connectorOptions().net = "IB";
          c.dataPath().connectorOptions().ib.library = braid::test::verbsDouble();
          void* buffer = nullptr;
          EXPECT_OK(ncclMemAlloc(&buffer, 4096));
          ncclWindow_t win = nullptr;
          EXPECT_OK(ncclCommWindowRegister(comm, buffer, 4096, &win, NCCL_WIN_DEFAULT));
          expect(braid::transport::onesided::overVerbs(*c.oneSidedLinks()), "not over verbs");
          if (rank == 1) {  // (keeps its communicator until rank 0's wait has ended)
            while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(2));
            EXPECT_OK(ncclCommWindowDeregister(comm, win));
            EXPECT_OK(ncclCommDestroy(comm));
          } else {
            std::thread aborter([comm] {
              std::this_thread::sleep_for(std::chrono::milliseconds(200));
              ncclCommAbort(comm);
            });
            const auto start = std::chrono::steady_clock::now();
            ncclWaitSignalDesc_t d = {1, 1, 0, 0};
            const ncclResult_t r = ncclWaitSignal(1, &d, comm, nullptr);
            aborter.join();
            done = true;
            expect(r != ncclSuccess, "the wait succeeded");
            expect(std::chrono::steady_clock::now() - start < std::chrono::seconds(10), "the wait took too long");
          }
          EXPECT_OK(ncclMemFree(buffer));
        }) == "");
  for (const bool dies : {false, true}) {
    INFO((dies ? "the peer's process exits" : "the peer destroys its communicator"));
    CHECK(withVerbsWindows(2, false, 4096, [dies](int rank, ncclComm_t comm, ncclWindow_t win, unsigned char*) {
            if (rank == 1) {
              const int value = 7;  // (one put first: it still counts after the peer has gone)
              EXPECT_OK(ncclPutSignal(&value, 1, ncclInt32, 0, win, 0, 0, 0, 0, comm, nullptr));
              if (dies) _exit(0);
              return;  // (deregisters and destroys at once: its control link says goodbye)
            }
            const auto start = std::chrono::steady_clock::now();
            ncclWaitSignalDesc_t d = {2, 1, 0, 0};
            const ncclResult_t r = ncclWaitSignal(1, &d, comm, nullptr);
            // (a destroyed peer's carrier lets its writes complete before its goodbye; a process
            // that exits may take its last writes with it)
            expect(r == ncclRemoteError && lastError().find("rank 1") != std::string::npos &&
                       (dies || lastError().find("(1 of 2 arrived)") != std::string::npos),
                   "the wait: " + std::to_string(r) + ": " + lastError());
            expect(std::chrono::steady_clock::now() - start < std::chrono::seconds(20), "the wait took too long");
          }) == "");
  }
}

/// Times this process's proxy thread ("braid-proxy") was switched in so far, or -1 without one.
long proxyWakeups() {
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name != "braid-proxy") continue;
    std::ifstream status(task.path() / "status");
    long switches = 0;
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0 || line.rfind("nonvoluntary_ctxt_switches:", 0) == 0)
        switches += std::stol(line.substr(line.find(':') + 1));
    }
    return switches;
  }
  return -1;
}

TEST_CASE("one-sided over verbs: the idle proxy sleeps on the completion channel; without one it polls",
          "[integration][rma][verbs]") {
  SKIP_WITHOUT_VERBS_DOUBLE();
  // Ping-pong puts (exact data), then rank 0 counts the proxy thread's wakeups over 500 ms of
  // quiet (threads: one proxy for both ranks). With the channel it sleeps until a completion
  // lands; a library without channels (the double's BRAID_FAKE_VERBS_NO_CHANNEL=1) leaves the
  // proxy polling the queue, waking at least every millisecond.
  for (const bool channel : {true, false}) {
    for (const bool threads : {true, false}) {
      INFO((channel ? "with" : "without") << " a completion channel, " << (threads ? "threads" : "processes"));
      setenv("BRAID_FAKE_VERBS_NO_CHANNEL", channel ? "0" : "1", 1);
      CHECK(withVerbsWindows(2, threads, 4096, [&](int rank, ncclComm_t comm, ncclWindow_t win, unsigned char* window) {
              braid::test::rma::putAroundRing(rank, 2, comm, win, reinterpret_cast<char*>(window), 20);
              if (threads && rank == 0) {
                std::this_thread::sleep_for(std::chrono::milliseconds(100));  // (past the busy passes)
                const long before = proxyWakeups();
                std::this_thread::sleep_for(std::chrono::milliseconds(500));
                const long woke = proxyWakeups() - before;
                expect(before >= 0, "no braid-proxy thread");
                expect(channel ? woke < 20 : woke > 100,
                       "the idle proxy woke " + std::to_string(woke) + " times in 500 ms");
              }
              int one = 1, sum = 0;  // (rank 1 stays until rank 0 has counted)
              EXPECT_OK(ncclAllReduce(&one, &sum, 1, ncclInt32, ncclSum, comm, nullptr));
            }) == "");
      unsetenv("BRAID_FAKE_VERBS_NO_CHANNEL");
    }
  }
}

TEST_CASE("one-sided over verbs: rounds of carriers leave no descriptors behind", "[integration][rma][verbs]") {
  SKIP_WITHOUT_VERBS_DOUBLE();
  int before = 0;
  for (int round = 0; round < 3; ++round) {
    CHECK(withVerbsWindows(3, true, 4096, [](int rank, ncclComm_t comm, ncclWindow_t win, unsigned char* window) {
            const int value = rank + 100;
            for (int peer = 0; peer < 3; ++peer)
              if (peer != rank) EXPECT_OK(ncclPutSignal(&value, 1, ncclInt32, peer, win, 4 * rank, 0, 0, 0, comm, nullptr));
            for (int peer = 0; peer < 3; ++peer) {
              if (peer == rank) continue;
              waitFor(comm, peer, 0, 1);
              int got = 0;
              std::memcpy(&got, window + 4 * peer, sizeof got);
              expect(got == peer + 100, "rank " + std::to_string(peer) + "'s value: " + std::to_string(got));
            }
          }) == "");
    const int now = braid::test::openFileDescriptors();
    if (round == 1) before = now;
    if (round == 2) CHECK(now == before);
  }
}

TEST_CASE("one-sided over verbs across hosts (NCCL_HOSTID): two programs choose verbs by NCCL_NET=IB",
          "[integration][rma][verbs]") {
  SKIP_WITHOUT_VERBS_DOUBLE();
  const std::string program = braid::test::rma::rmaMainProgram();
  if (program.empty()) {
    WARN("skipped: BRAID_RANK_MAIN_EXE is not set (run the tests through meson test)");
    return;
  }
  // 2 hosts x 1 rank, then 2 x 2 (the ranks of a host share memory, only pairs across hosts
  // are linked), then a death.
  const struct {
    int ranks, perHost;
    std::string mode;
  } runs[] = {{2, 1, "check 4194304"}, {4, 2, "check 1048579 strict"}, {2, 1, "die"}};
  for (const auto& run : runs) {
    INFO(run.ranks << " ranks, " << run.mode);
    const int port = braid::test::freeLoopbackPort();
    std::string command = "export NCCL_COMM_ID=127.0.0.1:" + std::to_string(port) +
                          " NCCL_SOCKET_IFNAME=lo BRAID_BOOTSTRAP_TIMEOUT=20 NCCL_NET=IB BRAID_IBVERBS_LIBRARY=" +
                          braid::test::verbsDouble() + " NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET; ";
    for (int r = 0; r < run.ranks; ++r) {
      command += "NCCL_HOSTID=host" + std::to_string(r / run.perHost) + " timeout 60 " + program + " " +
                 std::to_string(run.ranks) + " " + std::to_string(r) + " " + run.mode + " & ";
    }
    const std::string out = braid::test::runCommand(command + "wait");
    INFO(out);
    CHECK(out.find("reaches its linked peers by RDMA over mlx5_0 port 1") != std::string::npos);
    if (run.mode == "die") {
      CHECK(out.find("rank 0: wait on the dead rank -> 6 after") != std::string::npos);
      continue;
    }
    for (int r = 0; r < run.ranks; ++r) {
      CHECK(out.find("rank " + std::to_string(r) + ": rma ok (" + std::to_string(run.ranks) + " ranks") !=
            std::string::npos);
    }
  }
}
