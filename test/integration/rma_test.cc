// One-sided operations (ncclPutSignal, ncclSignal, ncclWaitSignal) on the host backend.
// Ranks as threads of one process and as processes of one host move data: exact contents
// after the wait, cumulative counts over several puts and signals, several peers and
// contexts, sizes 0 and odd, offsets up to the window's end. A window on memory other
// processes cannot map is refused with a text that says why. Bad input, and an abort that
// ends a wait.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "harness/ranks.h"
#include "rma_ranks.h"
#include "test_env.h"

using braid::test::expect;

namespace {

constexpr size_t kWindowBytes = 64 * 1024;
constexpr int kContexts = 3;

std::string lastError() {
  return ncclGetLastError(nullptr);
}

void expectFailure(ncclResult_t result, ncclResult_t code, const std::string& text, const std::string& what) {
  expect(result == code && lastError().find(text) != std::string::npos,
         what + ": result " + std::to_string(result) + ", text '" + lastError() + "'");
}

/// n ranks (threads, or processes), each with a communicator of kContexts RMA contexts and a
/// window of kWindowBytes from ncclMemAlloc (or malloc: `plainMemory`).
std::string withWindows(int n, bool threads,
                        const std::function<void(int, ncclComm_t, ncclWindow_t, char*)>& body,
                        bool plainMemory = false) {
  return braid::test::rma::withWindows(n, threads, {kContexts, kWindowBytes, plainMemory, false}, body);
}

/// The byte that rank `from`'s put number `round` writes at position i.
unsigned char pattern(int from, int round, size_t i) {
  return static_cast<unsigned char>(from * 37 + round * 11 + i * 7 + 1);
}

using braid::test::rma::waitFor;

}  // namespace

TEST_CASE("one-sided: puts land exactly, counted per peer and context", "[integration][rma]") {
  for (const auto& shape : std::vector<std::pair<int, bool>>{
           {1, true}, {2, true}, {3, true}, {8, true}, {2, false}, {3, false}, {8, false}}) {
    const int n = shape.first;  // (plain variables: clang does not capture structured bindings)
    const bool threads = shape.second;
    INFO(n << " ranks as " << (threads ? "threads" : "processes"));
    // Every rank puts `rounds` odd-sized pieces to every rank (itself included) in its own slice
    // of the peer's window, on context (sender + round) % kContexts, and one bare signal on
    // context 0; each rank then waits for all of them with one descriptor per (peer, context).
    constexpr int kRounds = 4;
    const size_t slice = kWindowBytes / static_cast<size_t>(n);
    CHECK(withWindows(n, threads, [n, slice](int rank, ncclComm_t comm, ncclWindow_t win, char* window) {
            std::vector<unsigned char> source(slice);
            for (int peer = 0; peer < n; ++peer) {
              for (int round = 0; round < kRounds; ++round) {
                const size_t bytes = round == 0 ? 0 : 1 + (round * 997 + rank * 13) % (slice / kRounds - 1);
                for (size_t i = 0; i < bytes; ++i) source[i] = pattern(rank, round, i);
                const size_t offset = rank * slice + round * (slice / kRounds);
                EXPECT_OK(ncclPutSignal(source.data(), bytes, ncclUint8, peer, win, offset, 0,
                                        (rank + round) % kContexts, 0, comm, nullptr));
              }
              EXPECT_OK(ncclSignal(peer, 0, 0, 0, comm, nullptr));
            }
            std::vector<ncclWaitSignalDesc_t> descs;
            for (int from = 0; from < n; ++from) {
              int perContext[kContexts] = {1, 0, 0};  // (the bare signal)
              for (int round = 0; round < kRounds; ++round) ++perContext[(from + round) % kContexts];
              for (int ctx = 0; ctx < kContexts; ++ctx) {
                if (perContext[ctx] > 0) descs.push_back({perContext[ctx], from, 0, ctx});
              }
            }
            EXPECT_OK(ncclWaitSignal(static_cast<int>(descs.size()), descs.data(), comm, nullptr));
            for (int from = 0; from < n; ++from) {
              for (int round = 1; round < kRounds; ++round) {
                const size_t bytes = 1 + (round * 997 + from * 13) % (slice / kRounds - 1);
                const size_t offset = from * slice + round * (slice / kRounds);
                for (size_t i = 0; i < bytes; ++i) {
                  if (static_cast<unsigned char>(window[offset + i]) != pattern(from, round, i)) {
                    expect(false, "byte " + std::to_string(i) + " of rank " + std::to_string(from) +
                                      "'s put " + std::to_string(round) + " is wrong");
                  }
                }
              }
            }
          }) == "");
  }
}

TEST_CASE("one-sided: signals accumulate; a wait consumes what it names", "[integration][rma]") {
  for (const bool threads : {true, false}) {
    INFO((threads ? "threads" : "processes"));
    CHECK(withWindows(2, threads, [](int rank, ncclComm_t comm, ncclWindow_t win, char* window) {
            const int peer = 1 - rank;
            // Rank 0 sends five rounds of a float each to the same place, each after rank 1 said it
            // consumed the previous one (a ping-pong of signals): every wait sees its own round.
            for (int round = 0; round < 5; ++round) {
              if (rank == 0) {
                const float value = 1.5f + round;
                EXPECT_OK(ncclPutSignal(&value, 1, ncclFloat32, peer, win, 0, 0, 0, 0, comm, nullptr));
                waitFor(comm, peer, 0, 1);
              } else {
                waitFor(comm, peer, 0, 1);
                float got;
                std::memcpy(&got, window, sizeof got);
                expect(got == 1.5f + round, "round " + std::to_string(round) + ": " + std::to_string(got));
                EXPECT_OK(ncclSignal(peer, 0, 0, 0, comm, nullptr));
              }
            }
            // Signals sent before the wait are kept: three, then one wait of opCnt 2 and one of 1.
            for (int i = 0; i < 3; ++i) EXPECT_OK(ncclSignal(peer, 0, 2, 0, comm, nullptr));
            waitFor(comm, peer, 2, 2);
            waitFor(comm, peer, 2, 1);
            // A put of count 0 at the window's very end is a signal.
            EXPECT_OK(ncclPutSignal(window, 0, ncclFloat64, peer, win, kWindowBytes, 0, 1, 0, comm, nullptr));
            waitFor(comm, peer, 1, 1);
            // The last 8 bytes of the window, exactly.
            const double last = 100.0 + rank;
            EXPECT_OK(ncclPutSignal(&last, 1, ncclFloat64, peer, win, kWindowBytes - sizeof last, 0, 1, 0,
                                    comm, nullptr));
            waitFor(comm, peer, 1, 1);
            double got;
            std::memcpy(&got, window + kWindowBytes - sizeof got, sizeof got);
            expect(got == 100.0 + peer, "the window's last double: " + std::to_string(got));
          }) == "");
  }
}

TEST_CASE("one-sided: bad input is refused, nothing is written out of bounds", "[integration][rma]") {
  CHECK(withWindows(2, true, [](int rank, ncclComm_t comm, ncclWindow_t win, char* window) {
          const int peer = 1 - rank;
          const float four[4] = {1, 2, 3, 4};
          expectFailure(
              ncclPutSignal(four, 2, ncclFloat32, peer, win, kWindowBytes - 4, 0, 0, 0, comm, nullptr),
              ncclInvalidArgument,
              "the put of 8 bytes (count 2) at peerWinOffset 65532 does not fit the "
              "window of 65536 bytes",
              "past the end");
          expectFailure(
              ncclPutSignal(four, 0, ncclFloat32, peer, win, kWindowBytes + 1, 0, 0, 0, comm, nullptr),
              ncclInvalidArgument, "peerWinOffset 65537", "offset past the end");
          expectFailure(ncclPutSignal(four, SIZE_MAX / 2, ncclFloat32, peer, win, 0, 0, 0, 0, comm, nullptr),
                        ncclInvalidArgument, "is too large", "huge count");
          expectFailure(ncclPutSignal(four, 1, ncclFloat32, peer, win, 0, 1, 0, 0, comm, nullptr),
                        ncclInvalidArgument, "sigIdx is 1", "sigIdx");
          expectFailure(ncclPutSignal(four, 1, ncclFloat32, peer, win, 0, 0, kContexts, 0, comm, nullptr),
                        ncclInvalidArgument, "ctx is 3; the communicator has 3 contexts", "ctx");
          expectFailure(ncclSignal(2, 0, 0, 0, comm, nullptr), ncclInvalidArgument, "peer is 2",
                        "signal peer");
          expectFailure(ncclSignal(peer, 0, 0, 1, comm, nullptr), ncclInvalidArgument, "flags is 0x1",
                        "signal flags");
          ncclWaitSignalDesc_t zero = {0, peer, 0, 0};
          expectFailure(ncclWaitSignal(1, &zero, comm, nullptr), ncclInvalidArgument,
                        "signalDescs[0].opCnt is 0", "opCnt 0");
          ncclWaitSignalDesc_t descs[2] = {{1, peer, 0, 0}, {-3, peer, 0, 0}};
          expectFailure(ncclWaitSignal(2, descs, comm, nullptr), ncclInvalidArgument,
                        "signalDescs[1].opCnt is -3", "opCnt < 0");
          EXPECT_OK(ncclWaitSignal(0, nullptr, comm, nullptr));
          // Nothing of the refused puts was written, and the refused wait consumed nothing: a
          // signal now satisfies a wait of one.
          for (size_t i = 0; i < kWindowBytes; ++i)
            expect(window[i] == 0, "byte " + std::to_string(i) + " was written");
          EXPECT_OK(ncclSignal(peer, 0, 0, 0, comm, nullptr));
          waitFor(comm, peer, 0, 1);
        }) == "");
}

TEST_CASE("one-sided: without a window, and on memory other processes cannot map, the calls say why not",
          "[integration][rma]") {
  CHECK(braid::test::withCommunicators(2, [](int rank, ncclComm_t comm, bool) {
          expectFailure(ncclSignal(1 - rank, 0, 0, 0, comm, nullptr), ncclInvalidUsage,
                        "register a window first", "no window");
        }) == "");
  for (const bool threads : {true, false}) {
    INFO((threads ? "threads" : "processes"));
    // A window on malloc's memory: threads of one process reach it, other processes do not,
    // and the text says what to use instead. Signals still travel.
    CHECK(withWindows(
              2, threads,
              [threads](int rank, ncclComm_t comm, ncclWindow_t win, char* window) {
                const int peer = 1 - rank;
                const int value = 42 + rank;
                const ncclResult_t put =
                    ncclPutSignal(&value, 1, ncclInt32, peer, win, 16, 0, 0, 0, comm, nullptr);
                if (threads) {
                  EXPECT_OK(put);
                } else {
                  expectFailure(put, ncclInvalidUsage,
                                "is memory Braid cannot share with this process (not from "
                                "ncclMemAlloc); register window memory from ncclMemAlloc",
                                "put to malloc's memory");
                  EXPECT_OK(ncclSignal(peer, 0, 0, 0, comm, nullptr));
                }
                waitFor(comm, peer, 0, 1);
                int got;
                std::memcpy(&got, window + 16, sizeof got);
                expect(got == (threads ? 42 + peer : 0), "what landed: " + std::to_string(got));
                // A rank always reaches itself.
                EXPECT_OK(ncclPutSignal(&value, 1, ncclInt32, rank, win, 32, 0, 0, 0, comm, nullptr));
                waitFor(comm, rank, 0, 1);
                std::memcpy(&got, window + 32, sizeof got);
                expect(got == 42 + rank, "a put to itself: " + std::to_string(got));
              },
              /*plainMemory=*/true) == "");
  }
}

TEST_CASE("one-sided: an abort ends a wait with an error", "[integration][rma]") {
  CHECK(braid::test::runThreads(1, [](int) {
          ncclUniqueId id;
          EXPECT_OK(ncclGetUniqueId(&id));
          ncclComm_t comm = nullptr;
          EXPECT_OK(ncclCommInitRank(&comm, 1, id, 0));
          void* buffer = nullptr;
          EXPECT_OK(ncclMemAlloc(&buffer, 4096));
          ncclWindow_t win = nullptr;
          EXPECT_OK(ncclCommWindowRegister(comm, buffer, 4096, &win, NCCL_WIN_STRICT_ORDERING));
          std::thread aborter([comm] {
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            ncclCommAbort(comm);
          });
          const auto start = std::chrono::steady_clock::now();
          ncclWaitSignalDesc_t d = {1, 0, 0, 0};  // (a signal nobody sends)
          const ncclResult_t result = ncclWaitSignal(1, &d, comm, nullptr);
          const auto waited = std::chrono::steady_clock::now() - start;
          aborter.join();
          expect(result != ncclSuccess, "the wait succeeded");
          expect(waited < std::chrono::seconds(10),
                 "the wait took " +
                     std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()) +
                     " ms");
          EXPECT_OK(ncclMemFree(buffer));
        }) == "");
}

TEST_CASE("one-sided: a peer process that exits ends a wait on it with an error naming it",
          "[integration][rma]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  CHECK(braid::test::runProcesses(2, [id](int rank) {
          ncclComm_t comm = nullptr;
          EXPECT_OK(ncclCommInitRank(&comm, 2, id, rank));
          void* buffer = nullptr;
          EXPECT_OK(ncclMemAlloc(&buffer, 4096));
          ncclWindow_t win = nullptr;
          EXPECT_OK(ncclCommWindowRegister(comm, buffer, 4096, &win, NCCL_WIN_DEFAULT));
          if (rank == 1) _exit(0);  // (gone without a signal, and without destroying anything)
          const auto start = std::chrono::steady_clock::now();
          ncclWaitSignalDesc_t d = {1, 1, 0, 0};
          const ncclResult_t result = ncclWaitSignal(1, &d, comm, nullptr);
          const auto waited = std::chrono::steady_clock::now() - start;
          expect(result != ncclSuccess && lastError().find("rank 1") != std::string::npos,
                 "result " + std::to_string(result) + ": " + lastError());
          expect(waited < std::chrono::seconds(20),
                 "the wait took " +
                     std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()) +
                     " ms");
          ncclCommAbort(comm);
          EXPECT_OK(ncclMemFree(buffer));
        }) == "");
}

TEST_CASE("one-sided: windows between processes leave no descriptors or mappings behind",
          "[integration][rma]") {
  // The second and the fifth registration (with a put each) end with the same descriptors and
  // mappings: the offers are withdrawn, the peers' memory unmapped at deregistration. (The
  // first may start the process's descriptor server and the signal board, which stay.)
  auto mappings = [] {
    FILE* f = std::fopen("/proc/self/maps", "r");
    int n = 0;
    for (int c; (c = std::fgetc(f)) != EOF;) n += c == '\n';
    std::fclose(f);
    return n;
  };
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  CHECK(braid::test::runProcesses(2, [id, mappings](int rank) {
          ncclComm_t comm = nullptr;
          EXPECT_OK(ncclCommInitRank(&comm, 2, id, rank));
          void* buffer = nullptr;
          EXPECT_OK(ncclMemAlloc(&buffer, 1 << 20));
          int fds = 0, maps = 0;
          for (int round = 0; round < 5; ++round) {
            ncclWindow_t win = nullptr;
            EXPECT_OK(ncclCommWindowRegister(comm, buffer, 1 << 20, &win, NCCL_WIN_DEFAULT));
            const int value = round;
            EXPECT_OK(ncclPutSignal(&value, 1, ncclInt32, 1 - rank, win, 0, 0, 0, 0, comm, nullptr));
            waitFor(comm, 1 - rank, 0, 1);
            EXPECT_OK(ncclCommWindowDeregister(comm, win));
            if (round == 1) fds = braid::test::openFileDescriptors(), maps = mappings();
          }
          expect(braid::test::openFileDescriptors() == fds,
                 "descriptors: " + std::to_string(fds) + " then " +
                     std::to_string(braid::test::openFileDescriptors()));
          expect(mappings() == maps,
                 "mappings: " + std::to_string(maps) + " then " + std::to_string(mappings()));
          EXPECT_OK(ncclCommDestroy(comm));
          EXPECT_OK(ncclMemFree(buffer));
        }) == "");
}

TEST_CASE("one-sided: in a group the calls run at ncclGroupEnd, after the group's collectives",
          "[integration][rma]") {
  // One thread drives two ranks (ncclCommInitAll): each AllReduces, puts the sum to the other
  // and waits for the other's put, all in one group. The put must carry the AllReduce's result
  // (it runs after the collective), and the waits must not hold up the other rank's work.
  CHECK(braid::test::runThreads(1, [](int) {
          ncclComm_t comms[2] = {nullptr, nullptr};
          EXPECT_OK(ncclCommInitAll(comms, 2, nullptr));
          void* buffers[2] = {nullptr, nullptr};
          ncclWindow_t wins[2] = {nullptr, nullptr};
          EXPECT_OK(ncclGroupStart());
          for (int r = 0; r < 2; ++r) {
            EXPECT_OK(ncclMemAlloc(&buffers[r], 4096));
            EXPECT_OK(ncclCommWindowRegister(comms[r], buffers[r], 4096, &wins[r], NCCL_WIN_DEFAULT));
          }
          EXPECT_OK(ncclGroupEnd());
          float in[2] = {1.5f, 2.25f}, sum[2] = {0, 0};
          EXPECT_OK(ncclGroupStart());
          for (int r = 0; r < 2; ++r) {
            EXPECT_OK(ncclAllReduce(&in[r], &sum[r], 1, ncclFloat32, ncclSum, comms[r], nullptr));
            EXPECT_OK(ncclPutSignal(&sum[r], 1, ncclFloat32, 1 - r, wins[r], 8, 0, 0, 0, comms[r], nullptr));
            ncclWaitSignalDesc_t d = {1, 1 - r, 0, 0};
            EXPECT_OK(ncclWaitSignal(1, &d, comms[r], nullptr));
            expect(sum[r] == 0, "the AllReduce ran before ncclGroupEnd");
          }
          EXPECT_OK(ncclGroupEnd());
          for (int r = 0; r < 2; ++r) {
            float got;
            std::memcpy(&got, static_cast<char*>(buffers[r]) + 8, sizeof got);
            expect(got == 3.75f, "rank " + std::to_string(r) + " received " + std::to_string(got));
          }
          for (int r = 0; r < 2; ++r) {
            EXPECT_OK(ncclCommWindowDeregister(comms[r], wins[r]));
            EXPECT_OK(ncclCommDestroy(comms[r]));
            EXPECT_OK(ncclMemFree(buffers[r]));
          }
        }) == "");
}
