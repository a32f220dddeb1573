// A net plugin carrying a GPU's FIFO steps (transport/net/plugin/plugin_transport.h), on the
// GPU the CPU plays (emulated_device.h): the loopback test plugin (test/plugins/net_loopback.c)
// reports NCCL_PTR_CUDA and/or NCCL_PTR_DMABUF when NET_LOOPBACK_PTR says so, reads and writes
// the "GPU memory" (host memory, memory files for dma-bufs) and records its regMr, regMrDmaBuf
// and iflush calls in a file, which the test counts.
//
// The plugin is loaded once per process, at the first communicator, and this binary's earlier
// tests have already looked (without NCCL_NET_PLUGIN). So each run starts this binary again
// with the plugin's variables set and runs only the hidden case "[.emulated-net-ranks]", which
// runs the two ranks as processes; the visible case checks its output and the record.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/init.h"
#include "harness/ranks.h"
#include "integration/emulated_device.h"
#include "integration/plugin_helpers.h"
#include "integration/profiler_lines.h"
#include "integration/test_env.h"
#include "datapath/data_path.h"

using namespace braid;
using braid::test::expect;

namespace {

float input(int rank, size_t i) {
  return static_cast<float>((rank * 7 + i) % 5);
}  // exact sums in float

/// The calls the plugin recorded: "regMr cuda" -> how many, "iflush dmabuf" -> ..., and the
/// bytes of every iflush.
struct Recorded {
  std::map<std::string, int> calls;
  long flushedBytes = 0;
  int count(const std::string& key) const {
    auto it = calls.find(key);
    return it == calls.end() ? 0 : it->second;
  }
};

Recorded readRecord(const std::string& path) {
  Recorded r;
  std::ifstream in(path);
  std::string call, type;
  long bytes = 0;
  while (in >> call >> type >> bytes) {
    ++r.calls[call + " " + type];
    if (call == "iflush") r.flushedBytes += bytes;
  }
  return r;
}

std::string selfPath() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : "";
}

/// Whether a hidden case runs in the process runRanks started (a filter of exclusions only,
/// such as meson's '~[ipv6]', also runs hidden cases, in a process without the plugin).
bool startedByRunRanks() {
  if (std::getenv("BRAID_EMULATED_NET_CHILD") != nullptr) return true;
  WARN("skipped: a hidden case, run by its visible case in a process of its own");
  return false;
}

/// Runs a hidden case (`tag`) in a new process of this binary with `env`; returns what it printed.
std::string runRanks(const std::string& env, const std::string& tag = "[.emulated-net-ranks]") {
  const char* dir = std::getenv("BRAID_PLUGIN_DIR");
  const std::string plugin = std::string(dir != nullptr ? dir : "") + "/libnccl-net-loopback.so";
  return test::runCommand(
      "unset NCCL_NET NCCL_NET_FORCE_FLUSH NET_LOOPBACK_PTR NET_LOOPBACK_FORCE_FLUSH; "
      "env BRAID_EMULATED_NET_CHILD=1 NCCL_NET_PLUGIN=" +
      plugin + " NCCL_NET_GDR_LEVEL=SYS NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET " + env + " timeout 120 " +
      selfPath() + " '" + tag + "' 2>&1");
}

/// The body of a hidden case: `rank` run as 2 processes on the emulated GPU, which share `id`;
/// requires that none failed, then prints "emulated <done>" for the visible case to find.
void emulatedRanks(const char* done, const std::function<void(const ncclUniqueId& id, int rank)>& rank) {
  comm::setTestDeviceFactory([](int) { return std::make_unique<test::EmulatedDevice>(); });
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  const std::string failures = test::runProcesses(2, [&](int r) { rank(id, r); }, std::chrono::seconds(60));
  comm::setTestDeviceFactory(nullptr);
  INFO(failures);
  REQUIRE(failures.empty());
  std::printf("emulated %s\n", done);
}

/// Whether a visible case lacks the plugin tests' environment (then it says so and skips).
bool noPluginDir() {
  if (std::getenv("BRAID_PLUGIN_DIR") != nullptr) return false;
  WARN("skipped: BRAID_PLUGIN_DIR is not set (the plugin tests' environment)");
  return true;
}

}  // namespace

// Not a test by itself (hidden): the ranks of the case below, in the process it started.
TEST_CASE("(hidden) the ranks of the emulated-GPU net plugin case", "[.emulated-net-ranks]") {
  if (!startedByRunRanks()) return;
  emulatedRanks("net ranks: all exact", [](const ncclUniqueId& id, int rank) {
    ncclComm_t comm = nullptr;
    EXPECT_OK(ncclCommInitRank(&comm, 2, id, rank));
    comm->dataPath().connectorOptions().networkOnly = true;
    const cudaStream_t s = reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(0x1000 + 16 * rank));
    for (size_t count : {size_t(7), size_t(100003), size_t(1) << 20}) {  // LL, then Simple
      std::vector<float> in(count), out(count, -1), got(count, -1);
      for (size_t i = 0; i < count; ++i) in[i] = input(rank, i);
      EXPECT_OK(ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comm, s));
      EXPECT_OK(ncclGroupStart());
      EXPECT_OK(ncclSend(in.data(), count, ncclFloat, 1 - rank, comm, s));
      EXPECT_OK(ncclRecv(got.data(), count, ncclFloat, 1 - rank, comm, s));
      EXPECT_OK(ncclGroupEnd());
      comm->dataPath().synchronize();
      long wrong = 0, wrongRecv = 0;
      for (size_t i = 0; i < count; ++i) {
        wrong += out[i] != input(0, i) + input(1, i);
        wrongRecv += got[i] != input(1 - rank, i);
      }
      expect(wrong == 0 && wrongRecv == 0, "count " + std::to_string(count) + ": AllReduce " +
                                               std::to_string(wrong) + " wrong, receive " +
                                               std::to_string(wrongRecv) + " wrong");
    }
    EXPECT_OK(ncclCommDestroy(comm));
  });
}

// Not a test by itself (hidden): ranks whose plugin refuses the receivers' GPU memory.
TEST_CASE("(hidden) the ranks of the emulated-GPU refused-registration case", "[.emulated-net-refused]") {
  if (!startedByRunRanks()) return;
  emulatedRanks("net ranks: refused as expected", [](const ncclUniqueId& id, int rank) {
    ncclComm_t comm = nullptr;
    EXPECT_OK(ncclCommInitRank(&comm, 2, id, rank));
    comm->dataPath().connectorOptions().networkOnly = true;
    std::vector<float> x(size_t(1) << 20, 1.0f);
    const cudaStream_t s = reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(0x1000 + 16 * rank));
    // (the connection is made when the AllReduce is enqueued: it may fail there, or later)
    const ncclResult_t r = ncclAllReduce(x.data(), x.data(), x.size(), ncclFloat, ncclSum, comm, s);
    const auto start = std::chrono::steady_clock::now();
    ncclResult_t async = ncclSuccess;
    while (r == ncclSuccess && async == ncclSuccess &&
           std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      EXPECT_OK(ncclCommGetAsyncError(comm, &async));
    }
    const std::string text = ncclGetLastError(comm);
    expect(r != ncclSuccess || async != ncclSuccess, "the AllReduce did not fail");
    expect(text.find("failed in net plugin loopback") != std::string::npos &&
               text.find("regMr (NCCL_PTR_CUDA) returned ncclSystemError (2)") != std::string::npos &&
               text.find("rank " + std::to_string(1 - rank)) != std::string::npos,
           "the error names the plugin, the call and the peer: " + text);
    comm->dataPath().synchronize();
    ncclCommAbort(comm);
  });
}

// Not a test by itself (hidden): ranks whose launches a profiler plugin watches over the network.
TEST_CASE("(hidden) the ranks of the emulated-GPU profiler case", "[.emulated-net-profiler]") {
  if (!startedByRunRanks()) return;
  emulatedRanks("profiler ranks: all exact", [](const ncclUniqueId& id, int rank) {
    ncclComm_t comm = nullptr;
    EXPECT_OK(ncclCommInitRank(&comm, 2, id, rank));
    comm->dataPath().connectorOptions().networkOnly = true;
    const cudaStream_t s = reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(0x1000 + 16 * rank));
    const size_t count = size_t(1) << 20;
    std::vector<float> in(count), out(count, -1), got(count, -1), twice(count, -1);
    for (size_t i = 0; i < count; ++i) in[i] = input(rank, i);
    // A group of two AllReduces (launched apart, each watched) and a lone send/recv pair.
    EXPECT_OK(ncclGroupStart());
    EXPECT_OK(ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comm, s));
    EXPECT_OK(ncclAllReduce(in.data(), twice.data(), count, ncclFloat, ncclSum, comm, s));
    EXPECT_OK(ncclGroupEnd());
    EXPECT_OK(ncclGroupStart());
    EXPECT_OK(ncclSend(in.data(), count, ncclFloat, 1 - rank, comm, s));
    EXPECT_OK(ncclRecv(got.data(), count, ncclFloat, 1 - rank, comm, s));
    EXPECT_OK(ncclGroupEnd());
    // And one on a stream being captured into a graph: not watched (a replay would run the
    // host functions again), its API event saying it is captured.
    const cudaStream_t graphed = reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(0x9000 + 16 * rank));
    test::EmulatedDevice::capturedStream = graphed;
    std::vector<float> captured(count, -1);
    EXPECT_OK(ncclAllReduce(in.data(), captured.data(), count, ncclFloat, ncclSum, comm, graphed));
    comm->dataPath().synchronize();
    test::EmulatedDevice::capturedStream = nullptr;
    long wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      wrong += out[i] != input(0, i) + input(1, i);
      wrong += twice[i] != out[i];
      wrong += captured[i] != out[i];
      wrong += got[i] != input(1 - rank, i);
    }
    expect(wrong == 0, std::to_string(wrong) + " wrong");
    EXPECT_OK(ncclCommDestroy(comm));
  });
}

TEST_CASE("emulated GPU over the network: a profiler plugin gets each launch's ProxyOp, ProxyStep and KernelCh "
          "events, its Coll and P2P events stopping after them",
          "[integration][emulated][plugins][profiler]") {
  if (noPluginDir()) return;
  using namespace braid::test;
  for (const std::string net : {"loopback", "none"}) {  // the loopback net plugin; Braid's sockets
    INFO("NCCL_NET_PLUGIN " << net);
    const std::string env = (net == "none" ? std::string("NCCL_NET_PLUGIN=none ") : std::string()) +
                            "NCCL_IB_DISABLE=1 NCCL_PROFILE_EVENT_MASK=0x75f NCCL_PROFILER_PLUGIN=" +
                            plugins::plugin("profiler-record");
    const std::string out = runRanks(env, "[.emulated-net-profiler]");
    INFO(out);
    REQUIRE_THAT(out, Catch::Contains("emulated profiler ranks: all exact"));
    CHECK(plugins::occurrences(out, "parent=bad") + plugins::occurrences(out, "group=bad") == 0);
    for (int r = 0; r < 2; ++r) {
      INFO("rank " << r);
      const std::vector<ProfLine> lines = profLines(out, r);
      // (every event stops once; each ProxyOp's steps in order, stopped before it, and it
      // before its Coll or P2P event)
      const std::vector<ProxyOpSeen> ops = checkProxyEvents(lines, r);
      std::map<int, int> perParent;  // ProxyOps by their Coll or P2P event
      std::map<std::string, int> sends, recvs;
      for (const ProxyOpSeen& op : ops) {
        (op.isSend ? sends : recvs)[op.parentFunc] += 1;
        for (const ProfLine& l : lines)
          if (l.op == "start" && l.id == op.id) ++perParent[asInt(l.fields.at("parent"))];
      }
      CHECK(sends["AllReduce"] >= 2);  // each AllReduce's own, on a channel or more
      CHECK(recvs["AllReduce"] >= 2);
      CHECK(sends["Send"] >= 1);  // a part a connection set (4 on a GPU)
      CHECK(recvs["Recv"] >= 1);
      CHECK(recvs["Send"] + sends["Recv"] == 0);
      // The API events say whether their stream was being captured: the last AllReduce's was.
      std::set<int> capturedApi;
      int apis = 0;
      for (const ProfLine& l : lines) {
        if (l.op != "start" || (l.what != "CollApi" && l.what != "P2pApi")) continue;
        INFO(l.text);
        ++apis;
        if (l.fields.at("captured") == "1") capturedApi.insert(l.id);
      }
      CHECK(apis == 5);
      REQUIRE(capturedApi.size() == 1);
      int colls = 0;
      std::set<int> capturedColl;
      for (const ProfLine& l : lines) {
        if (l.op != "start" || (l.what != "Coll" && l.what != "P2p")) continue;
        INFO(l.text);
        const bool graphed = capturedApi.count(asInt(l.fields.at("parent"))) == 1;
        if (graphed) capturedColl.insert(l.id);
        // every launch watched, the group's two AllReduces apart; the captured one not
        CHECK((perParent[l.id] == 0) == graphed);
        colls += l.what == "Coll";
      }
      CHECK(colls == 3);
      CHECK(capturedColl.size() == 1);
      // A Group event stops after the Coll and P2P events under it.
      std::map<int, size_t> stopAt;
      for (size_t i = 0; i < lines.size(); ++i)
        if (lines[i].op == "stop") stopAt[lines[i].id] = i;
      // KernelCh: the launch's blocks' times (the played GPU's clock), one a channel of a Coll,
      // one on channel 0 for each P2P, each with KernelChStop no earlier than its start, stopped
      // before its parent.
      std::map<int, int> kernelCh;
      for (const ProfLine& l : lines) {
        if (l.op != "start" || l.what != "KernelCh") continue;
        INFO(l.text);
        const int parent = asInt(l.fields.at("parent"));
        const ProfLine* p = started(lines, parent);
        REQUIRE(p != nullptr);
        CHECK((p->what == "Coll" || p->what == "P2p"));
        if (p->what == "P2p") CHECK(asInt(l.fields.at("channel")) == 0);
        const uint64_t start = std::stoull(l.fields.at("pTimer"));
        CHECK(start > 0);
        int stops = 0;
        for (const ProfLine& s : lines) {
          if (s.op == "state" && s.id == l.id && s.what == "KernelChStop") {
            CHECK(std::stoull(s.fields.at("pTimer")) >= start);
            ++stops;
          }
        }
        CHECK(stops == 1);
        REQUIRE(stopAt.count(l.id) == 1);
        REQUIRE(stopAt.count(parent) == 1);
        CHECK(stopAt[l.id] < stopAt[parent]);
        ++kernelCh[parent];
      }
      for (const ProfLine& l : lines) {
        if (l.op != "start" || (l.what != "Coll" && l.what != "P2p")) continue;
        INFO(l.text);
        const int want = capturedColl.count(l.id) == 1 ? 0 : l.what == "Coll" ? asInt(l.fields.at("nch")) : 1;
        CHECK(kernelCh[l.id] == want);
      }
      for (const ProfLine& l : lines) {
        if (l.op != "start" || (l.what != "Coll" && l.what != "P2p") || l.fields.count("group") == 0) continue;
        const int group = asInt(l.fields.at("group"));
        INFO(l.text);
        REQUIRE(stopAt.count(group) == 1);
        CHECK(stopAt[l.id] < stopAt[group]);
      }
    }
  }
}

// Not a test by itself (hidden): ranks whose tuner plugin is asked about a captured collective.
TEST_CASE("(hidden) the ranks of the emulated-GPU graph-register case", "[.emulated-graph-register]") {
  if (!startedByRunRanks()) return;
  emulatedRanks("graph-register ranks: all exact", [](const ncclUniqueId& id, int rank) {
    ncclComm_t comm = nullptr;
    EXPECT_OK(ncclCommInitRank(&comm, 2, id, rank));
    const cudaStream_t plain = reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(0x1000 + 16 * rank));
    const cudaStream_t graphed = reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(0x9000 + 16 * rank));
    std::vector<float> x(256, 1.0f), y(512, 1.0f);
    EXPECT_OK(ncclAllReduce(x.data(), x.data(), x.size(), ncclFloat, ncclSum, comm, plain));
    test::EmulatedDevice::capturedStream = graphed;
    EXPECT_OK(ncclAllReduce(y.data(), y.data(), y.size(), ncclFloat, ncclSum, comm, graphed));
    comm->dataPath().synchronize();
    test::EmulatedDevice::capturedStream = nullptr;
    expect(x[0] == 2.0f && y[511] == 2.0f, "the results");
    EXPECT_OK(ncclCommDestroy(comm));
  });
}

TEST_CASE("emulated GPU: a tuner plugin's regBuff is 1 for a collective captured into a graph, unless "
          "NCCL_GRAPH_REGISTER=0",
          "[integration][emulated][plugins]") {
  if (noPluginDir()) return;
  for (const std::string setting : {"", "NCCL_GRAPH_REGISTER=0 "}) {
    INFO(setting);
    const std::string out =
        runRanks(setting + "NCCL_DEBUG_SUBSYS=TUNING NCCL_TUNER_PLUGIN=" + test::plugins::plugin("tuner-record"),
                 "[.emulated-graph-register]");
    INFO(out);
    REQUIRE_THAT(out, Catch::Contains("emulated graph-register ranks: all exact"));
    using test::plugins::occurrences;
    CHECK(occurrences(out, "test tuner record: AllReduce of 1024 bytes, numPipeOps 1, regBuff 0") == 2);
    CHECK(occurrences(out, std::string("test tuner record: AllReduce of 2048 bytes, numPipeOps 1, regBuff ") +
                               (setting.empty() ? "1" : "0")) == 2);
  }
}

TEST_CASE(
    "emulated GPU over a net plugin: a receiver whose regMr of GPU memory fails breaks the connection, named",
    "[integration][emulated][plugins]") {
  if (noPluginDir()) return;
  const std::string out =
      runRanks("NET_LOOPBACK_PTR=cuda NET_LOOPBACK_REFUSE_GPU=recv", "[.emulated-net-refused]");
  INFO(out);
  CHECK_THAT(out, Catch::Contains("emulated net ranks: refused as expected"));
  CHECK_THAT(out, Catch::Contains("All tests passed"));
}

TEST_CASE(
    "emulated GPU over a net plugin: Simple steps go between GPU memories (NCCL_PTR_CUDA, dma-buf), flushed "
    "where asked; without the report, through host memory",
    "[integration][emulated][plugins]") {
  if (noPluginDir()) return;
  struct Mode {
    const char* name;
    std::string env;
    const char* registration;  // the GPU slots' registrations ("" none)
    bool flushed;
    bool sendersRefused = false;  // the senders' registrations fail: they stage through host memory
  };
  const std::vector<Mode> modes = {
      {"NCCL_PTR_CUDA", "NET_LOOPBACK_PTR=cuda", "regMr cuda", false},
      {"NCCL_PTR_CUDA, NCCL_NET_FORCE_FLUSH=1", "NET_LOOPBACK_PTR=cuda NCCL_NET_FORCE_FLUSH=1", "regMr cuda",
       true},
      // (the device's forceFlush: its writes reach GPU memory only at the flush, so a tail
      // published before the flush is done shows in the results)
      {"NCCL_PTR_CUDA, the device's forceFlush", "NET_LOOPBACK_PTR=cuda NET_LOOPBACK_FORCE_FLUSH=1",
       "regMr cuda", true},
      {"NCCL_PTR_DMABUF, the device's forceFlush", "NET_LOOPBACK_PTR=cuda,dmabuf NET_LOOPBACK_FORCE_FLUSH=1",
       "regMrDmaBuf cuda", true},
      {"NCCL_PTR_DMABUF, NCCL_DMABUF_ENABLE=0: NCCL_PTR_CUDA",
       "NET_LOOPBACK_PTR=cuda,dmabuf NCCL_DMABUF_ENABLE=0", "regMr cuda", false},
      {"NCCL_PTR_CUDA, the senders' regMr of GPU memory failing",
       "NET_LOOPBACK_PTR=cuda NET_LOOPBACK_REFUSE_GPU=send", "regMr cuda", false, true},
      {"host memory only", "", "", false},
      {"NCCL_PTR_CUDA, NCCL_NET_GDR_LEVEL=PHB (the device's path is unknown)",
       "NET_LOOPBACK_PTR=cuda NCCL_NET_GDR_LEVEL=PHB", "", false},
  };
  for (const Mode& mode : modes) {
    char path[] = "/tmp/braid-netgpu-XXXXXX";
    const int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    const std::string out = runRanks(mode.env + " NET_LOOPBACK_RECORD=" + path);
    const Recorded r = readRecord(path);
    unlink(path);
    INFO(mode.name << "\n" << out);
    REQUIRE_THAT(out, Catch::Contains("emulated net ranks: all exact"));
    CHECK_THAT(out, Catch::Contains("All tests passed"));
    const int hostRegistrations = r.count("regMr host");  // one per end: records, LL staging
    CHECK(hostRegistrations >= 4);
    const int gpuRegistrations = r.count("regMr cuda") + r.count("regMrDmaBuf cuda");
    if (mode.sendersRefused) {
      // every receiver's Simple slots; every sender tried, failed and staged through the host
      CHECK(2 * r.count(mode.registration) == hostRegistrations);
      CHECK(2 * r.count("refused cuda") == hostRegistrations);
      CHECK_THAT(out,
                 Catch::Contains("regMr (NCCL_PTR_CUDA) of GPU memory returned ncclSystemError (2); staging "
                                 "through host memory"));
    } else if (*mode.registration != '\0') {
      CHECK(r.count(mode.registration) == hostRegistrations);  // every end's Simple slots
      CHECK(gpuRegistrations == hostRegistrations);
      CHECK_THAT(out, Catch::Contains("Simple steps in GPU memory"));
    } else {
      CHECK(gpuRegistrations == 0);
      CHECK_THAT(out, Catch::Contains("Simple steps stage in host memory"));
    }
    CHECK(r.count("iflush host") == 0);  // (host memory needs none)
    if (mode.flushed) {
      CHECK(r.count("iflush cuda") + r.count("iflush dmabuf") > 0);
      // at least the Simple payloads of the receives of 1 Mi floats, on both ranks
      CHECK(r.flushedBytes >= 2 * static_cast<long>(sizeof(float) << 20));
    } else {
      CHECK(r.count("iflush cuda") + r.count("iflush dmabuf") == 0);
    }
  }
}
