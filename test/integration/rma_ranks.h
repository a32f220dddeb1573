// What the one-sided tests share (rma_test.cc, rma_net_test.cc, rma_verbs_test.cc): ranks with
// a window each, a wait of one descriptor, the exchange of predictable pieces, rma_main's path.
#pragma once

#include <stdlib.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "datapath/data_path.h"
#include "harness/ranks.h"
#include "test_env.h"

namespace braid::test::rma {

struct WindowSetup {
  int contexts;              ///< config.numRmaCtx
  size_t bytes;              ///< of each rank's window, zeroed
  bool plainMemory = false;  ///< from posix_memalign (other processes cannot map it), not ncclMemAlloc
  bool overLinks = false;    ///< every peer over the one-sided links (BRAID_ONE_SIDED_NET's switch)
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

/// test/integration/rma_main.c's program, beside rank_main (BRAID_RANK_MAIN_EXE); "" when
/// that is not set.
inline std::string rmaMainProgram() {
  const char* rankMain = std::getenv("BRAID_RANK_MAIN_EXE");
  if (rankMain == nullptr) return "";
  const std::string path = rankMain;
  return path.substr(0, path.rfind('/') + 1) + "rma_main";
}

/// ncclWaitSignal for opCnt signals of (ctx, peer), expected to succeed.
inline void waitFor(ncclComm_t comm, int peer, int ctx, int opCnt) {
  ncclWaitSignalDesc_t d = {opCnt, peer, 0, ctx};
  EXPECT_OK(ncclWaitSignal(1, &d, comm, nullptr));
}

/// One rank's part of the exchange of the one-sided tests: it puts, on ctx 1, pieces of `sizes`
/// to every other rank, in its own part (`part` bytes from rank x part) of the peer's window,
/// then signals ctx 0 once; it then waits for each peer's ctx-0 signal only, finds every byte
/// of the peer's pieces there (none past a piece), and consumes their signals on ctx 1. With
/// `lastFromWindow` the last piece comes from this rank's own part of its window (a source the
/// network may read in place), the others from plain memory.
inline void exchangePieces(int rank, int n, ncclComm_t comm, ncclWindow_t win, unsigned char* window,
                           const std::vector<size_t>& sizes, size_t part, bool lastFromWindow) {
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

}  // namespace braid::test::rma
