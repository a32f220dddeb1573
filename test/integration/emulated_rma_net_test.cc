// One-sided operations across hosts on the CUDA backend's path (datapath/one_sided_relay.h), on
// a GPU played by the CPU (emulated_device.h), with every peer forced onto the network
// (BRAID_ONE_SIDED_NET's switch): TCP links, the loopback net plugin, and a verbs network (the
// verbs double), where the CUDA backend takes TCP links. Puts of 0, 1, 4099 and 1 MiB + 3 bytes
// land exactly, by way of the target's host mirror and its copy into the device window;
// a put carries what a collective before it on the stream wrote, a wait holds the stream (not
// the host) and a collective after it reads the puts' data, inside a group too; an abort ends
// a stream's wait; a stream being captured into a graph is refused. 2 and 3 ranks, threads and
// processes. Across real hosts this needs a GPU on each (the netns tests run the host backend).
#include <limits.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "datapath/one_sided_relay.h"
#include "harness/ranks.h"
#include "integration/emulated_device.h"
#include "integration/emulated_scope.h"
#include "integration/test_env.h"
#include "plugin_helpers.h"
#include "transport/net/plugin/one_sided_plugin.h"

using namespace braid;
using braid::test::expect;

namespace {

using test::Emulated;
using test::streamOf;
using test::sync;

constexpr int kContexts = 2;

enum class Network { kLinks, kVerbs, kPlugin };

/// n ranks on the emulated device, every peer over the network `net`, a zeroed window of `bytes`
/// in "device memory"; checks that the communicator's carrier is the stream relay over the
/// carrier that network should give.
std::string withNetWindows(int n, bool threads, size_t bytes, Network net,
                           const std::function<void(int, ncclComm_t, ncclWindow_t, char*)>& body) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return "ncclGetUniqueId failed";
  auto rankBody = [id, n, bytes, net, body](int rank) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.numRmaCtx = kContexts;
    ncclComm_t comm = nullptr;
    EXPECT_OK(ncclCommInitRankConfig(&comm, n, id, rank, &config));
    Communicator& c = communicatorFrom(comm);
    expect(c.dataPath().onDevice(), "the communicator runs on the emulated device");
    c.setOneSidedOverNetwork(true);
    if (net == Network::kVerbs) {  // (before anything chose the communicator's network transport)
      c.dataPath().connectorOptions().net = "IB";
      c.dataPath().connectorOptions().ib.library = test::verbsDouble();
    }
    void* buffer = test::EmulatedDevice::allocateShareable(bytes);
    std::memset(buffer, 0, bytes);
    ncclWindow_t win = nullptr;
    EXPECT_OK(ncclCommWindowRegister(comm, buffer, bytes, &win, NCCL_WIN_STRICT_ORDERING));
    auto* relay = dynamic_cast<datapath::OneSidedRelay*>(c.oneSidedLinks());
    expect(relay != nullptr, "the one-sided carrier is not the CUDA backend's stream relay");
    if (relay != nullptr) {
      const bool plugin = dynamic_cast<transport::onesided::PluginCarrier*>(&relay->inner()) != nullptr;
      const bool links = dynamic_cast<transport::onesided::Links*>(&relay->inner()) != nullptr;
      expect(net == Network::kPlugin ? plugin : links, "the relay's carrier is not the expected one");
    }
    body(rank, comm, win, static_cast<char*>(buffer));
    EXPECT_OK(ncclCommWindowDeregister(comm, win));
    EXPECT_OK(ncclCommDestroy(comm));
    test::EmulatedDevice::freeShareable(buffer);
  };
  return threads ? test::runThreads(n, rankBody) : test::runProcesses(n, rankBody);
}

const std::vector<size_t> kSizes = {0, 1, 4099, (size_t{1} << 20) + 3};
constexpr size_t kSlot = (size_t{1} << 20) + 3;

void exchangeOver(Network net) {
  for (const int n : {2, 3}) {
    for (const bool threads : {true, false}) {
      INFO(n << " ranks, " << (threads ? "threads" : "processes"));
      CHECK(withNetWindows(n, threads, kSlot * n, net, [&](int rank, ncclComm_t comm, ncclWindow_t win, char* window) {
              test::expectPutsLandExactly(rank, n, comm, win, window, kSlot, kSizes, kContexts, true);
            }) == "");
    }
  }
}

/// Rank `rank` of 2 (a thread) with every peer over the network and a window of 4096 bytes;
/// returns the window's memory (EmulatedDevice::freeShareable's).
void* joinOverNetwork(const ncclUniqueId& id, int rank, ncclComm_t* comm, ncclWindow_t* win) {
  EXPECT_OK(ncclCommInitRank(comm, 2, id, rank));
  communicatorFrom(*comm).setOneSidedOverNetwork(true);
  void* buffer = test::EmulatedDevice::allocateShareable(4096);
  EXPECT_OK(ncclCommWindowRegister(*comm, buffer, 4096, win, NCCL_WIN_DEFAULT));
  return buffer;
}

std::string selfPath() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : "";
}

}  // namespace

TEST_CASE("emulated GPU across hosts (TCP links): puts of 0, 1, 4099 and 1 MiB + 3 bytes land exactly, stream-ordered",
          "[integration][emulated][rma][rma-net]") {
  Emulated emulated;
  exchangeOver(Network::kLinks);
}

TEST_CASE("emulated GPU across hosts (a verbs network): one-sided operations go over TCP links and land exactly",
          "[integration][emulated][rma][rma-net][verbs]") {
  if (test::verbsDouble().empty()) {
    WARN("skipped: this build has no verbs double (libibverbs-dev missing)");
    return;
  }
  Emulated emulated;
  exchangeOver(Network::kVerbs);
}

TEST_CASE("(hidden) emulated GPU across hosts through a net plugin", "[.emulated-rma-plugin]") {
  if (std::getenv("BRAID_EMULATED_RMA_PLUGIN_CHILD") == nullptr) {
    WARN("skipped: a hidden case, run by its visible case in a process of its own");
    return;
  }
  Emulated emulated;
  exchangeOver(Network::kPlugin);
  std::printf("emulated rma plugin: exact\n");
}

TEST_CASE("emulated GPU across hosts through the loopback net plugin: puts land exactly, stream-ordered",
          "[integration][emulated][rma][rma-net][plugins]") {
  if (std::getenv("BRAID_PLUGIN_DIR") == nullptr) {
    WARN("skipped: BRAID_PLUGIN_DIR is not set (the plugin tests' environment)");
    return;
  }
  // (a plugin is loaded once per process: the ranks run in a new process of this binary)
  const std::string out = test::runCommand(
      "unset NCCL_NET NCCL_NET_PLUGIN BRAID_ONE_SIDED_NET; export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 "
      "BRAID_BOOTSTRAP_TIMEOUT=20 BRAID_EMULATED_RMA_PLUGIN_CHILD=1 NCCL_NET_PLUGIN=" +
      test::plugins::plugin("net-loopback") + "; timeout 300 " + selfPath() + " '[.emulated-rma-plugin]' 2>&1");
  INFO(out);
  CHECK(test::plugins::occurrences(out, "emulated rma plugin: exact") == 1);
  CHECK(out.find("All tests passed") != std::string::npos);
}

TEST_CASE("emulated GPU across hosts: a put carries what a collective before it wrote; a wait holds the stream and a "
          "collective after it reads the puts; in a group too",
          "[integration][emulated][rma][rma-net]") {
  Emulated emulated;
  const size_t count = 100003;
  for (const int n : {2, 3}) {
    for (const bool threads : {true, false}) {
      INFO(n << " ranks, " << (threads ? "threads" : "processes"));
      CHECK(withNetWindows(n, threads, count * sizeof(float), Network::kLinks,
                           [&](int rank, ncclComm_t comm, ncclWindow_t win, char* window) {
              test::expectPutsFollowStream(rank, n, comm, win, window, count);
              const cudaStream_t stream = streamOf(rank);
              float token = 1, tokens = 0;  // (all ranks end together)
              EXPECT_OK(ncclAllReduce(&token, &tokens, 1, ncclFloat, ncclSum, comm, stream));
              sync(comm);
            }) == "");
    }
  }
}

TEST_CASE("emulated GPU across hosts: a wait returns to the host at once, an abort ends it; a captured stream is refused",
          "[integration][emulated][rma][rma-net]") {
  Emulated emulated;
  for (const bool threads : {true, false}) {
    INFO((threads ? "threads" : "processes"));
    ncclUniqueId id;  // (not withNetWindows: the aborted communicator deregisters nothing)
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    auto rankBody = [id](int rank) {
      ncclComm_t comm = nullptr;
      ncclWindow_t win = nullptr;
      void* buffer = joinOverNetwork(id, rank, &comm, &win);
      const cudaStream_t stream = streamOf(rank);
      if (rank == 1) {  // (refused, then gone: rank 0's wait has no signal to come, and no link ends it)
        test::EmulatedDevice::capturedStream.store(stream);
        const float x = 1;
        const ncclResult_t r = ncclPutSignal(&x, 1, ncclFloat, 0, win, 0, 0, 0, 0, comm, stream);
        test::EmulatedDevice::capturedStream.store(nullptr);
        const std::string text = ncclGetLastError(nullptr);
        expect(r == ncclInvalidUsage && text.find("captured into a CUDA graph") != std::string::npos,
               "a put on a captured stream: " + std::to_string(r) + ", '" + text + "'");
        EXPECT_OK(ncclCommWindowDeregister(comm, win));
        EXPECT_OK(ncclCommDestroy(comm));
      } else {
        const int before = test::EmulatedDevice::oneSidedRuns.load();
        ncclWaitSignalDesc_t d = {1, 1, 0, 0};
        EXPECT_OK(ncclWaitSignal(1, &d, comm, stream));  // (the host goes on)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        expect(test::EmulatedDevice::oneSidedRuns.load() == before, "the wait ended without a signal");
        const auto start = std::chrono::steady_clock::now();
        EXPECT_OK(ncclCommAbort(comm));
        const auto took = std::chrono::steady_clock::now() - start;
        expect(test::EmulatedDevice::oneSidedRuns.load() == before + 1, "the stream's wait did not end");
        expect(took < std::chrono::seconds(10),
               "the abort took " + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()) +
                   " ms");
      }
      test::EmulatedDevice::freeShareable(buffer);
    };
    CHECK((threads ? test::runThreads(2, rankBody) : test::runProcesses(2, rankBody)) == "");
  }
}

TEST_CASE("emulated GPU across hosts: a put on the stream to a peer that is gone fails the communicator, naming the peer",
          "[integration][emulated][rma][rma-net]") {
  Emulated emulated;
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  std::atomic<bool> gone{false};
  CHECK(test::runThreads(2, [&](int rank) {
          ncclComm_t comm = nullptr;
          ncclWindow_t win = nullptr;
          void* buffer = joinOverNetwork(id, rank, &comm, &win);
          if (rank == 1) {
            EXPECT_OK(ncclCommWindowDeregister(comm, win));
            EXPECT_OK(ncclCommDestroy(comm));
            gone.store(true);
          } else {
            while (!gone.load()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
            const float x = 1;
            EXPECT_OK(ncclPutSignal(&x, 1, ncclFloat, 1, win, 0, 0, 0, 0, comm, streamOf(0)));  // (enqueued: returns)
            sync(comm);
            ncclResult_t state = ncclSuccess;
            const auto start = std::chrono::steady_clock::now();
            while (state == ncclSuccess && std::chrono::steady_clock::now() - start < std::chrono::seconds(30)) {
              EXPECT_OK(ncclCommGetAsyncError(comm, &state));
              std::this_thread::sleep_for(std::chrono::milliseconds(5));
            }
            const std::string text = ncclGetLastError(comm);
            expect(state == ncclRemoteError && text.find("ncclPutSignal to rank 1 enqueued on a stream failed") !=
                                                   std::string::npos,
                   "the communicator's error: " + std::to_string(state) + ", '" + text + "'");
            EXPECT_OK(ncclCommAbort(comm));
          }
          test::EmulatedDevice::freeShareable(buffer);
        }) == "");
}
