// Ranks on different hosts, made on one machine: NCCL_HOSTID (separate programs), NCCL_SHM_DISABLE
// (processes of one host, as NCCL does it) or the connector's networkOnly option (threads).
// The collectives' sweep covers every function over sockets (collective_test.cc); here are
// point-to-point, failures, leaks and the transport's knobs. Suite netns runs the same across
// network namespaces.
#include <catch2/catch.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "harness/ranks.h"
#include "proxy/proxy.h"
#include "datapath/data_path.h"
#include "test_env.h"
#include "transport/net/net_end.h"
#include "../unit/core/test_env.h"

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

/// Each of 3 ranks sends size + rank bytes to the next and size + 2 rank bytes to the previous
/// rank in one group (every length differs), for each size, with every connection through the
/// network transport that `configure` sets; as threads and as processes.
std::string ringShiftOverNetwork(std::vector<size_t> sizes,
                                 std::function<void(transport::ConnectorOptions&)> configure) {
  const int n = 3;
  auto makeBody = [&] {
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    return [id, n, sizes, configure](int rank) {
      ncclComm_t comm = nullptr;
      EXPECT_OK(ncclCommInitRank(&comm, n, id, rank));
      transport::ConnectorOptions& connector = comm->dataPath().connectorOptions();
      connector.networkOnly = true;
      configure(connector);
      comm->dataPath().setPeerLLThreshold(16384);  // NCCL's: the sizes up to 16 KiB move as LL
      const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
      for (size_t size : sizes) {
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
  return test::runBoth(n, makeBody);
}

}  // namespace

TEST_CASE("point to point over sockets: ring shift, uneven sizes, LL and Simple sizes, both directions",
          "[integration][net][p2p]") {
  REQUIRE(ringShiftOverNetwork({1, 4096, 3 << 20}, [](transport::ConnectorOptions&) {}) == "");
}

TEST_CASE("sockets: sends leave from the user's buffer and return once their bytes left; receives land in theirs",
          "[integration][net][p2p]") {
  // The receiver starts late, so the sender's bytes sit in its FIFO (by reference) until then;
  // the sender overwrites its buffer as soon as ncclSend returns. A send that returned with
  // steps still to go would deliver the overwritten bytes. The receive finds its first 8
  // steps in the slots (copied) and has the proxy read the rest into its buffer.
  const size_t bytes = (6 << 20) + 12345;
  auto makeBody = [&] {
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    return [id, bytes](int rank) {
      ncclComm_t comm = nullptr;
      EXPECT_OK(ncclCommInitRank(&comm, 2, id, rank));
      comm->dataPath().connectorOptions().networkOnly = true;
      const uint64_t before = transport::netend::referenceSteps(), landed = transport::netend::directSteps();
      std::vector<uint8_t> buffer(bytes);
      for (int round = 0; round < 3; ++round) {
        if (rank == 0) {
          for (size_t i = 0; i < bytes; ++i) buffer[i] = static_cast<uint8_t>(i * 13 + round);
          EXPECT_OK(ncclSend(buffer.data(), bytes, ncclUint8, 1, comm, nullptr));
          std::fill(buffer.begin(), buffer.end(), uint8_t{0xee});
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          EXPECT_OK(ncclRecv(buffer.data(), bytes, ncclUint8, 0, comm, nullptr));
          size_t wrong = 0;
          for (size_t i = 0; i < bytes; ++i) wrong += buffer[i] != static_cast<uint8_t>(i * 13 + round);
          expect(wrong == 0, "round " + std::to_string(round) + ": " + std::to_string(wrong) + " bytes wrong");
        }
      }
      // (threads share the counts: at least rank 0's 3 x 49 steps of 128 KiB, and of rank 1's
      // all but the 8 that were waiting in the FIFO)
      if (rank == 0) expect(transport::netend::referenceSteps() - before >= 3 * 49, "sends went by reference");
      if (rank == 1) expect(transport::netend::directSteps() - landed >= 3 * 41, "steps landed in the receive buffer");
      EXPECT_OK(ncclCommDestroy(comm));
    };
  };
  REQUIRE(test::runBoth(2, makeBody) == "");
}

TEST_CASE("sockets: a communicator's life leaves no proxy thread, socket or thread behind", "[integration][net][leak]") {
  // Counted from the end of the first round: the library's first communicator opens what it
  // keeps for the process's life (run alone, this test would count those).
  int fds = 0, threads = 0;
  for (int round = 0; round < 4; ++round) {
    if (round == 1) {
      fds = test::openFileDescriptors();
      threads = test::liveThreads();
    }
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

TEST_CASE("NCCL_NET: Socket is accepted, IB where no port is usable and unknown names are refused by name",
          "[integration][net]") {
  CHECK_THAT(runPrograms(2, "NCCL_NET=socket", "allreduce"), Catch::Contains("rank 0 of 2 ok"));
  CHECK_THAT(runPrograms(2, "NCCL_NET=IB BRAID_IBVERBS_LIBRARY=libbraid-no-such-verbs.so", "allreduce"),
             Catch::Contains("NCCL_NET=IB: the InfiniBand transport cannot run here: libbraid-no-such-verbs.so cannot be loaded"));
  CHECK_THAT(runPrograms(2, "NCCL_NET=Carrier-Pigeon", "allreduce"),
             Catch::Contains("NCCL_NET=Carrier-Pigeon names no network transport Braid has (IB, Socket)"));
  if (test::verbsDouble().empty()) {
    WARN("skipped the rest: built without the verbs headers, so no verbs double");
    return;
  }
  const std::string verbs = " BRAID_IBVERBS_LIBRARY=" + test::verbsDouble();
  CHECK_THAT(runPrograms(2, "NCCL_NET=IB NCCL_IB_HCA=mlx4" + verbs, "allreduce"),
             Catch::Contains("reports no active port that NCCL_IB_HCA=mlx4 allows"));
  CHECK_THAT(runPrograms(2, "NCCL_NET=IB NCCL_IB_DISABLE=1" + verbs, "allreduce"),
             Catch::Contains("NCCL_NET=IB, but NCCL_IB_DISABLE=1"));
  // Unset NCCL_NET: IB where a port is usable, unless NCCL_IB_DISABLE=1.
  const std::string info = " NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET";
  CHECK_THAT(runPrograms(2, info + verbs, "allreduce"), Catch::Contains("via NET/IB") && Catch::Contains("rank 1 of 2 ok"));
  CHECK_THAT(runPrograms(2, "NCCL_IB_DISABLE=1" + info + verbs, "allreduce"),
             Catch::Contains("via NET/Socket") && !Catch::Contains("via NET/IB") && Catch::Contains("rank 1 of 2 ok"));
}

TEST_CASE("NET/IB over the verbs double: programs on different 'hosts', RoCE, point to point, knobs",
          "[integration][net][ib]") {
  if (test::verbsDouble().empty()) {
    WARN("skipped: built without the verbs headers, so no verbs double");
    return;
  }
  const std::string env = "NCCL_NET=IB NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET BRAID_IBVERBS_LIBRARY=" + test::verbsDouble();
  std::string out = runPrograms(3, env, "allreduce");
  INFO(out);
  for (int r = 0; r < 3; ++r) CHECK_THAT(out, Catch::Contains("rank " + std::to_string(r) + " of 3 ok"));
  CHECK_THAT(out, Catch::Contains("NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE") && Catch::Contains("via NET/IB") &&
                      !Catch::Contains("via NET/Socket"));
  // RoCE only, with the queue pairs' knobs set (and a bad one warned about, its default used).
  out = runPrograms(2, env + " NCCL_IB_HCA==mlx5_1:1 NCCL_IB_GID_INDEX=2 NCCL_IB_TC=106 NCCL_IB_SL=3 NCCL_IB_TIMEOUT=40",
                    "allreduce");
  INFO(out);
  CHECK_THAT(out, Catch::Contains("rank 0 of 2 ok") && Catch::Contains("mlx5_1 port 1 (RoCE)") &&
                      !Catch::Contains("over mlx5_0 port"));
  CHECK_THAT(out, Catch::Contains("NCCL_IB_TIMEOUT=40 is outside 1..31; using 20"));
  // A GID index the port does not have is an error naming it.
  out = runPrograms(2, env + " NCCL_IB_HCA==mlx5_1 NCCL_IB_GID_INDEX=7", "allreduce");
  CHECK_THAT(out, Catch::Contains("GID index 7 of mlx5_1 port 1 cannot be read (NCCL_IB_GID_INDEX=7)"));
}

TEST_CASE("NET/IB: ring channels use the ports the topology's graph gives them; a port of the wrong link layer "
          "falls back to one by number", "[integration][net][ib][topology]") {
  if (test::verbsDouble().empty()) {
    WARN("skipped: built without the verbs headers, so no verbs double");
    return;
  }
  // The verbs double's machine, with a GPU: mlx5_0 (InfiniBand) hangs off the CPU, mlx5_1
  // (RoCE) shares a PCI switch with the GPU. Port by number would put ring channel 0 on mlx5_0.
  test::TempDir dir;
  const std::string topo = dir.write("topo.xml", R"(<system version="1">
  <cpu numaid="0" affinity="ffffffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="106">
    <pci busid="0000:01:00.0" class="0x020000" link_speed="16 GT/s" link_width="16">
      <nic><net name="mlx5_0" dev="0" speed="200000" port="1" latency="0" guid="0x1" maxconn="131072" gdr="1"/></nic>
    </pci>
    <pci busid="0000:10:00.0" class="0x060400" link_speed="16 GT/s" link_width="16">
      <pci busid="0000:11:00.0" class="0x030200" link_speed="16 GT/s" link_width="16"><gpu dev="0" sm="90" rank="0" gdr="1"/></pci>
      <pci busid="0000:12:00.0" class="0x020000" link_speed="16 GT/s" link_width="16">
        <nic><net name="mlx5_1" dev="1" speed="400000" port="1" latency="0" guid="0x2" maxconn="131072" gdr="1"/></nic>
      </pci>
    </pci>
  </cpu>
</system>
)");
  auto graph = [&](const std::string& name, int in, int out) {
    const std::string channel = "<channel><net dev=\"" + std::to_string(in) + "\"/><gpu dev=\"0\"/><net dev=\"" +
                                std::to_string(out) + "\"/></channel>";
    return dir.write(name, "<graphs version=\"1\"><graph id=\"0\" pattern=\"4\" crossnic=\"1\" nchannels=\"1\" "
                           "speedintra=\"24\" speedinter=\"24\" latencyinter=\"0\" typeintra=\"LOC\" typeinter=\"PHB\" "
                           "samechannels=\"1\">" + channel + "</graph></graphs>\n");
  };
  const std::string env = "NCCL_NET=IB NCCL_ALGO=Ring NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET BRAID_IBVERBS_LIBRARY=" +
                          test::verbsDouble() + " NCCL_TOPO_FILE=" + topo;
  // Runs 3 ranks with `extra`; ring channel 0's ends must be on `in` (receivers) and `out`
  // (senders, which took it as `how`).
  auto ring0 = [&](const std::string& extra, const std::string& in, const std::string& out, const std::string& how) {
    const std::string log = runPrograms(3, env + extra, "allreduce");
    INFO(log);
    for (int r = 0; r < 3; ++r) CHECK_THAT(log, Catch::Contains("rank " + std::to_string(r) + " of 3 ok"));
    CHECK_THAT(log, Catch::Contains("rank 1 <- rank 0 over " + in + " (ring0, the topology's port)"));
    CHECK_THAT(log, Catch::Contains("rank 0 -> rank 1 over " + out + " (ring0, " + how + ")"));
    return log;
  };
  // The search: the port beside the GPU, in and out.
  std::string log = ring0("", "mlx5_1 port 1 (RoCE)", "mlx5_1 port 1 (RoCE)", "the topology's port");
  CHECK_THAT(log, Catch::Contains("rank 1: network ports from the topology: rings in mlx5_1:1, out mlx5_1:1"));
  CHECK_THAT(log, !Catch::Contains("ring0, port by number"));
  // A graph file that says mlx5_0.
  log = ring0(" NCCL_GRAPH_FILE=" + graph("ring-on-0.xml", 0, 0), "mlx5_0 port 1", "mlx5_0 port 1", "the topology's port");
  CHECK_THAT(log, !Catch::Contains("mlx5_1 port 1 (RoCE) (ring0"));
  // In by mlx5_0 (InfiniBand), out by mlx5_1 (RoCE): a sender must match its receiver's link
  // layer, so it says so and takes an InfiniBand port by number.
  log = ring0(" NCCL_GRAPH_FILE=" + graph("ring-crossing.xml", 0, 1), "mlx5_0 port 1", "mlx5_0 port 1", "port by number");
  CHECK_THAT(log, Catch::Contains("ring0: rank 0 cannot use the topology's port mlx5_1:1 (not active, left out or of "
                                  "another link layer than the peer's); choosing by number"));
}

TEST_CASE("point to point over IB: ring shift, uneven sizes, both directions, threads and processes",
          "[integration][net][ib][p2p]") {
  if (test::verbsDouble().empty()) {
    WARN("skipped: built without the verbs headers, so no verbs double");
    return;
  }
  const std::string verbs = test::verbsDouble();
  REQUIRE(ringShiftOverNetwork({0, 1, 4096, 3 << 20}, [verbs](transport::ConnectorOptions& connector) {
            connector.net = "IB";
            connector.ib.library = verbs;
          }) == "");
  CHECK(proxy::attachedCount() == 0);
}

TEST_CASE("IB: a killed rank on another host, and a failed completion: the others fail naming it",
          "[integration][net][ib][failure]") {
  if (test::verbsDouble().empty()) {
    WARN("skipped: built without the verbs headers, so no verbs double");
    return;
  }
  const std::string env = "NCCL_NET=IB BRAID_IBVERBS_LIBRARY=" + test::verbsDouble();
  std::string out = runPrograms(3, env, "stream 100000 kill-at 50 1");
  INFO(out);
  CHECK_THAT(out, Catch::Contains("rank 1: raising signal 9 before op #50"));
  test::checkSurvivorsFailed(out, {0, 2}, Catch::Contains("rank 1"));
  // Every queue pair fails its send after its first 40: the first failure names the device,
  // port and peer, with ncclRemoteError, and every rank stops.
  out = runPrograms(3, env + " NCCL_IB_HCA==mlx5_0 BRAID_FAKE_VERBS_FAIL_AFTER=40", "stream 1000");
  INFO(out);
  CHECK_THAT(out, Catch::Contains("failed on mlx5_0 port 1: an RDMA write completed with \"remote access error\""));
  CHECK_THAT(out, Catch::Contains("remote process exited or there was a network error"));
  CHECK_THAT(out, !Catch::Contains("of 3 ok"));
}
