// The NCCL 2.29/2.30 host calls that are not collectives: communicator properties, a window's
// pointers (own and peers'), and the entry points that are argument-checked but not
// implemented yet (growth's NULL id); one-sided operations' checks (rma_test.cc has the rest). 1 and 2 ranks, as threads and as processes.
// (Suspend and resume: suspend_test.cc.)
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>
#include <string>

#include "harness/ranks.h"
#include "test_env.h"

using braid::test::expect;

extern "C" {
// NVIDIA declares these in nccl_device/core.h (2.30.7); the layouts are NVIDIA's.
typedef struct {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int rank, nRanks, cudaDev, nvmlDev;
  bool deviceApiSupport, multimemSupport;
  int ginType;
  int nLsaTeams;
  bool hostRmaSupport;
  int railedGinType;
} TestCommProperties;
typedef struct {
  void* mcBasePtr;
} TestMultimemHandle;
typedef struct {
  int nRanks, rank, stride;
} TestTeam;
ncclResult_t ncclCommQueryProperties(ncclComm_t comm, TestCommProperties* props);
ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void** outPtr);
ncclResult_t ncclGetLsaDevicePointer(ncclWindow_t window, size_t offset, int lsaRank, void** outPtr);
ncclResult_t ncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset, void** outPtr);
ncclResult_t ncclGetMultimemDevicePointer(ncclWindow_t window, size_t offset, TestMultimemHandle multimem,
                                          void** outPtr);
ncclResult_t ncclGinOutboxCreateRequirement(int nBlocks, int size_log2, void* outHandle, void* outReq);
ncclResult_t ncclGinInboxA2ACreateRequirement(TestTeam peers, int nBlocks, int size_log2, void* outHandle,
                                              void* outReq);
}

namespace {

constexpr size_t kWindowBytes = 8192;

std::string lastError() { return ncclGetLastError(nullptr); }

bool says(const std::string& text) { return lastError().find(text) != std::string::npos; }

/// Expects `call` to return `code` with a last-error text containing `text`.
void expectFailure(ncclResult_t result, ncclResult_t code, const std::string& text, const std::string& what) {
  expect(result == code && says(text), what + ": result " + std::to_string(result) + ", text '" + lastError() + "'");
}

/// n ranks (threads, then processes), each with a communicator and an 8 KiB buffer from ncclMemAlloc.
std::string withRanks(int n, const std::function<void(int, ncclComm_t, char*, bool threads)>& body) {
  return braid::test::withCommunicators(n, [&body](int rank, ncclComm_t comm, bool threads) {
    void* buffer = nullptr;
    EXPECT_OK(ncclMemAlloc(&buffer, kWindowBytes));
    body(rank, comm, static_cast<char*>(buffer), threads);
    EXPECT_OK(ncclMemFree(buffer));
  });
}

/// A barrier: an AllReduce of one int (the host backend completes it before returning).
void barrier(ncclComm_t comm) {
  int in = 1, out = 0;
  EXPECT_OK(ncclAllReduce(&in, &out, 1, ncclInt32, ncclSum, comm, nullptr));
}

}  // namespace

TEST_CASE("ncclCommQueryProperties reports what Braid knows and checks its struct", "[integration][api230]") {
  for (const int n : {1, 2}) {
    INFO(n << " ranks");
    CHECK(withRanks(n, [n](int rank, ncclComm_t comm, char*, bool) {
            TestCommProperties p;
            std::memset(&p, 0x5a, sizeof p);
            p.size = sizeof p;
            p.magic = NCCL_API_MAGIC;
            p.version = NCCL_VERSION_CODE;
            EXPECT_OK(ncclCommQueryProperties(comm, &p));
            expect(p.rank == rank && p.nRanks == n, "rank " + std::to_string(p.rank) + " of " + std::to_string(p.nRanks));
            expect(p.cudaDev == -1 && p.nvmlDev == -1, "host backend: no device");
            expect(!p.deviceApiSupport && !p.multimemSupport, "no device API, no multimem yet");
            expect(p.hostRmaSupport, "one-sided calls between the ranks of one host (host backend)");
            expect(p.ginType == 0 && p.railedGinType == 0, "no GIN");
            expect(p.nLsaTeams == 1, "one host, one load/store team: " + std::to_string(p.nLsaTeams));
            expect(p.size == sizeof p && p.magic == NCCL_API_MAGIC && p.version == NCCL_VERSION_CODE,
                   "the header fields are the caller's");

            // A 2.29.2 caller's 40-byte struct: its one-byte ginType is written, nothing after it.
            unsigned char old[64];
            std::memset(old, 0x77, sizeof old);
            TestCommProperties* o = reinterpret_cast<TestCommProperties*>(old);
            o->size = 40;
            o->magic = NCCL_API_MAGIC;
            o->version = NCCL_VERSION(2, 29, 2);
            EXPECT_OK(ncclCommQueryProperties(comm, o));
            expect(o->rank == rank && old[34] == 0, "2.29.2 layout filled");
            for (size_t i = 35; i < sizeof old; ++i) expect(old[i] == 0x77, "byte " + std::to_string(i) + " written");

            p.magic = 0;
            expectFailure(ncclCommQueryProperties(comm, &p), ncclInvalidUsage, "NCCL_COMM_PROPERTIES_INITIALIZER",
                          "magic 0");
            p.magic = NCCL_API_MAGIC;
            p.version = NCCL_VERSION(2, 28, 9);
            expectFailure(ncclCommQueryProperties(comm, &p), ncclInvalidUsage, "props->version is 22809", "2.28.9");
            p.version = NCCL_VERSION(2, 31, 0);  // a newer header than the library (NCCL_ENABLE_VERSION_CHECK=1)
            expectFailure(ncclCommQueryProperties(comm, &p), ncclInvalidUsage, "NCCL_ENABLE_VERSION_CHECK=0",
                          "newer header");
            expectFailure(ncclCommQueryProperties(comm, nullptr), ncclInvalidArgument, "props is NULL", "NULL props");
            expectFailure(ncclCommQueryProperties(nullptr, &p), ncclInvalidArgument, "comm is NULL", "NULL comm");
          }) == "");
  }
}

TEST_CASE("a window's pointers: the user's, and peers' where Braid maps them", "[integration][api230]") {
  for (const int n : {1, 2}) {
    INFO(n << " ranks");
    CHECK(withRanks(n, [n](int rank, ncclComm_t comm, char* buffer, bool) {
            for (size_t i = 0; i < kWindowBytes; ++i) buffer[i] = static_cast<char>(rank * 16 + i % 16);
            ncclWindow_t win = nullptr;
            EXPECT_OK(ncclCommWindowRegister(comm, buffer, kWindowBytes, &win, NCCL_WIN_STRICT_ORDERING));
            void* user = nullptr;
            EXPECT_OK(ncclWinGetUserPtr(comm, win, &user));
            expect(user == buffer, "ncclWinGetUserPtr gives the registered buffer");
            expectFailure(ncclWinGetUserPtr(comm, win, nullptr), ncclInvalidArgument, "outUserPtr is NULL", "NULL out");
            expectFailure(ncclWinGetUserPtr(comm, nullptr, &user), ncclInvalidArgument, "win is NULL", "NULL win");
            expectFailure(ncclWinGetUserPtr(nullptr, win, &user), ncclInvalidArgument, "comm is NULL", "NULL comm");

            for (int peer = 0; peer < n; ++peer) {
              void* p = nullptr;
              const ncclResult_t r = ncclGetPeerDevicePointer(win, 100, peer, &p);
              {  // (threads address each other; processes map ncclMemAlloc's memory)
                expect(r == ncclSuccess, "peer " + std::to_string(peer) + ": " + lastError());
                // The byte at offset 100 of the peer's window, as the peer wrote it.
                expect(*static_cast<char*>(p) == static_cast<char>(peer * 16 + 100 % 16), "peer's data readable");
                void* lsa = nullptr;
                EXPECT_OK(ncclGetLsaDevicePointer(win, 100, peer, &lsa));  // one host: LSA rank = world rank
                expect(lsa == p, "LSA and world pointers agree");
              }
            }
            void* p = nullptr;
            expectFailure(ncclGetPeerDevicePointer(win, kWindowBytes, rank, &p), ncclInvalidArgument,
                          "offset is 8192; the window has 8192 bytes", "offset past the end");
            expectFailure(ncclGetPeerDevicePointer(win, 0, n, &p), ncclInvalidArgument,
                          "peer is " + std::to_string(n), "peer out of range");
            expectFailure(ncclGetPeerDevicePointer(win, 0, -1, &p), ncclInvalidArgument, "peer is -1", "peer -1");
            expectFailure(ncclGetLsaDevicePointer(win, 0, n, &p), ncclInvalidArgument, "lsaRank is", "lsaRank");
            expectFailure(ncclGetPeerDevicePointer(nullptr, 0, 0, &p), ncclInvalidArgument, "window is NULL", "NULL");
            expectFailure(ncclGetPeerDevicePointer(win, 0, 0, nullptr), ncclInvalidArgument, "outPtr is NULL", "NULL");

            // No multimem, no GIN: said plainly.
            expectFailure(ncclGetLsaMultimemDevicePointer(win, 0, &p), ncclInvalidUsage, "multimem", "LSA multimem");
            TestMultimemHandle mm = {buffer};
            expectFailure(ncclGetMultimemDevicePointer(win, 0, mm, &p), ncclInvalidUsage, "multimem", "multimem");
            char handle[64], req[128];
            expectFailure(ncclGinOutboxCreateRequirement(1, 12, handle, req), ncclInvalidUsage,
                          "GPU-initiated networking", "GIN outbox");
            expectFailure(ncclGinInboxA2ACreateRequirement(TestTeam{n, rank, 1}, 1, 12, handle, req),
                          ncclInvalidUsage, "GPU-initiated networking", "GIN inbox");

            barrier(comm);  // every peer has read before windows go
            EXPECT_OK(ncclCommWindowDeregister(comm, win));
            expectFailure(ncclGetPeerDevicePointer(win, 0, rank, &p), ncclInvalidArgument, "not a live window",
                          "deregistered window");
          }) == "");
  }
}

TEST_CASE("one-sided operations: checked, then real (rma_test.cc: the rest)",
          "[integration][api230]") {
  CHECK(withRanks(2, [](int rank, ncclComm_t comm, char* buffer, bool) {
          ncclWindow_t win = nullptr;
          EXPECT_OK(ncclCommWindowRegister(comm, buffer, kWindowBytes, &win, NCCL_WIN_DEFAULT));
          const int peer = 1 - rank;
          expectFailure(ncclPutSignal(buffer, 4, ncclFloat32, 2, win, 0, 0, 0, 0, comm, nullptr), ncclInvalidArgument,
                        "peer is 2; ranks are 0..1", "put peer");
          expectFailure(ncclPutSignal(nullptr, 4, ncclFloat32, peer, win, 0, 0, 0, 0, comm, nullptr),
                        ncclInvalidArgument, "localbuff is NULL", "put buffer");
          expectFailure(ncclPutSignal(buffer, 4, static_cast<ncclDataType_t>(99), peer, win, 0, 0, 0, 0, comm, nullptr),
                        ncclInvalidArgument, "datatype is 99", "put type");
          expectFailure(ncclPutSignal(buffer, 4, ncclFloat32, peer, nullptr, 0, 0, 0, 0, comm, nullptr),
                        ncclInvalidArgument, "peerWin is NULL", "put window");
          expectFailure(ncclPutSignal(buffer, 4, ncclFloat32, peer, win, 0, 0, 1, 0, comm, nullptr),
                        ncclInvalidArgument, "ctx is 1; the communicator has 1 contexts", "put ctx");
          expectFailure(ncclPutSignal(buffer, 4, ncclFloat32, peer, win, 0, -1, 0, 0, comm, nullptr),
                        ncclInvalidArgument, "sigIdx is -1", "put sigIdx");
          expectFailure(ncclPutSignal(buffer, 4, ncclFloat32, peer, win, 0, 0, 0, 8, comm, nullptr),
                        ncclInvalidArgument, "flags is 0x8", "put flags");
          EXPECT_OK(ncclPutSignal(buffer, 4, ncclFloat32, peer, win, 0, 0, 0, 0, comm, nullptr));
          expectFailure(ncclSignal(-1, 0, 0, 0, comm, nullptr), ncclInvalidArgument, "peer is -1", "signal peer");
          EXPECT_OK(ncclSignal(peer, 0, 0, 0, comm, nullptr));
          ncclWaitSignalDesc_t desc = {2, peer, 0, 0};  // (the put's signal and the signal's)
          expectFailure(ncclWaitSignal(-1, &desc, comm, nullptr), ncclInvalidArgument, "nDesc is -1", "wait n");
          expectFailure(ncclWaitSignal(1, nullptr, comm, nullptr), ncclInvalidArgument, "signalDescs is NULL", "wait");
          ncclWaitSignalDesc_t badDesc = {1, 5, 0, 0};
          expectFailure(ncclWaitSignal(1, &badDesc, comm, nullptr), ncclInvalidArgument, "signalDescs[0].peer is 5",
                        "wait peer");
          EXPECT_OK(ncclWaitSignal(1, &desc, comm, nullptr));
          EXPECT_OK(ncclCommWindowDeregister(comm, win));

          expectFailure(ncclCommGetUniqueId(comm, nullptr), ncclInvalidArgument, "uniqueId is NULL", "grow id");
        }) == "");
}
