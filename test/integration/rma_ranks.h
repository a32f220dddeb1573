// What the one-sided tests share (rma_test.cc, rma_net_test.cc, rma_plugin_test.cc,
// rma_verbs_test.cc): ranks with a window each, a wait of one descriptor, the exchange of
// predictable pieces, rma_main's path, and the cases every cross-host carrier must pass.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "datapath/data_path.h"
#include "harness/ranks.h"
#include "test_env.h"
#include "transport/net/one_sided_links.h"

namespace braid::test::rma {

struct WindowSetup {
  int contexts;              ///< config.numRmaCtx
  size_t bytes;              ///< of each rank's window, zeroed
  bool plainMemory = false;  ///< from posix_memalign (other processes cannot map it), not ncclMemAlloc
  bool overLinks = false;    ///< every peer over the one-sided links (BRAID_ONE_SIDED_NET's switch)
  int maxP2pPeers = 0;       ///< config.maxP2pPeers (0: not set)
  bool overVerbs = false;    ///< with overLinks: the verbs carrier, on the verbs double (verbsDouble())
};

/// n ranks (threads, or processes), each with a communicator and a window as `setup` says; the
/// window is deregistered and freed, the communicator destroyed, after body.
inline std::string withWindows(int n, bool threads, const WindowSetup& setup,
                               const std::function<void(int, ncclComm_t, ncclWindow_t, char*)>& body) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return "ncclGetUniqueId failed";
  auto rankBody = [id, n, body, setup](int rank) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.numRmaCtx = setup.contexts;
    if (setup.maxP2pPeers > 0) config.maxP2pPeers = setup.maxP2pPeers;
    ncclComm_t comm = nullptr;
    EXPECT_OK(ncclCommInitRankConfig(&comm, n, id, rank, &config));
    if (setup.overLinks) braid::communicatorFrom(comm).setOneSidedOverNetwork(true);
    if (setup.overVerbs) {  // (before anything chose the communicator's network transport)
      transport::ConnectorOptions& o = braid::communicatorFrom(comm).dataPath().connectorOptions();
      o.net = "IB";
      o.ib.library = verbsDouble();
    }
    void* buffer = nullptr;
    if (setup.plainMemory) {
      expect(posix_memalign(&buffer, NCCL_WIN_REQUIRED_ALIGNMENT, setup.bytes) == 0, "posix_memalign");
    } else {
      EXPECT_OK(ncclMemAlloc(&buffer, setup.bytes));
    }
    std::memset(buffer, 0, setup.bytes);
    ncclWindow_t win = nullptr;
    EXPECT_OK(ncclCommWindowRegister(comm, buffer, setup.bytes, &win, NCCL_WIN_DEFAULT));
    if (setup.overLinks) {
      expect(braid::communicatorFrom(comm).oneSidedLinks() != nullptr || n == 1,
             "no one-sided links were made");
    }
    body(rank, comm, win, static_cast<char*>(buffer));
    EXPECT_OK(ncclCommWindowDeregister(comm, win));
    EXPECT_OK(ncclCommDestroy(comm));
    if (setup.plainMemory) {
      std::free(buffer);
    } else {
      EXPECT_OK(ncclMemFree(buffer));
    }
  };
  return threads ? runThreads(n, rankBody) : runProcesses(n, rankBody);
}

/// Byte i of piece k that rank `from` puts (exactly predictable, differs by rank and piece).
inline unsigned char pattern(int from, int k, size_t i) {
  return static_cast<unsigned char>(from * 31 + k * 17 + i * 7 + 1);
}

/// Whether `count` bytes at `at` hold piece k of rank `from`; else says which byte is wrong.
inline bool holdsPiece(const unsigned char* at, size_t count, int from, int k) {
  for (size_t i = 0; i < count; ++i) {
    if (at[i] != pattern(from, k, i)) {
      expect(false, "byte " + std::to_string(i) + " of rank " + std::to_string(from) + "'s piece " +
                        std::to_string(k) + " is wrong when its signal came");
      return false;
    }
  }
  return true;
}

/// Rank `from`'s pieces of `sizes`, one after another from `offset` with a byte left untouched
/// (0) after each, as the one-sided tests put them.
inline void expectPieces(const unsigned char* window, size_t offset, const std::vector<size_t>& sizes, int from) {
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (!holdsPiece(window + offset, sizes[k], from, static_cast<int>(k))) return;
    expect(window[offset + sizes[k]] == 0, "the byte after a piece was written");
    offset += sizes[k] + 1;
  }
}

/// ncclWaitSignal for opCnt signals of (ctx, peer), expected to succeed.
inline void waitFor(ncclComm_t comm, int peer, int ctx, int opCnt) {
  ncclWaitSignalDesc_t d = {opCnt, peer, 0, ctx};
  EXPECT_OK(ncclWaitSignal(1, &d, comm, nullptr));
}

/// Rounds of a ring: in each, this rank puts round x 100 + rank at 4 x round in the next rank's
/// window and waits for the previous rank's, which it finds there exactly.
inline void putAroundRing(int rank, int n, ncclComm_t comm, ncclWindow_t win, const char* window, int rounds) {
  const int next = (rank + 1) % n, previous = (rank + n - 1) % n;
  for (int round = 0; round < rounds; ++round) {
    const int value = round * 100 + rank;
    EXPECT_OK(ncclPutSignal(&value, 1, ncclInt32, next, win, 4 * round, 0, 0, 0, comm, nullptr));
    waitFor(comm, previous, 0, 1);
    int got = 0;
    std::memcpy(&got, window + 4 * round, sizeof got);
    expect(got == round * 100 + previous, "round " + std::to_string(round) + ": " + std::to_string(got));
  }
}

/// One rank's part of the exchange of the one-sided tests: it puts, on ctx 1, pieces of `sizes`
/// to every other rank, in its own part (`part` bytes from rank x part) of the peer's window,
/// then signals ctx 0 once; it then waits for each peer's ctx-0 signal only, finds every byte
/// of the peer's pieces there (none past a piece), and consumes their signals on ctx 1. With
/// `lastFromWindow` the last piece comes from this rank's own part of its window (a source the
/// network may read in place), the others from plain memory.
inline void exchangePieces(int rank, int n, ncclComm_t comm, ncclWindow_t win, unsigned char* window,
                           const std::vector<size_t>& sizes, size_t part, bool lastFromWindow = false) {
  std::vector<unsigned char> source(part);
  const int last = static_cast<int>(sizes.size()) - 1;
  unsigned char* own = window + rank * part;  // (no peer writes into this rank's own part)
  if (lastFromWindow)
    for (size_t i = 0; i < sizes[last]; ++i) own[i] = pattern(rank, last, i);
  for (int peer = 0; peer < n; ++peer) {
    if (peer == rank) continue;
    size_t offset = rank * part;
    for (int k = 0; k <= last; ++k) {
      const void* from = own;
      if (k != last || !lastFromWindow) {
        for (size_t i = 0; i < sizes[k]; ++i) source[i] = pattern(rank, k, i);
        from = source.data();
      }
      EXPECT_OK(ncclPutSignal(from, sizes[k], ncclUint8, peer, win, offset, 0, 1, 0, comm, nullptr));
      offset += sizes[k] + 1;
    }
    EXPECT_OK(ncclSignal(peer, 0, 0, 0, comm, nullptr));
  }
  for (int from = 0; from < n; ++from) {
    if (from == rank) continue;
    waitFor(comm, from, 0, 1);
    expectPieces(window, from * part, sizes, from);
    waitFor(comm, from, 1, static_cast<int>(sizes.size()));
  }
}

/// Runs ranks with windows over one cross-host carrier (the TCP links, a net plugin): n ranks,
/// threads or processes, windows of `bytes`; returns the ranks' failures.
using RankWindowBody = std::function<void(int, ncclComm_t, ncclWindow_t, unsigned char*)>;
using CarrierRanks = std::function<std::string(int n, bool threads, size_t bytes, const RankWindowBody&)>;

/// Rank 0 hands its carrier a put the API would refuse (as a hostile peer would send it):
/// variant 0, offset + size past the window; 1, an unknown window id; 2, an offset that wraps.
/// Rank 1's wait fails naming the refusal, and nothing was written.
inline std::string forgedPutRefused(const CarrierRanks& ranks, int variant, bool threads) {
  return ranks(2, threads, 4096, [variant](int rank, ncclComm_t comm, ncclWindow_t win, unsigned char* window) {
    braid::Communicator& c = braid::communicatorFrom(comm);
    const braid::WindowEntry entry = c.windows().find(win);
    std::vector<unsigned char> junk(64, 0xab);
    if (rank == 0) {
      if (variant == 0) c.oneSidedLinks()->put(1, entry.peerIds[1], 4090, junk.data(), 16, 0);
      if (variant == 1) c.oneSidedLinks()->put(1, entry.peerIds[1] ^ 1, 0, junk.data(), 16, 0);
      if (variant == 2) c.oneSidedLinks()->put(1, entry.peerIds[1], UINT64_MAX - 7, junk.data(), 16, 0);
      return;
    }
    ncclWaitSignalDesc_t d = {1, 0, 0, 0};
    const ncclResult_t r = ncclWaitSignal(1, &d, comm, nullptr);
    const char* named[] = {"put of 16 bytes at offset 4090 does not fit this rank's window of 4096 bytes",
                           "which this rank has not registered", "at offset 18446744073709551608 does not fit"};
    const std::string error = ncclGetLastError(nullptr);
    expect(r == ncclRemoteError && error.find(named[variant]) != std::string::npos,
           "the wait: " + std::to_string(r) + ": " + error);
    for (int i = 0; i < 4096; ++i) {
      if (window[i] != 0) {
        expect(false, "byte " + std::to_string(i) + " was written");
        break;
      }
    }
  });
}

/// Two processes; rank 1 ends at once (`dies`: its process exits without a word, else it
/// destroys its communicator): rank 0's wait on it fails within 20 s, naming it.
inline std::string endedPeerFailsWait(const CarrierRanks& ranks, bool dies) {
  return ranks(2, false, 4096, [dies](int rank, ncclComm_t comm, ncclWindow_t, unsigned char*) {
    if (rank == 1) {
      if (dies) _exit(0);
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    ncclWaitSignalDesc_t d = {1, 1, 0, 0};
    const ncclResult_t r = ncclWaitSignal(1, &d, comm, nullptr);
    const auto waited = std::chrono::steady_clock::now() - start;
    const std::string error = ncclGetLastError(nullptr);
    expect(r != ncclSuccess && error.find("rank 1") != std::string::npos,
           "the wait: " + std::to_string(r) + ": " + error);
    expect(waited < std::chrono::seconds(20), "the wait took too long");
  });
}

/// Two processes; rank 1 leaves at once (destroys its communicator, and its process ends), rank 0
/// puts 1 MiB until a put fails, which must happen within seconds, with ncclRemoteError saying
/// the path to rank 1 broke.
inline std::string leftPeerFailsPuts(const CarrierRanks& ranks) {
  return ranks(2, false, 1 << 20, [](int rank, ncclComm_t comm, ncclWindow_t win, unsigned char*) {
    if (rank == 1) return;
    std::vector<char> source(1 << 20, 7);
    const auto start = std::chrono::steady_clock::now();
    ncclResult_t r = ncclSuccess;
    while (r == ncclSuccess && std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
      r = ncclPutSignal(source.data(), source.size(), ncclInt8, 1, win, 0, 0, 0, 0, comm, nullptr);
    }
    const std::string error = ncclGetLastError(nullptr);
    // (TCP links are made on first use: the link broke, or rank 1 left before it could be made)
    expect(r == ncclRemoteError && (error.find("to rank 1 broke") != std::string::npos ||
                                    error.find("cannot open the one-sided link to rank 1") != std::string::npos),
           "the last put: " + std::to_string(r) + ": " + error);
  });
}

/// rma_main (test/integration/rma_main.c, built beside BRAID_RANK_MAIN_EXE), or "" (with a
/// warning) when the tests' environment does not name it.
inline std::string rmaMainProgram() {
  const char* rankMain = std::getenv("BRAID_RANK_MAIN_EXE");
  if (rankMain == nullptr) {
    WARN("skipped: BRAID_RANK_MAIN_EXE is not set (run the tests through meson test)");
    return "";
  }
  const std::string program = rankMain;
  return program.substr(0, program.rfind('/') + 1) + "rma_main";
}

/// Runs two rma_main `program`s in `mode` ("check BIG [strict]", "die") that tell each other
/// apart as hosts (NCCL_HOSTID), after the shell words `env`; returns what they printed.
inline std::string runRmaMainHosts(const std::string& program, const std::string& env, const std::string& mode) {
  std::string command = env + "; export NCCL_COMM_ID=127.0.0.1:" + std::to_string(freeLoopbackPort()) +
                        " NCCL_SOCKET_IFNAME=lo BRAID_BOOTSTRAP_TIMEOUT=20; ";
  for (int r = 0; r < 2; ++r) {
    command += "NCCL_HOSTID=host" + std::to_string(r) + " timeout 60 " + program + " 2 " + std::to_string(r) + " " +
               mode + " & ";
  }
  return runCommand(command + "wait");
}

}  // namespace braid::test::rma
