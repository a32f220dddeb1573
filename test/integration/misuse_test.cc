// API misuse sweep: every entry point that takes a communicator, called with each kind of
// invalid argument, returns ncclInvalidArgument and a last-error text that names the function,
// the argument and (where there is one) the bad value, and moves nothing.
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "harness/ranks.h"

namespace {

struct Misuse {
  std::string what;
  std::function<ncclResult_t()> call;
  std::vector<std::string> mentions;  ///< the last-error text must contain each
};

}  // namespace

TEST_CASE("API misuse sweep: each invalid argument of each entry point is named", "[integration][misuse]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comm = nullptr;
  REQUIRE(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess);
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  // 13 is no type, yet inside the C++ value range of ncclDataType_t (0..15): a value outside
  // that range is undefined behaviour in C++ before Braid could look at it (UBSan says so).
  const ncclDataType_t badType = static_cast<ncclDataType_t>(13);
  const ncclRedOp_t badOp = static_cast<ncclRedOp_t>(77);
  int n = 0;
  ncclResult_t async = ncclSuccess;
  std::vector<Misuse> cases = {
      // Collectives: NULL communicator, NULL buffers with a count, bad type, bad op, bad root.
      {"AllReduce comm", [&] { return ncclAllReduce(x, x, 4, ncclFloat, ncclSum, nullptr, nullptr); }, {"ncclAllReduce", "comm is NULL"}},
      {"AllReduce sendbuff", [&] { return ncclAllReduce(nullptr, x, 4, ncclFloat, ncclSum, comm, nullptr); }, {"ncclAllReduce", "sendbuff", "NULL"}},
      {"AllReduce recvbuff", [&] { return ncclAllReduce(x, nullptr, 4, ncclFloat, ncclSum, comm, nullptr); }, {"ncclAllReduce", "recvbuff", "NULL"}},
      {"AllReduce datatype", [&] { return ncclAllReduce(x, x, 4, badType, ncclSum, comm, nullptr); }, {"ncclAllReduce", "datatype", "13"}},
      {"AllReduce op", [&] { return ncclAllReduce(x, x, 4, ncclFloat, badOp, comm, nullptr); }, {"ncclAllReduce", "op", "77"}},
      {"Reduce root", [&] { return ncclReduce(x, x, 4, ncclFloat, ncclSum, 3, comm, nullptr); }, {"ncclReduce", "root", "3"}},
      {"Reduce op", [&] { return ncclReduce(x, x, 4, ncclFloat, badOp, 0, comm, nullptr); }, {"ncclReduce", "op", "77"}},
      {"Reduce datatype", [&] { return ncclReduce(x, x, 4, badType, ncclSum, 0, comm, nullptr); }, {"ncclReduce", "datatype", "13"}},
      {"Broadcast root", [&] { return ncclBroadcast(x, x, 4, ncclFloat, -2, comm, nullptr); }, {"ncclBroadcast", "root", "-2"}},
      {"Broadcast datatype", [&] { return ncclBroadcast(x, x, 4, badType, 0, comm, nullptr); }, {"ncclBroadcast", "datatype", "13"}},
      {"Broadcast recvbuff", [&] { return ncclBroadcast(x, nullptr, 4, ncclFloat, 0, comm, nullptr); }, {"ncclBroadcast", "recvbuff", "NULL"}},
      {"Bcast root", [&] { return ncclBcast(x, 4, ncclFloat, 5, comm, nullptr); }, {"root", "5"}},
      {"Bcast comm", [&] { return ncclBcast(x, 4, ncclFloat, 0, nullptr, nullptr); }, {"comm is NULL"}},
      {"AllGather sendbuff", [&] { return ncclAllGather(nullptr, x, 4, ncclFloat, comm, nullptr); }, {"ncclAllGather", "sendbuff", "NULL"}},
      {"AllGather datatype", [&] { return ncclAllGather(x, x, 4, badType, comm, nullptr); }, {"ncclAllGather", "datatype", "13"}},
      {"AllGather comm", [&] { return ncclAllGather(x, x, 4, ncclFloat, nullptr, nullptr); }, {"ncclAllGather", "comm is NULL"}},
      {"ReduceScatter recvbuff", [&] { return ncclReduceScatter(x, nullptr, 4, ncclFloat, ncclSum, comm, nullptr); }, {"ncclReduceScatter", "recvbuff", "NULL"}},
      {"ReduceScatter op", [&] { return ncclReduceScatter(x, x, 4, ncclFloat, badOp, comm, nullptr); }, {"ncclReduceScatter", "op", "77"}},
      {"AlltoAll datatype", [&] { return ncclAlltoAll(x, x, 4, badType, comm, nullptr); }, {"ncclAlltoAll", "datatype", "13"}},
      {"AlltoAll sendbuff", [&] { return ncclAlltoAll(nullptr, x, 4, ncclFloat, comm, nullptr); }, {"ncclAlltoAll", "sendbuff", "NULL"}},
      {"Gather root", [&] { return ncclGather(x, x, 4, ncclFloat, 9, comm, nullptr); }, {"ncclGather", "root", "9"}},
      {"Gather datatype", [&] { return ncclGather(x, x, 4, badType, 0, comm, nullptr); }, {"ncclGather", "datatype", "13"}},
      {"Scatter root", [&] { return ncclScatter(x, x, 4, ncclFloat, -1, comm, nullptr); }, {"ncclScatter", "root", "-1"}},
      {"Scatter recvbuff", [&] { return ncclScatter(x, nullptr, 4, ncclFloat, 0, comm, nullptr); }, {"ncclScatter", "recvbuff", "NULL"}},
      {"Send peer", [&] { return ncclSend(x, 4, ncclFloat, 1, comm, nullptr); }, {"ncclSend", "peer", "1"}},
      {"Send datatype", [&] { return ncclSend(x, 4, badType, 0, comm, nullptr); }, {"ncclSend", "datatype", "13"}},
      {"Send sendbuff", [&] { return ncclSend(nullptr, 4, ncclFloat, 0, comm, nullptr); }, {"ncclSend", "NULL"}},
      {"Recv peer", [&] { return ncclRecv(x, 4, ncclFloat, -7, comm, nullptr); }, {"ncclRecv", "peer", "-7"}},
      {"Recv recvbuff", [&] { return ncclRecv(nullptr, 4, ncclFloat, 0, comm, nullptr); }, {"ncclRecv", "NULL"}},
      // Queries and communicator calls: NULL outputs and handles.
      {"CommCount count", [&] { return ncclCommCount(comm, nullptr); }, {"ncclCommCount", "count"}},
      {"CommCount comm", [&] { return ncclCommCount(nullptr, &n); }, {"ncclCommCount", "comm is NULL"}},
      {"CommUserRank rank", [&] { return ncclCommUserRank(comm, nullptr); }, {"ncclCommUserRank", "rank"}},
      {"CommCuDevice device", [&] { return ncclCommCuDevice(comm, nullptr); }, {"ncclCommCuDevice", "device"}},
      {"CommGetAsyncError out", [&] { return ncclCommGetAsyncError(comm, nullptr); }, {"ncclCommGetAsyncError", "asyncError"}},
      {"CommGetAsyncError comm", [&] { return ncclCommGetAsyncError(nullptr, &async); }, {"ncclCommGetAsyncError", "comm is NULL"}},
      {"CommInitRank comm", [&] { return ncclCommInitRank(nullptr, 1, id, 0); }, {"ncclCommInitRank", "comm"}},
      {"CommInitRank nranks", [&] { ncclComm_t c; return ncclCommInitRank(&c, 0, id, 0); }, {"ncclCommInitRank", "nranks", "0"}},
      {"CommInitRank rank", [&] { ncclComm_t c; return ncclCommInitRank(&c, 2, id, 5); }, {"ncclCommInitRank", "rank", "5"}},
      {"CommSplit newcomm", [&] { return ncclCommSplit(comm, 0, 0, nullptr, nullptr); }, {"ncclCommSplit", "newcomm"}},
      {"RedOpCreatePreMulSum op", [&] { float s = 1; return ncclRedOpCreatePreMulSum(nullptr, &s, ncclFloat, ncclScalarHostImmediate, comm); }, {"ncclRedOpCreatePreMulSum", "op"}},
      {"RedOpCreatePreMulSum datatype", [&] { float s = 1; ncclRedOp_t o; return ncclRedOpCreatePreMulSum(&o, &s, badType, ncclScalarHostImmediate, comm); }, {"ncclRedOpCreatePreMulSum", "datatype", "13"}},
      {"RedOpDestroy op", [&] { return ncclRedOpDestroy(ncclSum, comm); }, {"ncclRedOpDestroy", "op"}},
      {"GetUniqueId out", [&] { return ncclGetUniqueId(nullptr); }, {"ncclGetUniqueId", "uniqueId"}},
      {"GetVersion out", [&] { return ncclGetVersion(nullptr); }, {"ncclGetVersion", "version"}},
      {"MemAlloc ptr", [&] { return ncclMemAlloc(nullptr, 64); }, {"ncclMemAlloc", "ptr"}},
  };
  for (const Misuse& m : cases) {
    INFO(m.what);
    const ncclResult_t r = m.call();
    const std::string text = ncclGetLastError(nullptr);
    INFO(text);
    CHECK(r == ncclInvalidArgument);
    for (const std::string& word : m.mentions) CHECK_THAT(text, Catch::Contains(word));
  }
  for (int i = 0; i < 8; ++i) CHECK(x[i] == static_cast<float>(i + 1));  // nothing moved
  ncclResult_t state = ncclInternalError;
  REQUIRE(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
  CHECK(state == ncclSuccess);  // argument errors are the caller's, not the communicator's
  REQUIRE(ncclCommDestroy(comm) == ncclSuccess);
}

namespace {

/// A one-rank communicator of this process (destroyed by the caller).
ncclComm_t oneRank() {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comm = nullptr;
  REQUIRE(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess);
  return comm;
}

}  // namespace

TEST_CASE("partly overlapping send and receive buffers are refused, naming both ranges; in-place forms are not",
          "[integration][misuse]") {
  ncclComm_t comm = oneRank();
  float b[64];
  for (int i = 0; i < 64; ++i) b[i] = static_cast<float>(i);
  struct Overlap {
    std::string what;
    std::function<ncclResult_t()> call;
    std::string name;
  };
  const std::vector<Overlap> refused = {
      {"AllReduce", [&] { return ncclAllReduce(b, b + 1, 4, ncclFloat, ncclSum, comm, nullptr); }, "ncclAllReduce"},
      {"AllReduce backwards", [&] { return ncclAllReduce(b + 3, b, 4, ncclFloat, ncclSum, comm, nullptr); }, "ncclAllReduce"},
      {"Reduce", [&] { return ncclReduce(b, b + 2, 4, ncclFloat, ncclSum, 0, comm, nullptr); }, "ncclReduce"},
      {"Broadcast", [&] { return ncclBroadcast(b, b + 3, 4, ncclFloat, 0, comm, nullptr); }, "ncclBroadcast"},
      {"AllGather", [&] { return ncclAllGather(b + 1, b, 4, ncclFloat, comm, nullptr); }, "ncclAllGather"},
      {"ReduceScatter", [&] { return ncclReduceScatter(b, b + 1, 4, ncclFloat, ncclSum, comm, nullptr); }, "ncclReduceScatter"},
      {"AlltoAll", [&] { return ncclAlltoAll(b, b + 2, 4, ncclFloat, comm, nullptr); }, "ncclAlltoAll"},
      {"Gather", [&] { return ncclGather(b + 1, b, 4, ncclFloat, 0, comm, nullptr); }, "ncclGather"},
      {"Scatter", [&] { return ncclScatter(b, b + 1, 4, ncclFloat, 0, comm, nullptr); }, "ncclScatter"},
  };
  for (const Overlap& o : refused) {
    INFO(o.what);
    CHECK(o.call() == ncclInvalidArgument);
    const std::string text = ncclGetLastError(nullptr);
    INFO(text);
    CHECK_THAT(text, Catch::Contains(o.name) && Catch::Contains("sendbuff 0x") && Catch::Contains("recvbuff 0x") &&
                         Catch::Contains("overlap"));
  }
  for (int i = 0; i < 64; ++i) CHECK(b[i] == static_cast<float>(i));  // nothing moved
  // The same buffer, and adjacent ones, are fine.
  CHECK(ncclAllReduce(b, b, 4, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess);
  CHECK(ncclAllReduce(b, b + 4, 4, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess);
  CHECK(ncclBroadcast(b + 8, b + 4, 4, ncclFloat, 0, comm, nullptr) == ncclSuccess);
  CHECK(ncclAllGather(b, b, 4, ncclFloat, comm, nullptr) == ncclSuccess);
  CHECK(ncclReduceScatter(b, b, 4, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess);
  CHECK(ncclAlltoAll(b, b, 4, ncclFloat, comm, nullptr) == ncclSuccess);
  REQUIRE(ncclCommDestroy(comm) == ncclSuccess);

  // Two ranks: the in-place forms of AllGather and ReduceScatter (a rank's block) work; another
  // block of the same buffer is refused on both ranks before anything moves.
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  const std::string failures = braid::test::runThreads(2, [&](int rank) {
    ncclComm_t c = nullptr;
    braid::test::expect(ncclCommInitRank(&c, 2, id, rank) == ncclSuccess, "init");
    std::vector<float> gather(8, -1.0f), scatter(8);
    for (int i = 0; i < 4; ++i) gather[rank * 4 + i] = static_cast<float>(10 * rank + i);
    for (int i = 0; i < 8; ++i) scatter[i] = static_cast<float>(i);
    braid::test::expect(ncclAllGather(gather.data() + 4 * (1 - rank), gather.data(), 4, ncclFloat, c, nullptr) ==
                            ncclInvalidArgument, "another rank's block refused");
    braid::test::expect(ncclReduceScatter(scatter.data(), scatter.data() + 4 * (1 - rank), 4, ncclFloat, ncclSum, c,
                                          nullptr) == ncclInvalidArgument, "another rank's block refused");
    braid::test::expect(ncclAllGather(gather.data() + 4 * rank, gather.data(), 4, ncclFloat, c, nullptr) == ncclSuccess,
                        "in-place AllGather");
    for (int i = 0; i < 8; ++i) braid::test::expect(gather[i] == static_cast<float>(10 * (i / 4) + i % 4), "AllGather data");
    braid::test::expect(ncclReduceScatter(scatter.data(), scatter.data() + 4 * rank, 4, ncclFloat, ncclSum, c, nullptr) ==
                            ncclSuccess, "in-place ReduceScatter");
    for (int i = 0; i < 4; ++i) {
      braid::test::expect(scatter[4 * rank + i] == 2.0f * static_cast<float>(4 * rank + i), "ReduceScatter data");
    }
    braid::test::expect(ncclCommDestroy(c) == ncclSuccess, "destroy");
  });
  CHECK(failures == "");
}

TEST_CASE("ncclGetLastError(comm) gives the communicator's last failure to any thread", "[integration][misuse]") {
  ncclComm_t comm = oneRank();
  float x[8] = {}, y[8] = {};
  const ncclDataType_t badType = static_cast<ncclDataType_t>(13);
  // A call that fails on its argument, in another thread.
  std::thread([&] { CHECK(ncclAllReduce(x, y, 4, badType, ncclSum, comm, nullptr) == ncclInvalidArgument); }).join();
  CHECK_THAT(std::string(ncclGetLastError(comm)), Catch::Contains("ncclAllReduce") && Catch::Contains("datatype"));
  // A group that fails when it runs (ncclGroupEnd has no communicator argument).
  std::thread([&] {
    CHECK(ncclGroupStart() == ncclSuccess);
    CHECK(ncclSend(x, 4, ncclFloat, 0, comm, nullptr) == ncclSuccess);
    CHECK(ncclRecv(y, 2, ncclFloat, 0, comm, nullptr) == ncclSuccess);
    CHECK(ncclGroupEnd() == ncclInvalidUsage);
    CHECK_THAT(std::string(ncclGetLastError(nullptr)), Catch::Contains("to itself"));
  }).join();
  const std::string text = ncclGetLastError(comm);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("sends 16 bytes to itself but receives 8"));
  CHECK(std::string(ncclGetLastError(nullptr)).find("to itself") == std::string::npos);  // (this thread's own)
  REQUIRE(ncclCommDestroy(comm) == ncclSuccess);
}
