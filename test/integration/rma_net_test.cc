// One-sided operations over the links between hosts (transport/net/one_sided_links.h), on one
// machine: every peer forced onto the links (BRAID_ONE_SIDED_NET's per-communicator switch)
// with ranks as threads and as processes, and two programs that tell each other apart as hosts
// by NCCL_HOSTID. Exact data, cumulative counts, data before signal; a forged frame naming bytes
// outside the target's window is refused and nothing is written; a peer that dies, or destroys
// its communicator, ends a wait on it with its reason. (test/netns/netns_test.sh runs the same
// program, rma_main, across network namespaces.)
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "harness/ranks.h"
#include "rma_ranks.h"
#include "test_env.h"
#include "transport/net/one_sided_links.h"

using braid::test::expect;

namespace {

std::string lastError() {
  return ncclGetLastError(nullptr);
}

/// n ranks (threads or processes), two RMA contexts, one-sided operations over links, a window
/// of `bytes` from ncclMemAlloc.
std::string withLinkedWindows(
    int n, bool threads, size_t bytes,
    const std::function<void(int, ncclComm_t, ncclWindow_t, unsigned char*)>& body) {
  return braid::test::rma::withWindows(n, threads, {2, bytes, false, true},
                                       [&body](int rank, ncclComm_t comm, ncclWindow_t win, char* window) {
                                         body(rank, comm, win, reinterpret_cast<unsigned char*>(window));
                                       });
}

using braid::test::rma::waitFor;

}  // namespace

TEST_CASE("one-sided over links: puts land exactly, before the signal that follows them",
          "[integration][rma]") {
  for (const int n : {2, 3}) {
    for (const bool threads : {true, false}) {
      INFO(n << " ranks as " << (threads ? "threads" : "processes"));
      // (pieces of 0, 1, 4099 and 1 MiB + 3 bytes: rma_ranks.h)
      const std::vector<size_t> sizes = {0, 1, 4099, (size_t{1} << 20) + 3};
      const size_t part = size_t{2} << 20;
      CHECK(withLinkedWindows(n, threads, part * n,
                              [&](int rank, ncclComm_t comm, ncclWindow_t win, unsigned char* window) {
                                braid::test::rma::exchangePieces(rank, n, comm, win, window, sizes, part);
                              }) == "");
    }
  }
}

TEST_CASE("one-sided over links: a ping-pong, bad offsets refused at the origin", "[integration][rma]") {
  CHECK(withLinkedWindows(
            2, true, 4096, [](int rank, ncclComm_t comm, ncclWindow_t win, unsigned char* window) {
              const int peer = 1 - rank;
              for (int round = 0; round < 20; ++round) {
                const int value = round * 2 + rank;
                if ((round + rank) % 2 == 0) {
                  EXPECT_OK(ncclPutSignal(&value, 1, ncclInt32, peer, win, 8, 0, 0, 0, comm, nullptr));
                } else {
                  waitFor(comm, peer, 0, 1);
                  int got;
                  std::memcpy(&got, window + 8, sizeof got);
                  expect(got == round * 2 + peer,
                         "round " + std::to_string(round) + ": " + std::to_string(got));
                }
              }
              const int four[2] = {1, 2};
              const ncclResult_t r =
                  ncclPutSignal(four, 2, ncclInt32, peer, win, 4092, 0, 0, 0, comm, nullptr);
              expect(r == ncclInvalidArgument && lastError().find("peerWinOffset 4092") != std::string::npos,
                     "a put past the end: " + std::to_string(r) + ": " + lastError());
            }) == "");
}

TEST_CASE("one-sided over links: a forged frame outside the target's window is refused, nothing written",
          "[integration][rma]") {
  // (Rank 0 writes the frames straight onto its link.)
  for (int variant = 0; variant < 3; ++variant) {
    INFO("variant " << variant);
    CHECK(braid::test::rma::forgedPutRefused(withLinkedWindows, variant, true) == "");
  }
}

TEST_CASE("one-sided over links: checkFrame names what it refuses", "[integration][rma]") {
  using namespace braid::transport::onesided;
  char memory[100];
  const WindowSpan window{memory, 100, {}};
  FrameHeader h{};
  h.magic = kFrameMagic;
  h.type = kPut;
  h.offset = 90;
  h.bytes = 10;
  CHECK(checkFrame(h, 3, 2, &window) == "");
  h.bytes = 11;
  CHECK(checkFrame(h, 3, 2, &window).find("rank 3's put of 11 bytes at offset 90 does not fit") == 0);
  h.bytes = 0;
  h.offset = 101;
  CHECK(checkFrame(h, 3, 2, &window).find("at offset 101") != std::string::npos);
  h.offset = 0;
  h.ctx = 2;
  CHECK(checkFrame(h, 3, 2, &window).find("ctx 2; this communicator has 2 contexts") != std::string::npos);
  h.ctx = 0;
  CHECK(checkFrame(h, 3, 2, nullptr).find("has not registered") != std::string::npos);
  h.type = 9;
  CHECK(checkFrame(h, 3, 2, &window).find("unknown type 9") != std::string::npos);
  h.type = kSignal;
  h.magic = 0;
  CHECK(checkFrame(h, 3, 2, &window).find("magic") != std::string::npos);
}

TEST_CASE("one-sided over links: a peer that destroys its communicator ends a wait on it",
          "[integration][rma]") {
  CHECK(braid::test::rma::endedPeerFailsWait(withLinkedWindows, false) == "");  // (its link says goodbye)
}

TEST_CASE("one-sided across hosts (NCCL_HOSTID): two programs put, signal and wait, and a death ends a wait",
          "[integration][rma]") {
  const std::string program = braid::test::rma::rmaMainProgram();
  if (program.empty()) return;
  for (const std::string mode : {"check 4194304", "check 65536 strict", "die"}) {
    INFO(mode);
    const std::string out = braid::test::rma::runRmaMainHosts(program, "true", mode);
    INFO(out);
    if (mode == "die") {
      CHECK(out.find("rank 0: wait on the dead rank -> 6 after") != std::string::npos);
      CHECK(out.find("rank 1") != std::string::npos);
      continue;
    }
    for (int r = 0; r < 2; ++r) {
      CHECK(out.find("rank " + std::to_string(r) + ": rma ok (2 ranks") != std::string::npos);
      CHECK(out.find("rank " + std::to_string(r) +
                     ": refused: ncclPutSignal: the put of 2 bytes (count 2) at "
                     "peerWinOffset") != std::string::npos);
    }
  }
}

TEST_CASE("one-sided over links: a peer that ends with puts in flight fails the puts, and nothing leaks",
          "[integration][rma]") {
  CHECK(braid::test::rma::leftPeerFailsPuts(withLinkedWindows) == "");
  // Threads: a second round of links leaves the descriptors as the first did (sockets,
  // listeners, the proxy's wake-up pipe: all closed).
  int before = 0;
  for (int round = 0; round < 3; ++round) {
    CHECK(withLinkedWindows(3, true, 4096, [](int rank, ncclComm_t comm, ncclWindow_t win, unsigned char*) {
            const int value = rank;
            for (int peer = 0; peer < 3; ++peer) {
              if (peer != rank)
                EXPECT_OK(ncclPutSignal(&value, 1, ncclInt32, peer, win, 4 * rank, 0, 0, 0, comm, nullptr));
            }
            for (int peer = 0; peer < 3; ++peer) {
              if (peer != rank) waitFor(comm, peer, 0, 1);
            }
          }) == "");
    const int now = braid::test::openFileDescriptors();
    if (round == 1) before = now;
    if (round == 2) CHECK(now == before);
  }
}
