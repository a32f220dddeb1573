// Communicator creation through the public API: every rank count, threads and processes.
#include <catch2/catch.hpp>
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <unistd.h>
#include <chrono>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "bootstrap/root.h"
#include "core/socket.h"
#include "comm/communicator.h"
#include "harness/ranks.h"
#include "test_env.h"

using namespace braid;
using braid::test::expect;

namespace {


/// What every freshly made communicator must satisfy: its size and rank, and a working channel.
void checkCommunicator(ncclComm_t comm, int rank, int nRanks) {
  int v = -1;
  EXPECT_OK(ncclCommCount(comm, &v));
  expect(v == nRanks, "count " + std::to_string(v));
  EXPECT_OK(ncclCommUserRank(comm, &v));
  expect(v == rank, "rank " + std::to_string(v));
  EXPECT_OK(ncclCommCuDevice(comm, &v));
  expect(v == -1, "host backend has no CUDA device");
  ncclResult_t async = ncclInternalError;
  EXPECT_OK(ncclCommGetAsyncError(comm, &async));
  expect(async == ncclSuccess, "async error " + std::to_string(async));

  bootstrap::Bootstrap& channel = comm->bootstrap();
  std::vector<int> all(nRanks, -1);
  all[rank] = rank * 10 + 7;
  channel.allGather(all.data(), sizeof(int));
  for (int r = 0; r < nRanks; ++r) expect(all[r] == r * 10 + 7, "allgather slot " + std::to_string(r));
  channel.barrier();
  // Tagged messages around the ring, both directions, and to self.
  const int next = (rank + 1) % nRanks, prev = (rank + nRanks - 1) % nRanks;
  const int out = 1000 + rank;
  channel.send(next, 5, &out, sizeof(out));
  channel.send(prev, 6, &out, sizeof(out));
  channel.send(rank, 7, &out, sizeof(out));
  int in = 0;
  channel.recv(prev, 5, &in, sizeof(in));
  expect(in == 1000 + prev, "tag 5 from prev: " + std::to_string(in));
  channel.recv(next, 6, &in, sizeof(in));
  expect(in == 1000 + next, "tag 6 from next: " + std::to_string(in));
  channel.recv(rank, 7, &in, sizeof(in));
  expect(in == out, "tag 7 from self");
  expect(comm->identity().localRanks == nRanks && comm->identity().localRank == rank, "all ranks share this host");
}

}  // namespace

TEST_CASE("ncclCommInitRank: 1, 2, 3, 4 and 8 ranks as threads and as processes", "[integration][init]") {
  for (int n : {1, 2, 3, 4, 8}) {
    INFO(n << " ranks");
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    REQUIRE(test::runThreads(n, [&](int rank) {
      ncclComm_t comm = nullptr;
      EXPECT_OK(ncclCommInitRank(&comm, n, id, rank));
      checkCommunicator(comm, rank, n);
      EXPECT_OK(ncclCommDestroy(comm));
    }) == "");
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    REQUIRE(test::runProcesses(n, [&](int rank) {
      ncclComm_t comm = nullptr;
      EXPECT_OK(ncclCommInitRank(&comm, n, id, rank));
      checkCommunicator(comm, rank, n);
      EXPECT_OK(ncclCommFinalize(comm));
      EXPECT_OK(ncclCommDestroy(comm));
    }) == "");
  }
}

TEST_CASE("ncclCommInitAll creates every rank from one thread", "[integration][init]") {
  for (int n : {1, 3, 4}) {
    std::vector<ncclComm_t> comms(n, nullptr);
    REQUIRE(ncclCommInitAll(comms.data(), n, nullptr) == ncclSuccess);
    for (int r = 0; r < n; ++r) {
      int v = -1;
      REQUIRE(ncclCommUserRank(comms[r], &v) == ncclSuccess);
      CHECK(v == r);
    }
    // The communicators really are connected: a barrier needs every rank, so run them together.
    REQUIRE(test::runThreads(n, [&](int rank) { comms[rank]->bootstrap().barrier(); }) == "");
    for (auto c : comms) REQUIRE(ncclCommDestroy(c) == ncclSuccess);
  }
  const int repeated[] = {0, 0, 0};
  std::vector<ncclComm_t> comms(3, nullptr);
  REQUIRE(ncclCommInitAll(comms.data(), 3, repeated) == ncclSuccess);
  for (auto c : comms) REQUIRE(ncclCommDestroy(c) == ncclSuccess);
  CHECK(ncclCommInitAll(comms.data(), 0, nullptr) == ncclInvalidArgument);
  CHECK_THAT(ncclGetLastError(nullptr), Catch::Contains("ndev is 0"));
}

TEST_CASE("one thread initialises several ranks inside a group", "[integration][init][group]") {
  const int n = 4;
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  std::vector<ncclComm_t> comms(n, nullptr);
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < n; ++r) REQUIRE(ncclCommInitRank(&comms[r], n, id, r) == ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  for (int r = 0; r < n; ++r) {
    ncclResult_t async = ncclInternalError;
    REQUIRE(ncclCommGetAsyncError(comms[r], &async) == ncclSuccess);
    CHECK(async == ncclSuccess);
  }
  for (auto c : comms) REQUIRE(ncclCommDestroy(c) == ncclSuccess);
  CHECK(ncclGroupEnd() == ncclInvalidUsage);
  CHECK_THAT(ncclGetLastError(nullptr), Catch::Contains("without a matching ncclGroupStart"));
}

TEST_CASE("nonblocking init returns ncclInProgress and completes in the background", "[integration][config]") {
  const int n = 3;
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  REQUIRE(test::runThreads(n, [&](int rank) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    config.commName = "nonblocking-test";
    ncclComm_t comm = nullptr;
    const ncclResult_t r = ncclCommInitRankConfig(&comm, n, id, rank, &config);
    expect(r == ncclInProgress || r == ncclSuccess, "init returned " + std::to_string(r));
    expect(comm != nullptr, "the communicator is handed out at once");
    const ncclResult_t state = test::settle(comm);
    expect(state == ncclSuccess, "final state " + std::to_string(state));
    expect(comm->config().commName == "nonblocking-test", "commName kept");
    checkCommunicator(comm, rank, n);
    const ncclResult_t f = ncclCommFinalize(comm);
    expect(f == ncclInProgress || f == ncclSuccess, "finalize returned " + std::to_string(f));
    expect(test::settle(comm) == ncclSuccess, "finalize state");
    EXPECT_OK(ncclCommDestroy(comm));
  }) == "");
}

TEST_CASE("configs: fields checked by name, older struct sizes accepted", "[integration][config]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.minCTAs = 0;
  CHECK(ncclCommInitRankConfig(&comm, 1, id, 0, &config) == ncclInvalidArgument);
  CHECK_THAT(ncclGetLastError(nullptr), Catch::Contains("config.minCTAs is 0"));
  config = NCCL_CONFIG_INITIALIZER;
  config.minCTAs = 8;
  config.maxCTAs = 4;
  CHECK(ncclCommInitRankConfig(&comm, 1, id, 0, &config) == ncclInvalidArgument);
  CHECK_THAT(ncclGetLastError(nullptr), Catch::Contains("minCTAs (8) is larger than config.maxCTAs (4)"));
  config = NCCL_CONFIG_INITIALIZER;
  config.magic = 0;
  CHECK(ncclCommInitRankConfig(&comm, 1, id, 0, &config) == ncclInvalidArgument);
  CHECK_THAT(ncclGetLastError(nullptr), Catch::Contains("NCCL_CONFIG_INITIALIZER"));
  config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 7;
  CHECK(ncclCommInitRankConfig(&comm, 1, id, 0, &config) == ncclInvalidArgument);
  CHECK_THAT(ncclGetLastError(nullptr), Catch::Contains("config.blocking is 7"));
  CHECK(comm == nullptr);

  // A struct from an older header: it ends before CTAPolicy. Garbage past its size is not read.
  config = NCCL_CONFIG_INITIALIZER;
  config.size = offsetof(ncclConfig_t, CTAPolicy);
  config.minCTAs = 2;
  config.CTAPolicy = 99;
  config.nvlinkCentricSched = 99;
  REQUIRE(ncclCommInitRankConfig(&comm, 1, id, 0, &config) == ncclSuccess);
  CHECK(comm->config().minCTAs == 2);
  CHECK(comm->config().ctaPolicy == NCCL_CTA_POLICY_DEFAULT);
  REQUIRE(ncclCommDestroy(comm) == ncclSuccess);
}

TEST_CASE("bad init arguments name the argument", "[integration][init]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comm = nullptr;
  CHECK(ncclCommInitRank(&comm, 0, id, 0) == ncclInvalidArgument);
  CHECK_THAT(ncclGetLastError(nullptr), Catch::Contains("nranks is 0"));
  CHECK(ncclCommInitRank(&comm, 2, id, 2) == ncclInvalidArgument);
  CHECK_THAT(ncclGetLastError(nullptr), Catch::Contains("rank is 2"));
  CHECK(ncclCommInitRank(nullptr, 1, id, 0) == ncclInvalidArgument);
  ncclUniqueId zero;
  std::memset(&zero, 0, sizeof(zero));
  CHECK(ncclCommInitRank(&comm, 1, zero, 0) == ncclInvalidArgument);
  CHECK_THAT(ncclGetLastError(nullptr), Catch::Contains("not made by Braid"));
  CHECK(ncclGetUniqueId(nullptr) == ncclInvalidArgument);
  // The one good id is still usable by a single rank.
  REQUIRE(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess);
  REQUIRE(ncclCommDestroy(comm) == ncclSuccess);
}

TEST_CASE("200 init/destroy cycles leak no descriptors or threads", "[integration][leak]") {
  auto cycle = [] {
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    REQUIRE(test::runThreads(2, [&](int rank) {
      ncclComm_t comm = nullptr;
      EXPECT_OK(ncclCommInitRank(&comm, 2, id, rank));
      EXPECT_OK(ncclCommDestroy(comm));
    }) == "");
  };
  cycle();  // first use creates the lasting singletons
  auto settle = [] {
    for (int i = 0; i < 100 && bootstrap::liveRoots() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  };
  settle();
  const int fds = test::openFileDescriptors();
  const int threads = test::liveThreads();
  for (int i = 0; i < 200; ++i) cycle();
  settle();
  // (a thread of an earlier test may still have been ending at the baseline: fewer is no leak)
  for (int i = 0; i < 100 && test::liveThreads() > threads; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(bootstrap::liveRoots() == 0);
  CHECK(test::openFileDescriptors() == fds);
  CHECK(test::liveThreads() <= threads);
}

TEST_CASE("NCCL_COMM_ID through the public API: separate programs find each other", "[integration][init]") {
  const char* program = std::getenv("BRAID_RANK_MAIN_EXE");
  REQUIRE(program != nullptr);
  const int port = test::freeLoopbackPort();
  const int n = 4;
  std::string command = "export NCCL_COMM_ID=127.0.0.1:" + std::to_string(port) +
                        " NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=INFO BRAID_BOOTSTRAP_TIMEOUT=20; ";
  for (int r = n - 1; r >= 0; --r) command += std::string(program) + " " + std::to_string(n) + " " + std::to_string(r) + " & ";
  command += "wait";
  const std::string out = test::runCommand(command);
  INFO(out);
  for (int r = 0; r < n; ++r) CHECK_THAT(out, Catch::Contains("rank " + std::to_string(r) + " of 4 ok"));
  int complete = 0;
  for (size_t at = out.find("Init COMPLETE"); at != std::string::npos; at = out.find("Init COMPLETE", at + 1)) ++complete;
  CHECK(complete == n);
  CHECK_THAT(out, Catch::Contains("NCCL INFO bootstrap: rank 0 listens on 127.0.0.1:"));
  CHECK_THAT(out, Catch::Contains("(interface lo), root 127.0.0.1:" + std::to_string(port)));
  CHECK_THAT(out, Catch::Contains("NCCL_COMM_ID set by environment to 127.0.0.1:"));
}

TEST_CASE("every creation call works for 1, 2, 3, 4 and 8 ranks", "[integration][split][shrink]") {
  for (int n : {1, 2, 3, 4, 8}) {
    INFO(n << " ranks");
    std::vector<ncclUniqueId> ids(2);
    REQUIRE(ncclGetUniqueId(&ids[0]) == ncclSuccess);
    REQUIRE(ncclGetUniqueId(&ids[1]) == ncclSuccess);
    REQUIRE(test::runThreads(n, [&](int rank) {
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      ncclComm_t comm = nullptr;
      EXPECT_OK(ncclCommInitRankScalable(&comm, n, rank, std::min(n, 2), ids.data(), &config));
      checkCommunicator(comm, rank, n);
      ncclComm_t half = nullptr;
      EXPECT_OK(ncclCommSplit(comm, rank % 2, rank, &half, nullptr));
      checkCommunicator(half, rank / 2, (n - rank % 2 + 1) / 2);
      ncclComm_t fewer = nullptr;
      int last = n - 1;
      if (rank != last || n == 1) {
        EXPECT_OK(ncclCommShrink(comm, &last, n > 1 ? 1 : 0, &fewer, nullptr, NCCL_SHRINK_DEFAULT));
        checkCommunicator(fewer, rank, n > 1 ? n - 1 : 1);
        EXPECT_OK(ncclCommDestroy(fewer));
      }
      EXPECT_OK(ncclCommDestroy(half));
      EXPECT_OK(ncclCommDestroy(comm));
    }) == "");
  }
}

TEST_CASE("ncclCommAbort inside a group drops the deferred init; the watchdog may poll meanwhile", "[integration][group]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comm = nullptr;
  REQUIRE(ncclGroupStart() == ncclSuccess);
  REQUIRE(ncclCommInitRank(&comm, 2, id, 0) == ncclSuccess);
  REQUIRE(ncclCommAbort(comm) == ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);

  // A PyTorch-style watchdog polls ncclCommGetAsyncError from another thread during use.
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  std::vector<ncclComm_t> comms(2, nullptr);
  std::atomic<bool> stop{false};
  std::atomic<int> polls{0};
  REQUIRE(test::runThreads(2, [&](int rank) {
    EXPECT_OK(ncclCommInitRank(&comms[rank], 2, id, rank));
    std::thread watchdog;
    if (rank == 0) {
      watchdog = std::thread([&] {
        while (!stop.load()) {
          ncclResult_t e;
          if (ncclCommGetAsyncError(comms[0], &e) == ncclSuccess && e == ncclSuccess) ++polls;
        }
      });
      // On a busy machine the poller may not have run yet: let it start before the barriers.
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (polls.load() == 0 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    }
    for (int i = 0; i < 50; ++i) comms[rank]->bootstrap().barrier();
    if (rank == 0) {
      stop.store(true);
      watchdog.join();
    }
    EXPECT_OK(ncclCommDestroy(comms[rank]));
  }) == "");
  CHECK(polls.load() > 0);
}

TEST_CASE("Init honours NCCL_TOPO_FILE, NCCL_TOPO_DUMP_FILE and NCCL_GRAPH_DUMP_FILE", "[integration][init][topology]") {
  const char* program = std::getenv("BRAID_RANK_MAIN_EXE");
  const char* data = std::getenv("BRAID_TOPO_DATA");
  REQUIRE(program != nullptr);
  REQUIRE(data != nullptr);
  char dirPattern[] = "/tmp/braid-topo-init-XXXXXX";
  const std::string dir = mkdtemp(dirPattern);
  const std::string topoDump = dir + "/topo.xml", graphDump = dir + "/graphs.xml", bad = dir + "/bad.xml",
                    pciOnlyFile = dir + "/pci-only.xml";
  auto launch = [&](const std::string& env) {
    const int port = test::freeLoopbackPort();
    std::string command = "export NCCL_COMM_ID=127.0.0.1:" + std::to_string(port) +
                          " NCCL_SOCKET_IFNAME=lo BRAID_BOOTSTRAP_TIMEOUT=20 " + env + "; ";
    for (int r = 1; r >= 0; --r) command += std::string(program) + " 2 " + std::to_string(r) + " & ";
    return test::runCommand(command + "wait");
  };
  // Rank 1 dumps (the _RANK knobs), rank 0 logs the system and the channels at INFO/GRAPH.
  std::string out = launch("NCCL_TOPO_FILE=" + std::string(data) + "/ibm-cloud-gx3d-160x1792x8h100-topo.xml" +
                           " NCCL_TOPO_DUMP_FILE=" + topoDump + " NCCL_TOPO_DUMP_FILE_RANK=1 NCCL_GRAPH_DUMP_FILE=" +
                           graphDump + " NCCL_GRAPH_DUMP_FILE_RANK=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=GRAPH");
  INFO(out);
  CHECK_THAT(out, Catch::Contains("rank 0 of 2 ok"));
  CHECK_THAT(out, Catch::Contains("rank 1 of 2 ok"));
  CHECK_THAT(out, Catch::Contains("NCCL INFO === System (from "));
  CHECK_THAT(out, Catch::Contains("NCCL INFO   + NVL[370.8] - NVS/0"));
  CHECK_THAT(out, Catch::Contains("NCCL INFO Pattern 4, crossNic 0, nChannels "));
  CHECK_THAT(out, Catch::Contains("NCCL INFO  0 : GPU/0 "));
  CHECK(access(topoDump.c_str(), R_OK) == 0);
  CHECK(access(graphDump.c_str(), R_OK) == 0);
  // A file naming the NVML double's 4 GPUs only as PCI functions: detection completes them at
  // init, and the dump holds them, as the system searched did.
  if (const char* nvml = std::getenv("BRAID_FAKE_NVML")) {
    std::string pciOnly = "<system version=\"1\"><cpu numaid=\"0\">";
    for (const char* bus : {"1a", "1b", "3a", "3b"})
      pciOnly += std::string("<pci busid=\"0000:") + bus + ":00.0\" class=\"0x030200\" link_speed=\"32.0 GT/s PCIe\"/>";
    { std::ofstream(pciOnlyFile) << pciOnly << "</cpu></system>\n"; }
    out = launch("NCCL_TOPO_FILE=" + pciOnlyFile + " BRAID_NVML_LIBRARY=" + nvml + " NCCL_TOPO_DUMP_FILE=" + topoDump +
                 " NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=GRAPH");
    CHECK_THAT(out, Catch::Contains("NCCL INFO === System (from " + pciOnlyFile + "): 4 GPUs"));
    std::ifstream in(topoDump);
    const std::string dumped((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t gpus = 0;
    for (size_t at = dumped.find("<gpu "); at != std::string::npos; at = dumped.find("<gpu ", at + 1)) ++gpus;
    CHECK(gpus == 4);
  }
  // A broken NCCL_TOPO_FILE fails init on every rank, naming the file and line.
  { std::ofstream(bad) << "<system>\n<cpu numaid=\"0\">\n<gpu/>\n</cpu>\n</system>\n"; }
  out = launch("NCCL_TOPO_FILE=" + bad);
  CHECK_THAT(out, Catch::Contains("ncclCommInitRank(&comm, nranks, id, rank) failed: invalid usage"));
  CHECK_THAT(out, Catch::Contains(bad + ":3: <gpu> inside <cpu>"));
  for (const std::string& f : {topoDump, graphDump, bad, pciOnlyFile}) std::remove(f.c_str());
  rmdir(dir.c_str());
}

TEST_CASE("the bootstrap's allgather, alltoall and barrier: every rank count, blocks larger than a socket's buffers",
          "[integration][init]") {
  // Bruck's rounds send up to half of all blocks at once, every rank to its neighbour at the
  // same time: with 1 MiB blocks each round's message outgrows the kernel's buffers, so a rank
  // must read its own incoming message while its send waits.
  const comm::InitSettings settings = test::loopbackSettings();
  for (int n : {1, 2, 3, 5, 6, 7, 8, 11}) {
    CAPTURE(n);
    const ncclUniqueId id = comm::makeUniqueId(settings);
    std::vector<std::unique_ptr<bootstrap::Bootstrap>> channels(n);
    REQUIRE(test::runThreads(n, [&](int rank) {
              channels[rank] = bootstrap::Bootstrap::join(bootstrap::UniqueId::decode(id), rank, n, settings.net, nullptr);
            }) == "");
    REQUIRE(test::runThreads(n, [&](int rank) {
              bootstrap::Bootstrap& c = *channels[rank];
              for (size_t block : {size_t(1), size_t(24), size_t(1) << 20}) {
                std::vector<char> bytes(n * block, 0);
                for (size_t i = 0; i < block; ++i) bytes[rank * block + i] = static_cast<char>(rank * 31 + i * 7);
                c.allGather(bytes.data(), block);
                for (int r = 0; r < n; ++r) {
                  for (size_t i = 0; i < block; i += std::max<size_t>(block / 64, 1)) {
                    expect(bytes[r * block + i] == static_cast<char>(r * 31 + i * 7),
                           "rank " + std::to_string(rank) + " slot " + std::to_string(r) + " byte " + std::to_string(i) +
                               " of " + std::to_string(block));
                  }
                }
                c.barrier();
                // AlltoAll: byte i of the block rank s sends rank d is a function of (s, d, i).
                auto value = [](int from, int to, size_t i) { return static_cast<char>(from * 13 + to * 5 + i * 3); };
                std::vector<char> out(n * block), in(n * block, 0);
                for (int d = 0; d < n; ++d)
                  for (size_t i = 0; i < block; ++i) out[d * block + i] = value(rank, d, i);
                c.allToAll(out.data(), in.data(), block);
                for (int s = 0; s < n; ++s) {
                  for (size_t i = 0; i < block; i += std::max<size_t>(block / 64, 1)) {
                    expect(in[s * block + i] == value(s, rank, i),
                           "alltoall: rank " + std::to_string(rank) + " block from " + std::to_string(s) + " byte " +
                               std::to_string(i) + " of " + std::to_string(block));
                  }
                }
              }
            }) == "");
  }
}

TEST_CASE("bootstrap inquiries: a question gets the answerer's bytes once, malformed answers are dropped",
          "[integration][init]") {
  const comm::InitSettings settings = test::loopbackSettings();
  const ncclUniqueId id = comm::makeUniqueId(settings);
  constexpr int n = 3;
  std::vector<std::unique_ptr<bootstrap::Bootstrap>> channels(n);
  REQUIRE(test::runThreads(n, [&](int rank) {
            channels[rank] = bootstrap::Bootstrap::join(bootstrap::UniqueId::decode(id), rank, n, settings.net, nullptr);
          }) == "");
  std::atomic<int> answered{0}, askedBy{-1};
  channels[0]->setAnswerer([&](int asker) {
    ++answered;
    askedBy = asker;  // (the answer may depend on who asks: what this rank still owes it)
    bootstrap::Bootstrap::Answer a{};
    a.fill('A');
    return a;
  });
  // Asked twice before it serves: one answer (a question waits once a rank).
  REQUIRE(channels[2]->inquire(0));
  REQUIRE(channels[2]->inquire(0));
  CHECK_FALSE(channels[2]->inquire(2));  // (not itself)
  CHECK_FALSE(channels[2]->inquire(7));  // (no such rank)
  bootstrap::Bootstrap::Answer got{};
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool arrived = false;
  while (!arrived && std::chrono::steady_clock::now() < until) {
    channels[0]->serviceInquiries();
    channels[2]->serviceInquiries();
    arrived = channels[2]->takeAnswer(0, &got);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(arrived);
  CHECK(std::count(got.begin(), got.end(), 'A') == bootstrap::Bootstrap::kAnswerBytes);
  CHECK(answered == 1);
  CHECK(askedBy == 2);
  CHECK_FALSE(channels[2]->takeAnswer(0, &got));  // taken
  // Rank 1 sends an "answer" of the wrong size under the answers' tag: dropped, never filed or
  // queued for a receive.
  std::vector<char> wrong(bootstrap::Bootstrap::kAnswerBytes + 8, 'B');
  channels[1]->send(2, 0xfffffffdu, wrong.data(), wrong.size());
  for (int i = 0; i < 40; ++i) {
    channels[2]->serviceInquiries();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK_FALSE(channels[2]->takeAnswer(1, &got));
  channels[0]->setAnswerer(nullptr);
  // The channels still work afterwards.
  REQUIRE(test::runThreads(n, [&](int rank) { channels[rank]->barrier(); }) == "");
}

TEST_CASE("ncclCommInitRankScalable: each id's root serves its share of the ranks, as threads and as processes",
          "[integration][init]") {
  // With every rank at root 0, the other roots would wait for nobody until their deadline; each
  // serving its block ends them all as soon as init completes.
  for (bool processes : {false, true}) {
    for (auto [n, nId] : std::vector<std::pair<int, int>>{{2, 2}, {5, 2}, {7, 3}, {8, 8}, {9, 4}}) {
      CAPTURE(processes, n, nId);
      const int before = bootstrap::liveRoots();
      std::vector<ncclUniqueId> ids(nId);
      for (auto& id : ids) REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
      REQUIRE(bootstrap::liveRoots() == before + nId);
      auto body = [&, n = n, nId = nId](int rank) {
        ncclComm_t comm = nullptr;
        EXPECT_OK(ncclCommInitRankScalable(&comm, n, rank, nId, ids.data(), nullptr));
        checkCommunicator(comm, rank, n);
        std::vector<float> x(33, static_cast<float>(rank + 1));
        EXPECT_OK(ncclAllReduce(x.data(), x.data(), x.size(), ncclFloat, ncclSum, comm, nullptr));
        for (float v : x) expect(v == static_cast<float>(n * (n + 1) / 2), "sum " + std::to_string(v));
        EXPECT_OK(ncclCommDestroy(comm));
      };
      REQUIRE((processes ? test::runProcesses(n, body) : test::runThreads(n, body)) == "");
      for (int i = 0; i < 300 && bootstrap::liveRoots() > before; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      CHECK(bootstrap::liveRoots() == before);
    }
  }
}
