// One-sided operations through a net plugin (transport/net/plugin/one_sided_plugin.h): Braid's
// loopback test plugin (test/plugins/net_loopback.c) in its v11 build, its maxRecvs-8 build, the
// v6 build whose test never reports sizes, the v6 build whose accept blocks until the connection
// has come, and the strict build (one thread per comm, no close in flight, setup never beside
// data calls). A plugin is loaded once per process, so each
// visible case runs hidden cases in a new process of this binary with NCCL_NET_PLUGIN set; there
// every peer is forced onto the network (BRAID_ONE_SIDED_NET's switch) with ranks as threads and
// as processes. Two rma_main programs that tell each other apart as hosts (NCCL_HOSTID) do the
// same with the plugin carrying their collectives, and one of them dies (also after both made
// their comms, under a plugin that never reports the loss: NET_LOOPBACK_SILENT_LOSS). 8 ranks
// that each put to one peer show the comms and bounce memory made on first use, on each peer's
// device (the loopback plugin's NET_LOOPBACK_RECORD says what it was asked).
#include <limits.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "harness/ranks.h"
#include "plugin_helpers.h"
#include "rma_ranks.h"
#include "test_env.h"
#include "transport/net/plugin/one_sided_plugin.h"

using braid::test::expect;
using braid::test::plugins::occurrences;
using braid::test::plugins::plugin;
using braid::transport::onesided::PluginCarrier;

namespace {

std::string selfPath() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : "";
}

/// Whether a hidden case runs in the process runHidden started.
bool startedByVisibleCase() {
  if (std::getenv("BRAID_RMA_PLUGIN_CHILD") != nullptr) return true;
  WARN("skipped: a hidden case, run by its visible case in a process of its own");
  return false;
}

/// Runs the hidden cases `tags` in a new process of this binary with net plugin `name`
/// (test/plugins), after the shell assignments `env`; returns what it printed.
std::string runHidden(const std::string& name, const std::string& tags, const std::string& env = "") {
  return braid::test::runCommand(
      "unset NCCL_NET NCCL_NET_PLUGIN BRAID_ONE_SIDED_NET; export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 "
      "BRAID_BOOTSTRAP_TIMEOUT=20 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET BRAID_RMA_PLUGIN_CHILD=1 NCCL_NET_PLUGIN=" +
      plugin(name) + " " + env + "; timeout 300 " + selfPath() + " '" + tags + "' 2>&1");
}

bool noPluginDir() {
  if (std::getenv("BRAID_PLUGIN_DIR") != nullptr) return false;
  WARN("skipped: BRAID_PLUGIN_DIR is not set (the plugin tests' environment)");
  return true;
}

/// n ranks (threads or processes), two RMA contexts, every peer over the plugin carrier, a
/// window of `bytes` from ncclMemAlloc.
std::string withPluginWindows(int n, bool threads, size_t bytes,
                              const std::function<void(int, ncclComm_t, ncclWindow_t, unsigned char*)>& body) {
  return braid::test::rma::withWindows(
      n, threads, {2, bytes, false, true}, [&body](int rank, ncclComm_t comm, ncclWindow_t win, char* window) {
        expect(dynamic_cast<PluginCarrier*>(braid::communicatorFrom(comm).oneSidedLinks()) != nullptr,
               "the one-sided operations do not go through the net plugin");
        body(rank, comm, win, reinterpret_cast<unsigned char*>(window));
      });
}

using braid::test::rma::waitFor;

std::string fileText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

// ---- hidden: the ranks, in a process with the plugin ----

TEST_CASE("(hidden) one-sided through a net plugin: exact data before its signal", "[.rma-plugin-exact]") {
  if (!startedByVisibleCase()) return;
  // rma_ranks.h's exchange, with pieces of 0, 1, 4099 bytes and one larger than all of a comm's
  // bounce slots; then a ping-pong.
  const std::vector<size_t> sizes = {0, 1, 4099, PluginCarrier::kSlots * PluginCarrier::kChunkBytes + 3};
  const size_t part = size_t{4} << 20;
  for (const int n : {2, 3}) {
    for (const bool threads : {true, false}) {
      INFO(n << " ranks as " << (threads ? "threads" : "processes"));
      CHECK(withPluginWindows(n, threads, part * n, [&](int rank, ncclComm_t comm, ncclWindow_t win,
                                                        unsigned char* window) {
              braid::test::rma::exchangePieces(rank, n, comm, win, window, sizes, part);
              // A ping-pong: each put's signal is the only news of it.
              const int peer = rank ^ 1;
              for (int round = 0; round < 50 && peer < n; ++round) {
                const int value = round * 2 + rank;
                if ((round + rank) % 2 == 0) {
                  EXPECT_OK(ncclPutSignal(&value, 1, ncclInt32, peer, win, part * n - 8, 0, 0, 0, comm, nullptr));
                } else {
                  waitFor(comm, peer, 0, 1);
                  int got;
                  std::memcpy(&got, window + part * n - 8, sizeof got);  // (past every piece)
                  expect(got == round * 2 + peer, "round " + std::to_string(round) + ": " + std::to_string(got));
                }
              }
              // All ranks end together: each one's goodbyes find its peers' receives posted, and
              // every comm closes with nothing in flight (no "left open" below).
              float x = 1;
              EXPECT_OK(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, nullptr));
            }) == "");
    }
  }
  std::printf("rma plugin: exact\n");
}

TEST_CASE("(hidden) one-sided through a net plugin: a forged put outside the target's window is refused",
          "[.rma-plugin-forged]") {
  if (!startedByVisibleCase()) return;
  for (int variant = 0; variant < 3; ++variant) {
    INFO("variant " << variant);
    CHECK(braid::test::rma::forgedPutRefused(withPluginWindows, variant, variant != 1) == "");
  }
  std::printf("rma plugin: forged refused\n");
}

TEST_CASE("(hidden) one-sided through a net plugin: a peer that ends fails a wait on it, naming it, and puts to it",
          "[.rma-plugin-lost]") {
  if (!startedByVisibleCase()) return;
  for (const bool dies : {false, true}) {
    INFO((dies ? "rank 1 dies" : "rank 1 destroys its communicator"));
    CHECK(braid::test::rma::endedPeerFailsWait(withPluginWindows, dies) == "");
  }
  CHECK(braid::test::rma::leftPeerFailsPuts(withPluginWindows) == "");
  std::printf("rma plugin: lost peers\n");
}

TEST_CASE("(hidden) one-sided through a net plugin: ranks that abort after their puts end cleanly",
          "[.rma-plugin-abort]") {
  if (!startedByVisibleCase()) return;
  // Both ranks put and signal, wait for each other, then abort with their windows still
  // registered: each carrier says goodbye and closes its comms with nothing in flight (the
  // strict plugin would end the process otherwise), and nothing hangs.
  for (const bool threads : {true, false}) {
    INFO((threads ? "threads" : "processes"));
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    auto rank = [id](int r) {
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      ncclComm_t comm = nullptr;
      EXPECT_OK(ncclCommInitRankConfig(&comm, 2, id, r, &config));
      braid::communicatorFrom(comm).setOneSidedOverNetwork(true);
      void* buffer = nullptr;
      EXPECT_OK(ncclMemAlloc(&buffer, 1 << 20));
      ncclWindow_t win = nullptr;
      EXPECT_OK(ncclCommWindowRegister(comm, buffer, 1 << 20, &win, NCCL_WIN_DEFAULT));
      std::vector<char> source(1 << 20, static_cast<char>(r + 1));
      EXPECT_OK(ncclPutSignal(source.data(), source.size(), ncclInt8, 1 - r, win, 0, 0, 0, 0, comm, nullptr));
      braid::test::rma::waitFor(comm, 1 - r, 0, 1);
      expect(static_cast<char*>(buffer)[(1 << 20) - 1] == 2 - r, "the put did not land");
      const auto start = std::chrono::steady_clock::now();
      EXPECT_OK(ncclCommAbort(comm));
      expect(std::chrono::steady_clock::now() - start < std::chrono::seconds(5), "the abort took too long");
      EXPECT_OK(ncclMemFree(buffer));
    };
    CHECK((threads ? braid::test::runThreads(2, rank) : braid::test::runProcesses(2, rank)) == "");
  }
  std::printf("rma plugin: aborted\n");
}

TEST_CASE("(hidden) one-sided through a net plugin: comms and bounce memory on first use, on each peer's device",
          "[.rma-plugin-lazy]") {
  if (!startedByVisibleCase()) return;
  // 8 ranks, each putting to the next only: a rank holds the bounce slots of one send comm and
  // one receive comm (made eagerly for every linked peer, it held 7 of each).
  const int n = 8;
  const uint64_t comm = PluginCarrier::kSlots * PluginCarrier::kChunkBytes;
  CHECK(withPluginWindows(n, true, 1 << 20, [&](int rank, ncclComm_t c, ncclWindow_t win, unsigned char* window) {
          auto* carrier = dynamic_cast<PluginCarrier*>(braid::communicatorFrom(c).oneSidedLinks());
          // The device of each peer's comms: its send/recv connections' (no topology here: the
          // peer's rank modulo the loopback plugin's 2 devices), not device 0 for all.
          for (int peer = 0; peer < n; ++peer) {
            if (peer == rank) continue;
            expect(carrier->device(peer) == peer % 2, "rank " + std::to_string(rank) + "'s device for rank " +
                                                          std::to_string(peer) + ": " + std::to_string(carrier->device(peer)));
          }
          std::vector<unsigned char> source(1 << 20);
          for (size_t i = 0; i < source.size(); ++i) source[i] = braid::test::rma::pattern(rank, 0, i);
          const int next = (rank + 1) % n, previous = (rank + n - 1) % n;
          EXPECT_OK(ncclPutSignal(source.data(), source.size(), ncclUint8, next, win, 0, 0, 0, 0, c, nullptr));
          waitFor(c, previous, 0, 1);
          braid::test::rma::holdsPiece(window, 1 << 20, previous, 0);
          expect(carrier->bounceBytes() == 2 * comm, "rank " + std::to_string(rank) + " holds " +
                                                        std::to_string(carrier->bounceBytes()) + " bytes of bounce "
                                                        "slots, where one send and one receive comm take " +
                                                        std::to_string(2 * comm));
          std::printf("rma plugin: rank %d holds %llu bytes of bounce slots\n", rank,
                      static_cast<unsigned long long>(carrier->bounceBytes()));
          // (everyone's put has landed before anyone leaves: the goodbyes close every comm)
          EXPECT_OK(ncclSignal(next, 0, 1, 0, c, nullptr));
          waitFor(c, previous, 1, 1);
        }) == "");
  std::printf("rma plugin: lazy\n");
}

// ---- visible ----

TEST_CASE("one-sided through net plugins (v11, maxRecvs 8, v6 without sizes, blocking accept, strict): threads and "
          "processes, 2 and 3 ranks, exact data before signal",
          "[integration][rma][plugins]") {
  if (noPluginDir()) return;
  for (const std::string name : {"net-loopback", "net-recvs8", "net-nosize", "net-blocking", "net-strict"}) {
    const std::string out = runHidden(name, "[.rma-plugin-exact]");
    INFO(name << ":\n" << out);
    CHECK(occurrences(out, "rma plugin: exact") == 1);
    CHECK(occurrences(out, "reaches its linked peers through net plugin") >= 10);
    CHECK(occurrences(out, "loopback net (strict)") == 0);
    CHECK(occurrences(out, "NCCL WARN") == 0);
    CHECK(occurrences(out, "left open") == 0);  // (every comm closed with nothing in flight)
  }
}

TEST_CASE("one-sided through a net plugin: 8 ranks that each put to one peer hold the comms and bounce memory of "
          "that peer only, on the device their send/recv connections use",
          "[integration][rma][plugins]") {
  if (noPluginDir()) return;
  char path[] = "/tmp/braid-rma-plugin-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  const std::string out = runHidden("net-loopback", "[.rma-plugin-lazy]", std::string("NET_LOOPBACK_RECORD=") + path);
  const std::string record = fileText(path);
  unlink(path);
  INFO(out << "\nrecord:\n" << record);
  CHECK(occurrences(out, "rma plugin: lazy") == 1);
  // One send comm and one receive comm a rank: 2 x 2 MiB (eagerly, for 7 linked peers: 28 MiB).
  CHECK(occurrences(out, "holds 4194304 bytes of bounce slots") == 8);
  CHECK(occurrences(out, "opened its path to rank") == 8);
  CHECK(occurrences(out, "rank 0 opened its path to rank 1 on net plugin loopback device 1 (loop1)") == 1);
  CHECK(occurrences(out, "rank 1 accepted rank 0's path on net plugin loopback device 0 (loop0)") == 1);
  CHECK(occurrences(out, "rank 1 opened its path to rank 2 on net plugin loopback device 0 (loop0)") == 1);
  // What the plugin was asked: a listen per linked pair, on the peer's device (each rank listens
  // for 7 peers: 28 of the 56 for odd ranks, on device 1), and a connect per rank.
  CHECK(occurrences(record, "listen dev 1") == 28);
  CHECK(occurrences(record, "listen dev 0") == 28);
  CHECK(occurrences(record, "connect dev 1") == 4);
  CHECK(occurrences(record, "connect dev 0") == 4);
  CHECK(occurrences(out, "NCCL WARN") == 0);
  CHECK(occurrences(out, "left open") == 0);
}

TEST_CASE("one-sided through a net plugin: a put outside the target's window is refused there, nothing written; a "
          "peer that ends fails waits and puts, also where the plugin never reports it; an abort ends cleanly",
          "[integration][rma][plugins]") {
  if (noPluginDir()) return;
  // (NET_LOOPBACK_SILENT_LOSS=1: the plugin's requests to or from a peer whose process ended
  // just never finish; the carrier's control links and their listener probes notice it)
  const std::string all = "[.rma-plugin-forged],[.rma-plugin-lost],[.rma-plugin-abort]";
  const std::vector<std::vector<std::string>> runs = {
      {"net-loopback", "", all},
      {"net-strict", "", all},
      {"net-loopback", "NET_LOOPBACK_SILENT_LOSS=1", "[.rma-plugin-lost]"}};
  for (const std::vector<std::string>& run : runs) {
    const std::string out = runHidden(run[0], run[2], run[1]);
    INFO(run[0] << " " << run[1] << ":\n" << out);
    CHECK(occurrences(out, "rma plugin: lost peers") == 1);
    CHECK(occurrences(out, "loopback net (strict)") == 0);
    if (run[2] != all) continue;
    CHECK(occurrences(out, "rma plugin: aborted") == 1);
    CHECK(occurrences(out, "rma plugin: forged refused") == 1);
  }
}

TEST_CASE("one-sided across hosts (NCCL_HOSTID) through a net plugin: two programs put, signal and wait, and a death "
          "ends a wait",
          "[integration][rma][plugins]") {
  if (noPluginDir()) return;
  const std::string program = braid::test::rma::rmaMainProgram();
  if (program.empty()) return;
  // (diewarm: with a plugin that never fails a vanished peer's requests)
  for (const std::string mode : {"check 4194304", "check 65536 strict", "die", "diewarm"}) {
    INFO(mode);
    const std::string out = braid::test::rma::runRmaMainHosts(
        program,
        "unset NCCL_NET BRAID_ONE_SIDED_NET; export NCCL_IB_DISABLE=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET "
        "NCCL_NET_PLUGIN=" + plugin("net-loopback") + (mode == "diewarm" ? " NET_LOOPBACK_SILENT_LOSS=1" : ""),
        mode);
    INFO(out);
    CHECK(occurrences(out, "reaches its linked peers through net plugin loopback") >= 1);
    if (mode == "die") {  // (rank 1 never put: no comm was made; its control listener refuses)
      CHECK(out.find("rank 0: wait on the dead rank -> 6 after") != std::string::npos);
      CHECK(out.find("rank 1's communicator or process ended") != std::string::npos);
      continue;
    }
    if (mode == "diewarm") {  // (the comms exist both ways; the plugin says nothing)
      const size_t wait = out.find("rank 0: second wait on the dead rank -> 6 after ");
      REQUIRE(wait != std::string::npos);
      CHECK(std::stod(out.substr(wait + std::strlen("rank 0: second wait on the dead rank -> 6 after "))) < 10);
      CHECK(out.find("closed without goodbye", wait) != std::string::npos);
      const size_t puts = out.find("rank 0: puts to the dead rank -> 6 after ");
      REQUIRE(puts != std::string::npos);
      CHECK(std::stod(out.substr(puts + std::strlen("rank 0: puts to the dead rank -> 6 after "))) < 10);
      CHECK(out.find("to rank 1 broke", puts) != std::string::npos);
      continue;
    }
    CHECK(occurrences(out, "reaches its linked peers through net plugin loopback") == 2);
    CHECK(occurrences(out, "NCCL WARN one-sided") == 0);  // (the refused put's WARN is the API's)
    for (int r = 0; r < 2; ++r) {
      CHECK(out.find("rank " + std::to_string(r) + ": rma ok (2 ranks") != std::string::npos);
    }
  }
}
