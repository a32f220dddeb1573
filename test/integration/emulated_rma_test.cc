// One-sided operations on the CUDA backend's path, on a GPU played by the CPU (emulated_device.h):
// ncclPutSignal, ncclSignal and ncclWaitSignal are enqueued on the stream. Puts of 0, 1, odd and
// large sizes land exactly between threads and between processes (windows on memory the
// emulated device shares, as ncclMemAlloc's on a GPU); a put carries what a kernel before it
// on the stream wrote; a wait returns to the host at once and holds the stream, so a
// collective after it reads what the puts brought; an abort ends a stream wait; bad input is
// refused as on the host backend. What only a GPU runs (the kernels, pinned counters, CUDA IPC)
// is the gpu suite's; their PTX is checked at build time.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/init.h"
#include "datapath/data_path.h"
#include "harness/ranks.h"
#include "integration/emulated_device.h"
#include "integration/emulated_scope.h"
#include "integration/test_env.h"

// (declared in NCCL's device-API header, nccl_device.h, which Braid does not ship)
extern "C" ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void** outPtr);

using namespace braid;
using braid::test::expect;

namespace {

using test::Emulated;
using test::streamOf;
using test::sync;

constexpr int kContexts = 2;

std::string lastError() { return ncclGetLastError(nullptr); }

void expectFailure(ncclResult_t result, ncclResult_t code, const std::string& text, const std::string& what) {
  expect(result == code && lastError().find(text) != std::string::npos,
         what + ": result " + std::to_string(result) + ", text '" + lastError() + "'");
}

/// n ranks (threads or processes) on the emulated device, each with a communicator of kContexts
/// contexts and a zeroed window of `bytes` in memory the device shares with other processes.
std::string withWindows(int n, bool threads, size_t bytes,
                        const std::function<void(int, ncclComm_t, ncclWindow_t, char*)>& body) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return "ncclGetUniqueId failed";
  auto rankBody = [id, n, bytes, body](int rank) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.numRmaCtx = kContexts;
    ncclComm_t comm = nullptr;
    EXPECT_OK(ncclCommInitRankConfig(&comm, n, id, rank, &config));
    expect(comm->dataPath().onDevice(), "the communicator runs on the emulated device");
    void* buffer = test::EmulatedDevice::allocateShareable(bytes);
    std::memset(buffer, 0, bytes);
    ncclWindow_t win = nullptr;
    EXPECT_OK(ncclCommWindowRegister(comm, buffer, bytes, &win, NCCL_WIN_DEFAULT));
    body(rank, comm, win, static_cast<char*>(buffer));
    EXPECT_OK(ncclCommWindowDeregister(comm, win));
    EXPECT_OK(ncclCommDestroy(comm));
    test::EmulatedDevice::freeShareable(buffer);
  };
  return threads ? test::runThreads(n, rankBody) : test::runProcesses(n, rankBody);
}

}  // namespace

TEST_CASE("emulated GPU: one-sided puts of 0, 1, odd and large sizes land exactly, enqueued on the stream",
          "[integration][emulated][rma]") {
  Emulated emulated;
  const std::vector<size_t> sizes = {0, 1, 7, 4093, (1u << 20) + 3};
  size_t slot = 0;  // each sender's part of a window: the largest put
  for (size_t s : sizes) slot = std::max(slot, s);
  for (const int n : {2, 3}) {
    for (const bool threads : {true, false}) {
      INFO(n << " ranks, " << (threads ? "threads" : "processes"));
      CHECK(withWindows(n, threads, slot * n, [&](int rank, ncclComm_t comm, ncclWindow_t win, char* window) {
              for (int peer = 0; peer < n; ++peer) {  // (where Braid maps peers' windows: every rank here)
                void* p = nullptr;
                EXPECT_OK(ncclGetPeerDevicePointer(win, 0, peer, &p));
                expect(p != nullptr && (peer != rank || p == window), "rank " + std::to_string(peer) + "'s pointer");
              }
              test::expectPutsLandExactly(rank, n, comm, win, window, slot, sizes, kContexts, false);
            }) == "");
    }
  }
}

TEST_CASE("emulated GPU: a put carries what a kernel before it wrote; a wait holds the stream, not the host",
          "[integration][emulated][rma]") {
  Emulated emulated;
  const int n = 3;
  const size_t count = 100003;
  std::atomic<bool> waitReturned{false};
  CHECK(withWindows(n, true, count * sizeof(float), [&](int rank, ncclComm_t comm, ncclWindow_t win, char* window) {
          const cudaStream_t stream = streamOf(rank);
          // A collective fills the put's source on the stream (the emulated device runs it later,
          // on its own thread): the put, after it on the stream, carries its result. (A rank's
          // work runs in the order it was enqueued, whatever the stream, as on the CUDA backend.)
          test::expectPutsFollowStream(rank, n, comm, win, window, count);
          // Rank 0's wait for a signal that rank 1 sends only once that wait has returned to
          // the host: a host that blocked until the signal came would never return.
          if (rank == 0) {
            ncclWaitSignalDesc_t one = {1, 1, 0, 0};
            EXPECT_OK(ncclWaitSignal(1, &one, comm, stream));
            waitReturned.store(true);
            sync(comm);
            expect(comm->signalsIfMade()->arrivedCount(1, 0) == 1, "rank 1's signal on ctx 0");
          } else if (rank == 1) {
            const auto start = std::chrono::steady_clock::now();
            while (!waitReturned.load() && std::chrono::steady_clock::now() - start < std::chrono::seconds(30))
              std::this_thread::yield();
            expect(waitReturned.load(), "rank 0's ncclWaitSignal did not return before the signal was sent");
            EXPECT_OK(ncclSignal(0, 0, 0, 0, comm, stream));
            sync(comm);
          }
        }) == "");
}

TEST_CASE("emulated GPU: an abort ends a stream's wait for a signal nobody sends", "[integration][emulated][rma]") {
  Emulated emulated;
  CHECK(test::runThreads(1, [](int) {
          ncclUniqueId id;
          EXPECT_OK(ncclGetUniqueId(&id));
          ncclComm_t comm = nullptr;
          EXPECT_OK(ncclCommInitRank(&comm, 1, id, 0));
          void* buffer = test::EmulatedDevice::allocateShareable(4096);
          ncclWindow_t win = nullptr;
          EXPECT_OK(ncclCommWindowRegister(comm, buffer, 4096, &win, NCCL_WIN_STRICT_ORDERING));
          const int before = test::EmulatedDevice::oneSidedRuns.load();
          ncclWaitSignalDesc_t d = {1, 0, 0, 0};
          EXPECT_OK(ncclWaitSignal(1, &d, comm, streamOf(0)));  // (the host goes on)
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          expect(test::EmulatedDevice::oneSidedRuns.load() == before, "the wait ended without a signal");
          const auto start = std::chrono::steady_clock::now();
          EXPECT_OK(ncclCommAbort(comm));  // (raises the device's abort word, then waits for its work)
          const auto took = std::chrono::steady_clock::now() - start;
          expect(test::EmulatedDevice::oneSidedRuns.load() == before + 1, "the stream's wait did not end");
          expect(took < std::chrono::seconds(10), "the abort took " +
                 std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()) + " ms");
          test::EmulatedDevice::freeShareable(buffer);
        }) == "");
}

TEST_CASE("emulated GPU: one-sided bad input is refused as on the host backend, nothing enqueued",
          "[integration][emulated][rma]") {
  Emulated emulated;
  const size_t bytes = 65536;
  CHECK(withWindows(2, true, bytes, [&](int rank, ncclComm_t comm, ncclWindow_t win, char* window) {
          const cudaStream_t stream = streamOf(rank);
          const int peer = 1 - rank;
          const float four[4] = {1, 2, 3, 4};
          expectFailure(ncclPutSignal(four, 2, ncclFloat32, peer, win, bytes - 4, 0, 0, 0, comm, stream),
                        ncclInvalidArgument,
                        "the put of 8 bytes (count 2) at peerWinOffset 65532 does not fit the window of 65536 bytes",
                        "past the end");
          expectFailure(ncclPutSignal(four, SIZE_MAX / 2, ncclFloat32, peer, win, 0, 0, 0, 0, comm, stream),
                        ncclInvalidArgument, "is too large", "huge count");
          expectFailure(ncclPutSignal(nullptr, 1, ncclFloat32, peer, win, 0, 0, 0, 0, comm, stream),
                        ncclInvalidArgument, "localbuff", "null source");
          expectFailure(ncclPutSignal(four, 1, static_cast<ncclDataType_t>(99), peer, win, 0, 0, 0, 0, comm, stream),
                        ncclInvalidArgument, "datatype is 99", "datatype");
          expectFailure(ncclPutSignal(four, 1, ncclFloat32, peer, win, 0, 1, 0, 0, comm, stream), ncclInvalidArgument,
                        "sigIdx is 1", "sigIdx");
          expectFailure(ncclPutSignal(four, 1, ncclFloat32, peer, win, 0, 0, kContexts, 0, comm, stream),
                        ncclInvalidArgument, "ctx is 2; the communicator has 2 contexts", "ctx");
          expectFailure(ncclSignal(2, 0, 0, 0, comm, stream), ncclInvalidArgument, "peer is 2", "signal peer");
          expectFailure(ncclSignal(peer, 0, 0, 1, comm, stream), ncclInvalidArgument, "flags is 0x1", "signal flags");
          ncclWaitSignalDesc_t descs[2] = {{1, peer, 0, 0}, {-3, peer, 0, 0}};
          expectFailure(ncclWaitSignal(2, descs, comm, stream), ncclInvalidArgument, "signalDescs[1].opCnt is -3",
                        "opCnt < 0");
          ncclWaitSignalDesc_t far = {1, 5, 0, 0};
          expectFailure(ncclWaitSignal(1, &far, comm, stream), ncclInvalidArgument, "signalDescs[0].peer is 5", "peer");
          EXPECT_OK(ncclWaitSignal(0, nullptr, comm, stream));
          sync(comm);
          for (size_t i = 0; i < bytes; ++i) expect(window[i] == 0, "byte " + std::to_string(i) + " was written");
          // The refused wait consumed nothing: one signal satisfies a wait of one.
          EXPECT_OK(ncclSignal(peer, 0, 0, 0, comm, stream));
          ncclWaitSignalDesc_t one = {1, peer, 0, 0};
          EXPECT_OK(ncclWaitSignal(1, &one, comm, stream));
          sync(comm);
          expect(comm->signalsIfMade()->arrivedCount(peer, 0) == 1, "the signal's count");
        }) == "");
}
