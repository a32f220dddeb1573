// The CUDA backend's path above the runtime, on a GPU played by the CPU (emulated_device.h):
// asynchronous launches, a group's collectives sharing launches, sends straight into the
// receiver's buffer between ranks of one "device", the watchdog over launches still running,
// and the refusals made before anything is enqueued. What only a GPU can run (the CUDA
// kernels, streams, graphs, IPC) is the gpu suite's.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/init.h"
#include "harness/ranks.h"
#include "integration/emulated_device.h"
#include "integration/emulated_scope.h"
#include "integration/test_env.h"
#include "kernels/launch_args.h"
#include "plan/algo_proto.h"
#include "datapath/data_path.h"

using namespace braid;
using braid::test::expect;

namespace {

using test::Emulated;
using test::streamOf;
using test::sync;

float input(int rank, size_t i) { return static_cast<float>((rank * 7 + i) % 5); }  // exact sums in float

/// n ranks of one communicator, threads of this process, their configs asking for minCTAs and
/// maxCTAs channels (0: not set).
std::vector<ncclComm_t> initComms(int n, int minCTAs, int maxCTAs) {
  std::vector<ncclComm_t> comms(n);
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < n; ++r) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    if (minCTAs > 0) config.minCTAs = minCTAs;
    if (maxCTAs > 0) config.maxCTAs = maxCTAs;
    REQUIRE(ncclCommInitRankConfig(&comms[r], n, id, r, &config) == ncclSuccess);
  }
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  return comms;
}

}  // namespace

TEST_CASE("emulated GPU: every collective and a send/recv ring, asynchronous, exact", "[integration][emulated]") {
  Emulated emulated;
  const int n = 3;
  auto makeBody = [&] {
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    return [id, n](int rank) {
      ncclComm_t comm = nullptr;
      EXPECT_OK(ncclCommInitRank(&comm, n, id, rank));
      int device = -1;
      EXPECT_OK(ncclCommCuDevice(comm, &device));
      expect(device == 0, "the emulated device is device 0");
      const cudaStream_t s = streamOf(rank);
      for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000), size_t(100003)}) {
        std::vector<float> in(count * n), out(count * n);
        for (size_t i = 0; i < in.size(); ++i) in[i] = input(rank, i);
        auto sumAt = [&](size_t i) {
          float v = 0;
          for (int r = 0; r < n; ++r) v += input(r, i);
          return v;
        };
        const std::string at = " (count " + std::to_string(count) + ")";
        EXPECT_OK(ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comm, s));
        sync(comm);
        for (size_t i = 0; i < count; ++i) expect(out[i] == sumAt(i), "AllReduce" + at);
        EXPECT_OK(ncclReduceScatter(in.data(), out.data(), count, ncclFloat, ncclSum, comm, s));
        sync(comm);
        for (size_t i = 0; i < count; ++i) expect(out[i] == sumAt(rank * count + i), "ReduceScatter" + at);
        EXPECT_OK(ncclAllGather(in.data(), out.data(), count, ncclFloat, comm, s));
        sync(comm);
        for (size_t i = 0; i < count * n; ++i) expect(out[i] == input(static_cast<int>(i / count), i % count), "AllGather" + at);
        EXPECT_OK(ncclBroadcast(in.data(), out.data(), count, ncclFloat, 1, comm, s));
        sync(comm);
        for (size_t i = 0; i < count; ++i) expect(out[i] == input(1, i), "Broadcast" + at);
        EXPECT_OK(ncclAlltoAll(in.data(), out.data(), count, ncclFloat, comm, s));
        sync(comm);
        for (size_t i = 0; i < count * n; ++i) {
          expect(out[i] == input(static_cast<int>(i / count), rank * count + i % count), "AlltoAll" + at);
        }
        EXPECT_OK(ncclGroupStart());
        EXPECT_OK(ncclSend(in.data(), count, ncclFloat, (rank + 1) % n, comm, s));
        EXPECT_OK(ncclRecv(out.data(), count, ncclFloat, (rank + n - 1) % n, comm, s));
        EXPECT_OK(ncclGroupEnd());
        sync(comm);
        for (size_t i = 0; i < count; ++i) expect(out[i] == input((rank + n - 1) % n, i), "send/recv ring" + at);
      }
      EXPECT_OK(ncclCommDestroy(comm));
    };
  };
  REQUIRE(test::runBoth(n, makeBody) == "");
}

TEST_CASE("emulated GPU: a large send splits over the peer's connection sets, each a block; odd sizes, offsets",
          "[integration][emulated]") {
  Emulated emulated;
  const int n = 3;
  constexpr size_t kPart = datapath::kPeerPartMinBytes;
  auto makeBody = [&] {
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    return [id, n](int rank) {
      ncclComm_t comm = nullptr;
      EXPECT_OK(ncclCommInitRank(&comm, n, id, rank));
      const datapath::PeerChannels channels = comm->dataPath().peerChannels();
      expect(channels.perPeer == 4, "4 connections a peer on a GPU, not " + std::to_string(channels.perPeer));
      const cudaStream_t s = streamOf(rank);
      const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
      // Buffers 0..63 bytes past an alignment, sizes at and either side of 2 and 4 parts, and
      // more than the FIFOs of all four sets hold.
      size_t offset = 0;
      for (size_t bytes : {2 * kPart - 1, 2 * kPart, 2 * kPart + 3, 4 * kPart + 1, size_t(9 << 20) + 5}) {
        for (size_t sendOff : {size_t(0), size_t(1), size_t(37)}) {
          offset = (offset + 13) % 64;
          std::vector<uint8_t> from(bytes + 64), to(bytes + 64, 0xee);
          for (size_t i = 0; i < bytes; ++i) from[sendOff + i] = static_cast<uint8_t>(i * 11 + i / 1021 + rank);
          EXPECT_OK(ncclGroupStart());
          EXPECT_OK(ncclSend(from.data() + sendOff, bytes, ncclUint8, next, comm, s));
          EXPECT_OK(ncclRecv(to.data() + offset, bytes, ncclUint8, prev, comm, s));
          EXPECT_OK(ncclGroupEnd());
          sync(comm);
          size_t wrong = 0;
          for (size_t i = 0; i < bytes; ++i) wrong += to[offset + i] != static_cast<uint8_t>(i * 11 + i / 1021 + prev);
          for (size_t i = 0; i < offset; ++i) wrong += to[i] != 0xee;
          for (size_t i = offset + bytes; i < to.size(); ++i) wrong += to[i] != 0xee;
          expect(wrong == 0, std::to_string(wrong) + " bytes wrong of " + std::to_string(bytes) + " (send offset " +
                                 std::to_string(sendOff) + ", receive offset " + std::to_string(offset) + ")");
        }
      }
      EXPECT_OK(ncclCommDestroy(comm));
    };
  };
  REQUIRE(test::runBoth(n, makeBody) == "");
}

TEST_CASE("emulated GPU: a group's collectives share launches where nothing depends on an earlier one",
          "[integration][emulated]") {
  Emulated emulated;
  const int n = 2;
  const size_t count = 5000;
  std::vector<ncclComm_t> comms(n);
  REQUIRE(ncclCommInitAll(comms.data(), n, nullptr) == ncclSuccess);
  std::vector<std::vector<float>> a(n), b(n), c(n), d(n);
  for (int r = 0; r < n; ++r) {
    a[r].resize(count);
    for (size_t i = 0; i < count; ++i) a[r][i] = input(r, i);
    b[r] = c[r] = a[r];
    d[r].assign(count * n, -1);
  }
  auto group = [&](const std::function<void(int)>& calls) {
    const int before = test::EmulatedDevice::launches.load();
    REQUIRE(ncclGroupStart() == ncclSuccess);
    for (int r = 0; r < n; ++r) calls(r);
    REQUIRE(ncclGroupEnd() == ncclSuccess);
    for (auto comm : comms) sync(comm);
    return test::EmulatedDevice::launches.load() - before;
  };
  const float sum0 = input(0, 1) + input(1, 1);
  // Three AllReduces of separate buffers: one launch a rank.
  CHECK(group([&](int r) {
          for (auto* v : {&a, &b, &c})
            REQUIRE(ncclAllReduce((*v)[r].data(), (*v)[r].data(), count, ncclFloat, ncclSum, comms[r], streamOf(r)) == ncclSuccess);
        }) == n);
  for (int r = 0; r < n; ++r) CHECK((a[r][1] == sum0 && b[r][1] == sum0 && c[r][1] == sum0));
  // The second reads what the first writes: a launch of its own.
  CHECK(group([&](int r) {
          REQUIRE(ncclAllReduce(a[r].data(), b[r].data(), count, ncclFloat, ncclSum, comms[r], streamOf(r)) == ncclSuccess);
          REQUIRE(ncclAllReduce(b[r].data(), b[r].data(), count, ncclFloat, ncclSum, comms[r], streamOf(r)) == ncclSuccess);
        }) == 2 * n);
  for (int r = 0; r < n; ++r) CHECK(b[r][1] == 4 * sum0);
  // Another kernel (AllGather's byte copy), then a send/recv: three launches.
  CHECK(group([&](int r) {
          REQUIRE(ncclAllReduce(c[r].data(), c[r].data(), count, ncclFloat, ncclSum, comms[r], streamOf(r)) == ncclSuccess);
          REQUIRE(ncclAllGather(a[r].data(), d[r].data(), count, ncclFloat, comms[r], streamOf(r)) == ncclSuccess);
          REQUIRE(ncclSend(a[r].data(), count, ncclFloat, 1 - r, comms[r], streamOf(r)) == ncclSuccess);
          REQUIRE(ncclRecv(b[r].data(), count, ncclFloat, 1 - r, comms[r], streamOf(r)) == ncclSuccess);
        }) == 3 * n);
  for (int r = 0; r < n; ++r) CHECK((c[r][1] == 2 * sum0 && d[r][count + 1] == sum0 && b[r][1] == sum0));
  for (auto comm : comms) REQUIRE(ncclCommDestroy(comm) == ncclSuccess);
}

TEST_CASE("emulated GPU: a rank of several in a process on the legacy stream is refused before anything runs",
          "[integration][emulated]") {
  Emulated emulated;
  std::vector<ncclComm_t> comms(2);
  REQUIRE(ncclCommInitAll(comms.data(), 2, nullptr) == ncclSuccess);
  float x[4] = {1, 2, 3, 4};
  const int launches = test::EmulatedDevice::launches.load();
  REQUIRE(ncclGroupStart() == ncclSuccess);
  ncclResult_t res = ncclSuccess;
  for (int r = 0; r < 2; ++r) {
    const ncclResult_t one = ncclAllReduce(x, x, 4, ncclFloat, ncclSum, comms[r], r == 0 ? nullptr : streamOf(r));
    if (one != ncclSuccess) res = one;
  }
  const ncclResult_t end = ncclGroupEnd();
  CHECK((res == ncclInvalidUsage || end == ncclInvalidUsage));
  CHECK_THAT(std::string(ncclGetLastError(nullptr)), Catch::Contains("legacy default stream"));
  CHECK(test::EmulatedDevice::launches.load() == launches);  // nothing was enqueued for either rank
  CHECK((x[0] == 1 && x[3] == 4));
  for (auto comm : comms) REQUIRE(ncclCommAbort(comm) == ncclSuccess);  // (returns even if a launch waited)
}

TEST_CASE("emulated GPU: every algorithm and protocol of every collective on 6 ranks in nodes of 3",
          "[integration][emulated]") {
  Emulated emulated;
  using plan::EnvAlgo;
  enum Coll { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce, kAlltoAll };
  const std::vector<std::pair<Coll, std::vector<EnvAlgo>>> cases = {
      {kAllReduce, {EnvAlgo::kRing, EnvAlgo::kTree, EnvAlgo::kDirect, EnvAlgo::kRecDoubling, EnvAlgo::kHalvingDoubling,
                    EnvAlgo::kBinomial, EnvAlgo::kHier2D}},
      {kReduceScatter, {EnvAlgo::kRing, EnvAlgo::kHalvingDoubling}},
      {kAllGather, {EnvAlgo::kRing, EnvAlgo::kHalvingDoubling}},
      {kBroadcast, {EnvAlgo::kRing, EnvAlgo::kBinomial}},
      {kReduce, {EnvAlgo::kRing, EnvAlgo::kBinomial}},
      {kAlltoAll, {EnvAlgo::kDirect, EnvAlgo::kPairwise, EnvAlgo::kBruck}},
  };
  const int n = 6;
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  REQUIRE(test::runThreads(n, [&](int rank) {
    ncclComm_t comm = nullptr;
    EXPECT_OK(ncclCommInitRank(&comm, n, id, rank));
    comm->dataPath().setRanksPerNode(3);  // (Tree over nodes, Hier2D's 2 rows of 3)
    const cudaStream_t s = streamOf(rank);
    auto sumAt = [&](size_t i) {
      float v = 0;
      for (int r = 0; r < n; ++r) v += input(r, i);
      return v;
    };
    for (const auto& [coll, algos] : cases) {
      for (EnvAlgo algo : algos) {
        for (kernels::Proto proto : {kernels::Proto::kLL, kernels::Proto::kSimple}) {
          plan::PlanLimits& limits = comm->dataPath().limits();
          for (auto& a : limits.mask.algos) a = 1u << static_cast<int>(algo);
          for (auto& p : limits.mask.protos) p = 1u << static_cast<int>(proto);
          limits.minChannels = limits.maxChannels = 2;
          for (size_t count : {size_t(1), size_t(3001), size_t(100003)}) {
            // (AllReduce's Direct: one LL step a channel)
            if (coll == kAllReduce && algo == EnvAlgo::kDirect && (count > 4096 || proto != kernels::Proto::kLL)) continue;
            // (AlltoAll's Direct is sends and receives, which pick their own protocol: the model's Simple)
            if (coll == kAlltoAll && algo == EnvAlgo::kDirect && proto != kernels::Proto::kSimple) continue;
            const std::string what = "collective " + std::to_string(coll) + ", algorithm " +
                                     std::to_string(static_cast<int>(algo)) + ", protocol " +
                                     std::to_string(static_cast<int>(proto)) + ", count " + std::to_string(count);
            std::vector<float> in(count * n), out(count * n, -1);
            for (size_t i = 0; i < in.size(); ++i) in[i] = input(rank, i);
            switch (coll) {
              case kAllReduce: EXPECT_OK(ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comm, s)); break;
              case kReduceScatter:
                EXPECT_OK(ncclReduceScatter(in.data(), out.data(), count, ncclFloat, ncclSum, comm, s));
                break;
              case kAllGather: EXPECT_OK(ncclAllGather(in.data(), out.data(), count, ncclFloat, comm, s)); break;
              case kBroadcast: EXPECT_OK(ncclBroadcast(in.data(), out.data(), count, ncclFloat, 4, comm, s)); break;
              case kReduce: EXPECT_OK(ncclReduce(in.data(), out.data(), count, ncclFloat, ncclSum, 2, comm, s)); break;
              case kAlltoAll: EXPECT_OK(ncclAlltoAll(in.data(), out.data(), count, ncclFloat, comm, s)); break;
            }
            sync(comm);
            long wrong = 0;
            for (size_t i = 0; i < count * n; ++i) {
              const size_t block = i / count, at = i % count;
              float want = out[i];  // (beyond what the collective writes: not checked)
              if (coll == kAllReduce && i < count) want = sumAt(i);
              if (coll == kReduceScatter && i < count) want = sumAt(rank * count + i);
              if (coll == kAllGather) want = input(static_cast<int>(block), at);
              if (coll == kBroadcast && i < count) want = input(4, i);
              if (coll == kReduce && rank == 2 && i < count) want = sumAt(i);
              if (coll == kAlltoAll) want = input(static_cast<int>(block), rank * count + at);
              wrong += out[i] != want;
            }
            expect(wrong == 0, what + ": " + std::to_string(wrong) + " wrong");
          }
        }
      }
    }
    EXPECT_OK(ncclCommDestroy(comm));
  }, std::chrono::seconds(120)) == "");
}

namespace {

/// 2 processes on the emulated device: both run `op` and wait for it; then rank 1 exits (its
/// communicator never destroyed) and rank 0 runs `op` again, which waits for rank 1. Rank 0
/// fails unless its asynchronous error is ncclRemoteError naming rank 1 within `within`
/// seconds, and unless the launch then ends (aborted, not hung). Returns the harness's report.
std::string afterPeerExits(const std::function<void(ncclComm_t, int)>& op, double within) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return "no unique id";
  return test::runProcesses(2, [&, id](int rank) {
    ncclComm_t comm = nullptr;
    EXPECT_OK(ncclCommInitRank(&comm, 2, id, rank));
    op(comm, rank);
    sync(comm);
    if (rank == 1) _exit(0);
    op(comm, rank);  // enqueued; it waits for rank 1, which is gone
    const auto start = std::chrono::steady_clock::now();
    ncclResult_t async = ncclSuccess;
    while (async == ncclSuccess && std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      EXPECT_OK(ncclCommGetAsyncError(comm, &async));
    }
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    expect(async == ncclRemoteError, "the asynchronous error is " + std::to_string(async));
    expect(std::string(ncclGetLastError(comm)).find("rank 1 (process ") != std::string::npos,
           std::string("the message names rank 1: ") + ncclGetLastError(comm));
    expect(took < within, "noticed after " + std::to_string(took) + " s");
    sync(comm);
    ncclCommAbort(comm);
  }, std::chrono::seconds(40));
}

}  // namespace

TEST_CASE("emulated GPU: a launch waiting on a peer process that exits ends with ncclRemoteError",
          "[integration][emulated]") {
  Emulated emulated;
  std::vector<float> x(100000, 1.0f);
  CHECK(afterPeerExits([&](ncclComm_t comm, int rank) {
          EXPECT_OK(ncclAllReduce(x.data(), x.data(), x.size(), ncclFloat, ncclSum, comm, streamOf(rank)));
        }, 20) == "");
}

TEST_CASE("emulated GPU: sends and receives waiting on a peer process that exits fail at once, naming it",
          "[integration][emulated]") {
  Emulated emulated;
  std::vector<float> x(100000, 1.0f), y(100000);
  // The stalled receive says what it waits for: no 10 s grace as for a wait nothing records.
  CHECK(afterPeerExits([&](ncclComm_t comm, int rank) {
          EXPECT_OK(ncclGroupStart());
          EXPECT_OK(ncclSend(x.data(), x.size(), ncclFloat, 1 - rank, comm, streamOf(rank)));
          EXPECT_OK(ncclRecv(y.data(), y.size(), ncclFloat, 1 - rank, comm, streamOf(rank)));
          EXPECT_OK(ncclGroupEnd());
        }, 5) == "");
}

TEST_CASE("emulated GPU: sends to another process go straight into its registered buffer until it is deregistered",
          "[integration][emulated]") {
  Emulated emulated;
  // 1 MiB of floats: 8 steps of the FIFO, or one step on each of the peer's connection sets
  // (datapath/data_path.h, peerChannels: 4 on a GPU, each a 256 KiB part) when direct.
  const size_t count = 1 << 18;
  const size_t bytes = count * sizeof(float);
  const uint64_t fifoSteps = bytes / (128 * 1024);
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  REQUIRE(test::runProcesses(2, [&, id](int rank) {
    ncclComm_t comm = nullptr;
    EXPECT_OK(ncclCommInitRank(&comm, 2, id, rank));
    const cudaStream_t s = streamOf(rank);
    // Rank 1 receives into memory other processes can map (ncclMemAlloc's on a GPU), 4 KiB in.
    char* allocation = rank == 1 ? static_cast<char*>(test::EmulatedDevice::allocateShareable(bytes + 8192)) : nullptr;
    float* registered = allocation != nullptr ? reinterpret_cast<float*>(allocation + 4096) : nullptr;
    std::vector<float> plain(count), out(count);
    int token = 0;
    // Rank 0 sends round's pattern to `into` on rank 1; returns the FIFO steps rank 0's send took.
    auto round = [&](int r, float* into) {
      const uint64_t before = test::EmulatedDevice::sendSteps.load();
      if (rank == 0) {
        for (size_t i = 0; i < count; ++i) out[i] = static_cast<float>((i * 3 + r) % 1000);
        EXPECT_OK(ncclSend(out.data(), count, ncclFloat, 1, comm, s));
      } else {
        std::fill(into, into + count, -1.0f);
        EXPECT_OK(ncclRecv(into, count, ncclFloat, 0, comm, s));
      }
      sync(comm);
      if (rank == 1) {
        long wrong = 0;
        for (size_t i = 0; i < count; ++i) wrong += into[i] != static_cast<float>((i * 3 + r) % 1000);
        expect(wrong == 0, "round " + std::to_string(r) + ": " + std::to_string(wrong) + " wrong");
      }
      return test::EmulatedDevice::sendSteps.load() - before;
    };
    // Rank 1 tells rank 0 it got this far (its earlier receives have posted their offers).
    auto handOver = [&] {
      if (rank == 1) EXPECT_OK(ncclSend(&token, 1, ncclInt32, 0, comm, s));
      if (rank == 0) EXPECT_OK(ncclRecv(&token, 1, ncclInt32, 1, comm, s));
      sync(comm);
    };
    void* handle = nullptr;
    if (rank == 1) EXPECT_OK(ncclCommRegister(comm, allocation, bytes + 8192, &handle));
    const uint64_t first = round(0, registered);  // the FIFO where rank 1's offer came late (a race, per part)
    handOver();
    const uint64_t direct = round(1, registered);
    const uint64_t again = round(2, registered);
    const uint64_t unregistered = round(3, plain.data());  // rank 0 maps the buffer; this one is not it
    const size_t mappedWhileRegistered = comm->dataPath().mappedBuffers();
    if (rank == 1) EXPECT_OK(ncclCommDeregister(comm, handle));
    handOver();
    const uint64_t revoked = round(4, registered);
    const uint64_t later = round(5, registered);  // (the mapping is gone once round 4's launch ran)
    const size_t mappedAfter = comm->dataPath().mappedBuffers();
    if (rank == 1) EXPECT_OK(ncclCommRegister(comm, allocation, bytes + 8192, &handle));  // a new key
    round(6, registered);
    handOver();
    const uint64_t reregistered = round(7, registered);
    if (rank == 0) {
      const std::string steps = std::to_string(first) + " " + std::to_string(direct) + " " + std::to_string(again) + " " +
                                std::to_string(unregistered) + " " + std::to_string(revoked) + " " +
                                std::to_string(later) + " " + std::to_string(reregistered);
      const uint64_t parts = static_cast<uint64_t>(comm->dataPath().peerChannels().perPeer);
      // (The first round races rank 1's offers part by part: each of the 4 parts goes direct, one
      // step, or through the FIFO, two: 4 to 8 steps.)
      expect(parts == 4 && first >= parts && first <= fifoSteps && direct == parts && again == parts &&
                 unregistered == fifoSteps && revoked == fifoSteps && later == fifoSteps && reregistered == parts,
             "FIFO steps of the sends: " + steps);
      // (the peer's connection sets share one import: offered_buffers.h)
      expect(mappedWhileRegistered == 1 && mappedAfter == 0,
             "mapped buffers " + std::to_string(mappedWhileRegistered) + " then " + std::to_string(mappedAfter));
    }
    if (rank == 1) EXPECT_OK(ncclCommDeregister(comm, handle));
    EXPECT_OK(ncclCommDestroy(comm));
    if (rank == 1) test::EmulatedDevice::freeShareable(allocation);
  }, std::chrono::seconds(60)) == "");
}

namespace {

/// The dma-buf regions the verbs double holds in this process (-1 without the double).
int dmabufRegions() {
  void* h = dlopen(test::verbsDouble().c_str(), RTLD_NOW | RTLD_NOLOAD);
  auto* count = h != nullptr ? reinterpret_cast<int (*)()>(dlsym(h, "fake_verbs_dmabuf_regions")) : nullptr;
  const int n = count != nullptr ? count() : -1;
  if (h != nullptr) dlclose(h);
  return n;
}

}  // namespace

TEST_CASE("emulated GPU over IB (verbs double): Simple steps go between GPU memories by dma-buf, LL through the host",
          "[integration][emulated][ib]") {
  if (test::verbsDouble().empty()) {
    WARN("skipped: built without the verbs headers, so no verbs double");
    return;
  }
  Emulated emulated;
  const std::string verbs = test::verbsDouble();
  for (const bool dmabuf : {true, false}) {
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    REQUIRE(test::runProcesses(2, [&, id](int rank) {
      ncclComm_t comm = nullptr;
      EXPECT_OK(ncclCommInitRank(&comm, 2, id, rank));
      transport::ConnectorOptions& o = comm->dataPath().connectorOptions();
      o.networkOnly = true;
      o.net = "IB";
      o.ib.library = verbs;
      o.gpuDirect.dmabuf = dmabuf;
      o.gpuDirect.level = topo::PathType::Sys;  // (the double's NICs are unknown to sysfs)
      const cudaStream_t s = streamOf(rank);
      for (size_t count : {size_t(7), size_t(100003), size_t(1) << 20}) {  // LL, then Simple
        std::vector<float> in(count), out(count, -1), got(count, -1);
        for (size_t i = 0; i < count; ++i) in[i] = input(rank, i);
        EXPECT_OK(ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comm, s));
        EXPECT_OK(ncclGroupStart());
        EXPECT_OK(ncclSend(in.data(), count, ncclFloat, 1 - rank, comm, s));
        EXPECT_OK(ncclRecv(got.data(), count, ncclFloat, 1 - rank, comm, s));
        EXPECT_OK(ncclGroupEnd());
        sync(comm);
        long wrong = 0, wrongRecv = 0;
        for (size_t i = 0; i < count; ++i) {
          wrong += out[i] != input(0, i) + input(1, i);
          wrongRecv += got[i] != input(1 - rank, i);
        }
        expect(wrong == 0 && wrongRecv == 0, "count " + std::to_string(count) + ": AllReduce " + std::to_string(wrong) +
                                                 " wrong, receive " + std::to_string(wrongRecv) + " wrong");
      }
      // Every end (each ring channel's two, the send/recv pair's two) keeps its Simple slots in GPU memory.
      const int regions = dmabufRegions();
      expect(dmabuf ? regions >= 4 && regions % 2 == 0 : regions == 0, "dma-buf regions: " + std::to_string(regions));
      EXPECT_OK(ncclCommDestroy(comm));
      expect(dmabufRegions() == 0, "dma-buf regions after destroy: " + std::to_string(dmabufRegions()));
    }, std::chrono::seconds(60)) == "");
  }
}

TEST_CASE("emulated GPU: ranks sharing a device split the blocks it keeps resident between their channels and sends",
          "[integration][emulated]") {
  Emulated emulated;
  const int n = 4;
  const size_t count = size_t(1) << 20;  // 4 MiB of floats: the tuner wants every channel it may have
  // largest: the most channels the ranks' launches used, the device keeping `resident` blocks
  // and the config asking for minCTAs channels at least (0: not set).
  auto largest = [&](int resident, int minCTAs) {
    test::EmulatedDevice::residentBlocksAll = resident;
    test::EmulatedDevice::maxLaunchChannels = 0;
    std::vector<ncclComm_t> comms = initComms(n, minCTAs, 0);
    std::vector<std::vector<float>> buf(n, std::vector<float>(count));
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) buf[r][i] = input(r, i);
    REQUIRE(ncclGroupStart() == ncclSuccess);
    for (int r = 0; r < n; ++r)
      REQUIRE(ncclAllReduce(buf[r].data(), buf[r].data(), count, ncclFloat, ncclSum, comms[r], streamOf(r)) == ncclSuccess);
    REQUIRE(ncclGroupEnd() == ncclSuccess);
    for (auto comm : comms) sync(comm);
    for (int r = 0; r < n; ++r) {
      for (size_t i : {size_t(0), size_t(12345), count - 1}) {
        float want = 0;
        for (int q = 0; q < n; ++q) want += input(q, i);
        CHECK(buf[r][i] == want);
      }
    }
    // Sends and receives to every other rank: 6 connections' queues a rank, on a block each
    // within the same cap (exact: rank r's block to q is r * 100 + q, everywhere).
    test::EmulatedDevice::maxPeerBlocks = 0;
    const size_t block = 1000;
    std::vector<std::vector<int32_t>> sent(n, std::vector<int32_t>(n * block)), got(n, std::vector<int32_t>(n * block, -1));
    for (int r = 0; r < n; ++r)
      for (int q = 0; q < n; ++q) std::fill_n(sent[r].begin() + q * block, block, r * 100 + q);
    REQUIRE(ncclGroupStart() == ncclSuccess);
    for (int r = 0; r < n; ++r) {
      for (int q = 0; q < n; ++q) {
        if (q == r) continue;
        REQUIRE(ncclSend(sent[r].data() + q * block, block, ncclInt32, q, comms[r], streamOf(r)) == ncclSuccess);
        REQUIRE(ncclRecv(got[r].data() + q * block, block, ncclInt32, q, comms[r], streamOf(r)) == ncclSuccess);
      }
    }
    REQUIRE(ncclGroupEnd() == ncclSuccess);
    for (auto comm : comms) sync(comm);
    for (int r = 0; r < n; ++r) {
      for (int q = 0; q < n; ++q) {
        if (q == r) continue;
        CHECK(got[r][q * block] == q * 100 + r);
        CHECK(got[r][q * block + block - 1] == q * 100 + r);
      }
    }
    for (auto comm : comms) REQUIRE(ncclCommDestroy(comm) == ncclSuccess);
    return std::make_pair(test::EmulatedDevice::maxLaunchChannels.load(), test::EmulatedDevice::maxPeerBlocks.load());
  };
  test::EmulatedDevice::badPeerBlocks = 0;
  const auto [small, smallPeers] = largest(8, 0);
  CHECK(small == 2);       // 8 blocks over 4 ranks
  CHECK(smallPeers == 2);  // the peer launches within the same share
  const auto [big, bigPeers] = largest(1024, 0);
  CHECK(big > 2);          // the cap, not the tuner, held the first one down
  CHECK(bigPeers == 2 * (n - 1));  // a block per connection: a send and a receive to each other rank
  CHECK(largest(1024, 5).first >= 5);  // a minimum within the share is kept
  CHECK(largest(6, 4).first == 1);     // a minimum beyond it gives way (with a warning)
  CHECK(test::EmulatedDevice::badPeerBlocks == 0);
  test::EmulatedDevice::residentBlocksAll = 1024;
}

TEST_CASE("emulated GPU: 8, 16 and 32 channels' work in the launch's parameters (the large block), or in memory "
          "beyond 4 KiB on an old driver, exact either way", "[integration][emulated]") {
  Emulated emulated;
  const int n = 2;
  const size_t count = size_t(1) << 20;
  // run: the most channels a launch had and how many launches were packed, the config asking
  // for `channels` channels exactly and the device packing up to `limit` bytes.
  auto run = [&](int channels, size_t limit) {
    test::EmulatedDevice::inlineLimit = limit;
    test::EmulatedDevice::maxLaunchChannels = 0;
    test::EmulatedDevice::packedLaunches = 0;
    std::vector<ncclComm_t> comms = initComms(n, channels, channels);
    std::vector<std::vector<float>> buf(n, std::vector<float>(count));
    for (int round = 0; round < 2; ++round) {
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i) buf[r][i] = input(r + round, i);
      REQUIRE(ncclGroupStart() == ncclSuccess);
      for (int r = 0; r < n; ++r)
        REQUIRE(ncclAllReduce(buf[r].data(), buf[r].data(), count, ncclFloat, ncclSum, comms[r], streamOf(r)) == ncclSuccess);
      REQUIRE(ncclGroupEnd() == ncclSuccess);
      for (auto comm : comms) sync(comm);
      int wrong = 0;
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i) wrong += buf[r][i] != input(round, i) + input(1 + round, i);
      CHECK(wrong == 0);
    }
    for (auto comm : comms) REQUIRE(ncclCommDestroy(comm) == ncclSuccess);
    return std::make_pair(test::EmulatedDevice::maxLaunchChannels.load(), test::EmulatedDevice::packedLaunches.load());
  };
  for (int channels : {8, 16, 32}) {
    INFO(channels << " channels");
    const auto [large, packedLarge] = run(channels, kernels::kInlineArgBytes);
    CHECK(large == channels);
    CHECK(packedLarge >= 2);  // every AllReduce's launch, in the parameters
    const auto [small, packedSmall] = run(channels, kernels::kSmallInlineArgBytes);
    CHECK(small == channels);
    if (channels > 8) CHECK(packedSmall == 0);  // (beyond 4 KiB: through memory, as before)
  }
  test::EmulatedDevice::inlineLimit = kernels::kInlineArgBytes;
}
