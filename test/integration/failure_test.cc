// Init failures become clear errors within the bootstrap timeout; stray connections are
// shrugged off; abort never blocks.
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "bootstrap/unique_id.h"
#include "comm/communicator.h"
#include "comm/peer_info.h"
#include "core/interfaces.h"
#include "harness/ranks.h"
#include "datapath/data_path.h"
#include "test_env.h"

using namespace braid;
using braid::test::expect;
using braid::test::tryInit;

namespace {

std::vector<std::string> runRanks(int n, const std::function<std::string(int)>& body) {
  std::vector<std::string> out(n);
  REQUIRE(test::runThreads(n, [&](int rank) { out[rank] = body(rank); }) == "");
  return out;
}

net::SocketAddress rootOf(const ncclUniqueId& id) { return bootstrap::UniqueId::decode(id).root; }

}  // namespace

TEST_CASE("a rank that never arrives: the others fail naming it", "[integration][failure]") {
  const auto settings = test::loopbackSettings(2);
  const ncclUniqueId id = comm::makeUniqueId(settings);
  const auto start = std::chrono::steady_clock::now();
  const auto results = runRanks(3, [&](int rank) { return tryInit(id, 4, rank, settings); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const auto& r : results) {
    CHECK_THAT(r, Catch::StartsWith("2: bootstrap: waited 2 s for rank 3 of 4 at root 127.0.0.1:"));
    CHECK_THAT(r, Catch::Contains("were all ranks given the same unique id"));
  }
  CHECK(seconds < 10);
}

TEST_CASE("ranks that disagree on nranks or claim one rank twice all fail", "[integration][failure]") {
  const auto settings = test::loopbackSettings(10);
  ncclUniqueId id = comm::makeUniqueId(settings);
  auto results = runRanks(2, [&](int rank) { return tryInit(id, rank == 0 ? 2 : 3, rank, settings); });
  for (const auto& r : results) {
    CHECK_THAT(r, Catch::StartsWith("5: bootstrap: rank "));
    CHECK_THAT(r, Catch::Contains("nranks=3") && Catch::Contains("nranks=2"));
  }
  id = comm::makeUniqueId(settings);
  results = runRanks(2, [&](int) { return tryInit(id, 2, 0, settings); });
  for (const auto& r : results) CHECK_THAT(r, Catch::Contains("two ranks both claimed rank 0"));
}

TEST_CASE("a rank that dies during init: the others fail within the timeout", "[integration][failure]") {
  const auto settings = test::loopbackSettings(2);
  const ncclUniqueId id = comm::makeUniqueId(settings);
  const bootstrap::UniqueId decoded = bootstrap::UniqueId::decode(id);
  // Rank 2 registers with an address nobody listens on, then vanishes.
  {
    net::Socket gone = net::Socket::listen(net::SocketAddress::parse("127.0.0.1:0"));
    bootstrap::Registration reg{};
    reg.nRanks = 3;
    reg.abiVersion = NCCL_VERSION_CODE;
    reg.listenAddress = gone.localAddress().pack();
    reg.nRoots = 1;
    reg.firstRoot = decoded.root.pack();
    reg.firstRootSecret = decoded.secret;
    net::Socket s = net::Socket::connect(decoded.root, net::Clock::now() + std::chrono::seconds(5), nullptr);
    bootstrap::sendMessage(s, decoded.secret, bootstrap::MessageType::kRegister, 2, 0, &reg, sizeof(reg),
                           net::Clock::now() + std::chrono::seconds(5), nullptr);
  }
  const auto start = std::chrono::steady_clock::now();
  const auto results = runRanks(2, [&](int rank) { return tryInit(id, 3, rank, settings); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // (the peer exchange's first round: rank 0 sends to rank 2, rank 1 waits for rank 2; rank 0
  // fails at once, refused, and rank 1 may then find rank 0's listener closed first)
  CHECK_THAT(results[0], Catch::Contains("rank 0 could not send to rank 2") && Catch::Contains("did rank 2 die?"));
  CHECK_THAT(results[1], Catch::Contains("rank 1 waiting for its part of an allgather, alltoall or barrier (rank 2") ||
                             Catch::Contains("rank 0 no longer listens"));
  for (const auto& r : results) CHECK(!r.empty());
  CHECK(seconds < 10);
}

TEST_CASE("garbage and half-open connections do not disturb the root or a rank", "[integration][failure]") {
  const auto settings = test::loopbackSettings(10);
  const ncclUniqueId id = comm::makeUniqueId(settings);
  const auto deadline = net::Clock::now() + std::chrono::seconds(5);
  net::Socket silent = net::Socket::connect(rootOf(id), deadline, nullptr);  // half-open: says nothing
  net::Socket garbage = net::Socket::connect(rootOf(id), deadline, nullptr);
  const char junk[] = "GET / HTTP/1.0\r\n\r\n this is not a bootstrap message at all";
  garbage.sendAll(junk, sizeof(junk), deadline, nullptr);
  net::Socket huge = net::Socket::connect(rootOf(id), deadline, nullptr);
  const bootstrap::UniqueId decoded = bootstrap::UniqueId::decode(id);
  bootstrap::MessageHeader lie{decoded.secret, bootstrap::MessageType::kRegister, 0, 0, 0xffffffffu};
  huge.sendAll(&lie, sizeof(lie), deadline, nullptr);  // right secret, absurd length

  std::vector<std::unique_ptr<ncclComm>> comms(2);
  const auto results = runRanks(2, [&](int rank) { return tryInit(id, 2, rank, settings, &comms[rank]); });
  REQUIRE(results[0] == "");
  REQUIRE(results[1] == "");

  // The same at rank 1's own listening port, then a real message still gets through.
  const net::SocketAddress rank1 = comms[0]->bootstrap().peerAddress(1);
  net::Socket silent1 = net::Socket::connect(rank1, deadline, nullptr);
  net::Socket garbage1 = net::Socket::connect(rank1, deadline, nullptr);
  garbage1.sendAll(junk, sizeof(junk), deadline, nullptr);
  const int value = 42;
  comms[0]->bootstrap().send(1, 9, &value, sizeof(value));
  int got = 0;
  comms[1]->bootstrap().recv(0, 9, &got, sizeof(got));
  CHECK(got == 42);
}

TEST_CASE("NCCL_COMM_ID: every rank computes the same id; rank 0 starts the root", "[integration][init]") {
  const int port = test::freeLoopbackPort();
  auto settings = test::loopbackSettings(10);
  settings.commIdEnv = "127.0.0.1:" + std::to_string(port);
  const int n = 3;
  std::vector<ncclUniqueId> ids(n);
  const auto results = runRanks(n, [&](int rank) {
    ids[rank] = comm::makeUniqueId(settings);
    std::unique_ptr<ncclComm> c;
    const std::string r = tryInit(ids[rank], n, rank, settings, &c);
    if (r.empty()) c->bootstrap().barrier();
    return r;
  });
  for (const auto& r : results) CHECK(r == "");
  CHECK(std::memcmp(&ids[0], &ids[1], sizeof(ncclUniqueId)) == 0);
  CHECK(std::memcmp(&ids[0], &ids[2], sizeof(ncclUniqueId)) == 0);
  CHECK(bootstrap::UniqueId::decode(ids[0]).root.port() == port);
}

TEST_CASE("IPv6 loopback", "[ipv6]") {
  const auto settings = test::loopbackSettings(10, "AF_INET6");
  const ncclUniqueId id = comm::makeUniqueId(settings);
  CHECK(rootOf(id).family() == AF_INET6);
  const auto results = runRanks(3, [&](int rank) {
    std::unique_ptr<ncclComm> c;
    std::string r = tryInit(id, 3, rank, settings, &c);
    if (!r.empty()) return r;
    c->bootstrap().barrier();
    // The socket transport listens where the bootstrap does: on ::1 here.
    c->dataPath().connectorOptions().networkOnly = true;
    std::vector<float> x(300000, static_cast<float>(rank));
    if (ncclAllReduce(x.data(), x.data(), x.size(), ncclFloat, ncclSum, c.get(), nullptr) != ncclSuccess) {
      return std::string("AllReduce over IPv6 sockets: ") + ncclGetLastError(nullptr);
    }
    return x[299999] == 3.0f ? std::string() : "AllReduce over IPv6 sockets gave " + std::to_string(x[299999]);
  });
  for (const auto& r : results) CHECK(r == "");
}

TEST_CASE("ncclCommAbort returns promptly while init waits for a missing rank", "[integration][failure]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  REQUIRE(ncclCommInitRankConfig(&comm, 2, id, 0, &config) == ncclInProgress);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ncclResult_t state = ncclSuccess;
  REQUIRE(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
  CHECK(state == ncclInProgress);
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(ncclCommAbort(comm) == ncclSuccess);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
}

TEST_CASE("peers must agree on library version and backend", "[unit][comm]") {
  std::vector<PeerInfo> peers(3);
  for (int r = 0; r < 3; ++r) {
    std::memset(&peers[r], 0, sizeof(PeerInfo));
    peers[r].rank = r;
    peers[r].abiVersion = NCCL_VERSION_CODE;
    std::strcpy(peers[r].braidVersion, "0.1.0");
    peers[r].hostHash = r < 2 ? 11 : 22;
  }
  CHECK_NOTHROW(checkPeers(peers));
  int localRank = -1, localRanks = -1;
  localPosition(peers, 1, &localRank, &localRanks);
  CHECK((localRank == 1 && localRanks == 2));
  localPosition(peers, 2, &localRank, &localRanks);
  CHECK((localRank == 0 && localRanks == 1));
  peers[2].backend = Backend::kCuda;
  CHECK_THROWS_WITH(checkPeers(peers), Catch::Contains("rank 0 uses the host backend but rank 2 the CUDA backend"));
  peers[2].backend = Backend::kHost;
  std::strcpy(peers[1].braidVersion, "0.2.0");
  CHECK_THROWS_WITH(checkPeers(peers), Catch::Contains("rank 0 runs Braid 0.1.0") && Catch::Contains("rank 1 runs Braid 0.2.0"));
}

TEST_CASE("interface selection follows NCCL_SOCKET_IFNAME and NCCL's default order", "[unit][net]") {
  auto a = [](const char* ip) { return net::SocketAddress::parse(std::string(ip) + ":0"); };
  const std::vector<net::Interface> all = {
      {"lo", a("127.0.0.1")},   {"docker0", a("172.17.0.1")}, {"eth0", a("10.1.2.3")},
      {"eth1", a("192.168.7.9")}, {"ib0", a("10.9.0.1")},      {"lo", a("::1")},
  };
  auto names = [&](const net::InterfaceRequest& req) {
    std::string s;
    for (const auto& i : net::rankInterfaces(req, all)) s += i.name + "/" + i.address.toString() + " ";
    return s;
  };
  net::InterfaceRequest req;
  CHECK(names(req) == "ib0/10.9.0.1:0 eth0/10.1.2.3:0 eth1/192.168.7.9:0 lo/127.0.0.1:0 docker0/172.17.0.1:0 lo/[::1]:0 ");
  req.preferSubnetOf = a("192.168.1.1");
  CHECK_THAT(names(req), Catch::StartsWith("ib0/10.9.0.1:0 eth1/192.168.7.9:0 eth0"));
  req = {};
  req.ifname = "eth";
  CHECK(names(req) == "eth0/10.1.2.3:0 eth1/192.168.7.9:0 ");
  req.ifname = "^eth,ib,docker";
  CHECK(names(req) == "lo/127.0.0.1:0 lo/[::1]:0 ");
  req.ifname = "=eth";
  CHECK(names(req).empty());
  req.ifname = "=eth1";
  CHECK(names(req) == "eth1/192.168.7.9:0 ");
  req.ifname = "lo";
  req.family = "AF_INET6";
  CHECK(names(req) == "lo/[::1]:0 ");
  req.family = "AF_BOGUS";
  CHECK_THROWS_WITH(names(req), Catch::Contains("NCCL_SOCKET_FAMILY is 'AF_BOGUS'"));
}

TEST_CASE("the CPUs near a network interface or an RDMA device come from its device's NUMA node", "[unit][net]") {
  char root[] = "/tmp/braid-sysfs-XXXXXX";
  REQUIRE(mkdtemp(root) != nullptr);
  const std::string r = root;
  auto write = [&](const std::string& path, const std::string& text) {
    REQUIRE(std::system(("mkdir -p " + r + path.substr(0, path.rfind('/'))).c_str()) == 0);
    FILE* f = std::fopen((r + path).c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs(text.c_str(), f);
    std::fclose(f);
  };
  write("/sys/class/net/eth9/device/numa_node", "1\n");
  write("/sys/class/net/eth8/device/numa_node", "-1\n");
  write("/sys/devices/system/node/node1/cpulist", "2-3,6,9-10\n");
  CHECK(net::cpusNearInterface("eth9", r) == std::vector<int>{2, 3, 6, 9, 10});
  CHECK(net::cpusNearInterface("eth8", r).empty());   // no NUMA node known
  CHECK(net::cpusNearInterface("veth0", r).empty());  // no device at all
  CHECK(net::cpusNearInterface("../../etc", r).empty());
  write("/sys/class/infiniband/mlx5_3/device/numa_node", "1\n");
  CHECK(net::cpusNearRdmaDevice("mlx5_3", r) == std::vector<int>{2, 3, 6, 9, 10});
  CHECK(net::cpusNearRdmaDevice("mlx5_4", r).empty());
  CHECK(net::cpusNearRdmaDevice("..", r).empty());
  CHECK(net::interfaceHolding(net::SocketAddress::parse("127.0.0.1:1")) == "lo");
  CHECK(net::interfaceHolding(net::SocketAddress::parse("192.0.2.77:1")) == "");
  std::system(("rm -rf " + r).c_str());
}

TEST_CASE("socket addresses parse IPv4, IPv6 and names, and reject nonsense", "[unit][net]") {
  CHECK(net::SocketAddress::parse("127.0.0.1:5000").toString() == "127.0.0.1:5000");
  CHECK(net::SocketAddress::parse("[::1]:80").toString() == "[::1]:80");
  CHECK(net::SocketAddress::parse("localhost:7").port() == 7);
  CHECK_THROWS_WITH(net::SocketAddress::parse("127.0.0.1"), Catch::Contains("host:port"));
  CHECK_THROWS_WITH(net::SocketAddress::parse("1.2.3.4:99999"), Catch::Contains("0..65535"));
  CHECK_THROWS_WITH(net::SocketAddress::parse("[::1:80"), Catch::Contains("[ipv6]:port"));
  const auto packed = net::SocketAddress::parse("[::1]:81").pack();
  CHECK(net::SocketAddress::unpack(packed).toString() == "[::1]:81");
}

TEST_CASE("ncclCommInitRankScalable: ids in another order, or a rank missing from one id's share, fail by name",
          "[integration][init][failure]") {
  const auto settings = test::loopbackSettings(3);
  SECTION("rank 3 lists the ids in another order") {
    std::vector<ncclUniqueId> ids(2);
    for (auto& id : ids) id = comm::makeUniqueId(settings);
    const auto results = runRanks(4, [&](int rank) {
      auto c = comm::newCommunicator(rank, 4, CommConfig{}, -1);
      std::vector<ncclUniqueId> mine = ids;
      if (rank == 3) std::swap(mine[0], mine[1]);
      try {
        comm::initRank(*c, mine, settings);
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string();
    });
    for (const auto& r : results) CHECK_THAT(r, Catch::Contains("bootstrap"));
    CHECK_THAT(results[0] + results[1] + results[2] + results[3],
               Catch::Contains("do all ranks pass the same ids in the same order?") ||
                   Catch::Contains("name different first unique ids"));
  }
  SECTION("rank 5 of 6 never comes (id 1 of 2 serves ranks 3 to 5)") {
    std::vector<ncclUniqueId> ids(2);
    for (auto& id : ids) id = comm::makeUniqueId(settings);
    const auto results = runRanks(5, [&](int rank) {
      auto c = comm::newCommunicator(rank, 6, CommConfig{}, -1);
      try {
        comm::initRank(*c, ids, settings);
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string();
    });
    for (int r = 0; r < 3; ++r) {  // (root 0 knows only that id 1's share never came)
      CAPTURE(r);
      CHECK_THAT(results[r], Catch::Contains("ranks 3, 4 and 5 of 6") && Catch::Contains("the root of unique id 1 sent none of its ranks"));
    }
    for (int r = 3; r < 5; ++r) {
      CAPTURE(r);
      CHECK_THAT(results[r], Catch::Contains("waited 3 s for rank 5 of 6"));
    }
  }
}
