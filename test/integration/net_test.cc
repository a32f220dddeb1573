// Ranks on different hosts, made on one machine: NCCL_HOSTID (separate programs), NCCL_SHM_DISABLE
// (processes of one host, as NCCL does it) or the connector's networkOnly option (threads).
// The collectives' sweep covers every function over sockets (collective_test.cc); here are
// point-to-point, failures, leaks and the transport's knobs. Suite netns runs the same across
// network namespaces.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "harness/ranks.h"
#include "proxy/proxy.h"
#include "runtime/host/data_path.h"
#include "test_env.h"

using namespace braid;
using braid::test::expect;

namespace {

/// Starts `ranks` copies of rank_main with `env` and each rank's NCCL_HOSTID=host<rank>.
std::string runPrograms(int ranks, const std::string& env, const std::string& args) {
  const char* program = std::getenv("BRAID_RANK_MAIN_EXE");
  if (program == nullptr) return "BRAID_RANK_MAIN_EXE is not set";
  const int port = test::freeLoopbackPort();
  std::string command = "export NCCL_COMM_ID=127.0.0.1:" + std::to_string(port) +
                        " NCCL_SOCKET_IFNAME=lo BRAID_BOOTSTRAP_TIMEOUT=20 " + env + "; ";
  for (int r = 0; r < ranks; ++r) {
    command += "NCCL_HOSTID=host" + std::to_string(r) + " timeout 60 " + program + " " + std::to_string(ranks) + " " +
               std::to_string(r) + " " + args + " & ";
  }
  return test::runCommand(command + "wait");
}

}  // namespace

TEST_CASE("point to point over sockets: ring shift, uneven sizes, LL and Simple sizes, both directions",
          "[integration][net][p2p]") {
  const int n = 3;
  auto makeBody = [&] {
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    return [id, n](int rank) {
      ncclComm_t comm = nullptr;
      EXPECT_OK(ncclCommInitRank(&comm, n, id, rank));
      comm->dataPath().connectorOptions().networkOnly = true;
      const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
      for (size_t size : {size_t(1), size_t(4096), size_t(3 << 20)}) {
        // Rank s sends size + s bytes forwards and size + 2s backwards: every length differs.
        auto fwd = [&](int s) { return size + s; };
        auto back = [&](int s) { return size + 2 * s; };
        std::vector<uint8_t> a(fwd(rank)), b(back(rank)), ra(fwd(prev)), rb(back(next));
        for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i * 3 + rank);
        for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 7 + rank);
        EXPECT_OK(ncclGroupStart());
        EXPECT_OK(ncclSend(a.data(), a.size(), ncclUint8, next, comm, nullptr));
        EXPECT_OK(ncclRecv(ra.data(), ra.size(), ncclUint8, prev, comm, nullptr));
        EXPECT_OK(ncclSend(b.data(), b.size(), ncclUint8, prev, comm, nullptr));
        EXPECT_OK(ncclRecv(rb.data(), rb.size(), ncclUint8, next, comm, nullptr));
        EXPECT_OK(ncclGroupEnd());
        for (size_t i = 0; i < ra.size(); ++i) expect(ra[i] == static_cast<uint8_t>(i * 3 + prev), "from prev, byte " + std::to_string(i));
        for (size_t i = 0; i < rb.size(); ++i) expect(rb[i] == static_cast<uint8_t>(i * 7 + next), "from next, byte " + std::to_string(i));
      }
      EXPECT_OK(ncclCommDestroy(comm));
    };
  };
  REQUIRE(test::runBoth(n, makeBody) == "");
}

TEST_CASE("sockets: a communicator's life leaves no proxy thread, socket or thread behind", "[integration][net][leak]") {
  const int fds = test::openFileDescriptors();
  const int threads = test::liveThreads();
  for (int round = 0; round < 3; ++round) {
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    REQUIRE(test::runThreads(3, [&](int rank) {
      ncclComm_t comm = nullptr;
      EXPECT_OK(ncclCommInitRank(&comm, 3, id, rank));
      comm->dataPath().connectorOptions().networkOnly = true;
      std::vector<float> x(300000, 1.0f);
      EXPECT_OK(ncclAllReduce(x.data(), x.data(), x.size(), ncclFloat, ncclSum, comm, nullptr));
      expect(x[12345] == 3.0f, "allreduce over sockets");
      EXPECT_OK(ncclCommDestroy(comm));
    }) == "");
  }
  // At most as many as before: a previous test's threads may still have been ending then.
  CHECK(proxy::attachedCount() == 0);
  CHECK(test::openFileDescriptors() <= fds);
  CHECK(test::liveThreads() <= threads);
}

TEST_CASE("ncclCommAbort over sockets: a send nobody receives ends within a second, undrained", "[integration][net][failure]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  std::vector<ncclComm_t> comms(2, nullptr);
  std::vector<char> small(64), big(64 << 20);
  REQUIRE(test::runThreads(2, [&](int rank) {  // connect both ways with one small exchange
    EXPECT_OK(ncclCommInitRank(&comms[rank], 2, id, rank));
    comms[rank]->dataPath().connectorOptions().networkOnly = true;
    EXPECT_OK(ncclGroupStart());
    EXPECT_OK(ncclSend(small.data(), 32, ncclChar, 1 - rank, comms[rank], nullptr));
    EXPECT_OK(ncclRecv(small.data() + 32, 32, ncclChar, 1 - rank, comms[rank], nullptr));
    EXPECT_OK(ncclGroupEnd());
  }) == "");
  ncclResult_t result = ncclSuccess;
  std::thread sender([&] {  // rank 1 never receives: the FIFOs and the socket fill up
    result = ncclSend(big.data(), big.size(), ncclChar, 1, comms[0], nullptr);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(ncclCommAbort(comms[0]) == ncclSuccess);
  sender.join();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
  CHECK(result != ncclSuccess);
  REQUIRE(ncclCommDestroy(comms[1]) == ncclSuccess);
}

TEST_CASE("NCCL_HOSTID: separate programs on different 'hosts' connect through the socket transport",
          "[integration][net]") {
  const std::string out = runPrograms(3, "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET", "allreduce");
  INFO(out);
  for (int r = 0; r < 3; ++r) CHECK_THAT(out, Catch::Contains("rank " + std::to_string(r) + " of 3 ok"));
  CHECK_THAT(out, Catch::Contains("via NET/Socket"));
  CHECK_THAT(out, !Catch::Contains("via SHM"));
}

TEST_CASE("NCCL_SHM_DISABLE=1 between processes goes through the socket transport, as NCCL's does",
          "[integration][net][shm]") {
  const char* program = std::getenv("BRAID_RANK_MAIN_EXE");
  REQUIRE(program != nullptr);
  const int port = test::freeLoopbackPort();
  const std::string command = "export NCCL_COMM_ID=127.0.0.1:" + std::to_string(port) +
                              " NCCL_SOCKET_IFNAME=lo NCCL_SHM_DISABLE=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET "
                              "BRAID_BOOTSTRAP_TIMEOUT=20; " +
                              program + " 2 1 allreduce & " + program + " 2 0 allreduce; wait";
  const std::string out = test::runCommand(command);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("rank 0 of 2 ok") && Catch::Contains("rank 1 of 2 ok"));
  CHECK_THAT(out, Catch::Contains("via NET/Socket"));
}

TEST_CASE("a killed rank on another host: the others fail with a remote error within seconds", "[integration][net][failure]") {
  const std::string out = runPrograms(3, "", "stream 100000 kill-at 50 1");
  INFO(out);
  CHECK_THAT(out, Catch::Contains("rank 1: raising signal 9 before op #50"));
  test::checkSurvivorsFailed(out, {0, 2}, Catch::Contains("rank 1"));
}

TEST_CASE("NCCL_NET: Socket is accepted, IB and unknown names are refused by name", "[integration][net]") {
  CHECK_THAT(runPrograms(2, "NCCL_NET=socket", "allreduce"), Catch::Contains("rank 0 of 2 ok"));
  CHECK_THAT(runPrograms(2, "NCCL_NET=IB", "allreduce"), Catch::Contains("NCCL_NET=IB: Braid's InfiniBand transport is not built yet"));
  CHECK_THAT(runPrograms(2, "NCCL_NET=Carrier-Pigeon", "allreduce"),
             Catch::Contains("NCCL_NET=Carrier-Pigeon names no network transport Braid has"));
}
