// The verbs transport alone, over the verbs test double (test/doubles/fake_verbs.c, which
// carries RDMA writes between queue pairs through shared memory): this test plays both kernels
// while the real proxy thread drives the queue pairs. Steps of every size on InfiniBand and
// RoCE ports, LL lines with their signatures, the control socket's notices, completion errors
// named by device, port and peer, port selection, the registration cache, bad settings.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "braid_config.h"
#include "core/status.h"
#include "kernels/primitives.h"
#include "proxy/proxy.h"
#include "transport/net/ib/ib_transport.h"
#include "transport/net/ib/verbs.h"
#include "unit/transport/step_pair.h"

using namespace braid;
using namespace std::chrono_literals;
using braid::test::eventually;
using braid::test::recvSimple;
using braid::test::roundTrip;
using braid::test::sendSimple;

namespace {

constexpr uint64_t kHash = 0x1234abcd5678ef00ull;

std::string fakeVerbs() {
  const char* v = std::getenv("BRAID_FAKE_VERBS");
  return v != nullptr ? v : "";
}

bool haveDouble() { return BRAID_HAVE_IBVERBS_HEADERS && fakeVerbs().find("/nonexistent/") == std::string::npos; }

// Catch2 v2 has no SKIP: say why and leave the test case.
#define SKIP_WITHOUT_DOUBLE()                                                                 \
  do {                                                                                        \
    if (!haveDouble()) {                                                                      \
      WARN("skipped: built without the verbs headers (libibverbs-dev), so no verbs double"); \
      return;                                                                                 \
    }                                                                                         \
  } while (0)

transport::ib::Settings settingsFor(int rank, const std::string& hca = "", std::chrono::seconds timeout = 10s) {
  transport::ib::Settings s;
  s.listenAt = net::SocketAddress::parse("127.0.0.1:0");
  s.commHash = kHash;
  s.rank = rank;
  s.timeout = timeout;
  s.library = fakeVerbs();
  s.hca = hca;
  return s;
}

struct Pair : test::StepPair {
  explicit Pair(const std::string& hca = "", transport::FifoSizes sizes = {64 * 1024, 512, 64}) {
    transport::Descriptor d;
    recv = transport::ib::createReceiver(sizes, settingsFor(1, hca), 0, &d);
    send = transport::ib::connectSender(d, settingsFor(0, hca), 1);
    bind();
  }
};

}  // namespace

TEST_CASE("verbs transport: Simple steps of every size arrive whole and in order, on InfiniBand and on RoCE",
          "[unit][transport][ib]") {
  SKIP_WITHOUT_DOUBLE();
  for (const char* hca : {"=mlx5_0", "=mlx5_1"}) {  // mlx5_1 is RoCE: routed by GID (the double insists)
    INFO("NCCL_IB_HCA=" << hca);
    Pair p(hca);
    CHECK(roundTrip(p, {0, 1, 7, 4096, 65535, 64 * 1024}, 300) == "");
  }
  {
    // Steps larger than the double's chunks and than its rings' room for one write.
    Pair p("", {1024 * 1024, 512, 64});
    CHECK(roundTrip(p, {1024 * 1024, 300 * 1024 + 5}, 40) == "");
  }
  CHECK(proxy::attachedCount() == 0);
}

TEST_CASE("verbs transport: LL lines land with their flags; the step's signature travels with it", "[unit][transport][ib]") {
  SKIP_WITHOUT_DOUBLE();
  Pair p;
  test::checkLLWithSignatures(p);
}

TEST_CASE("verbs transport: LL128 lines land data first, flag last", "[unit][transport][ib]") {
  SKIP_WITHOUT_DOUBLE();
  Pair p;
  test::checkLL128(p);
}

TEST_CASE("verbs transport: the announcement and fault notices cross; a goodbye is no fault", "[unit][transport][ib]") {
  SKIP_WITHOUT_DOUBLE();
  {
    Pair p;
    test::checkNotices(p);
  }
  {
    Pair p;
    test::checkGoodbyeAfterFullFifo(p);
  }
  CHECK(proxy::attachedCount() == 0);
}

TEST_CASE("verbs transport: a failed completion is an error naming the device, the port and the peer",
          "[unit][transport][ib]") {
  SKIP_WITHOUT_DOUBLE();
  // The double fails the send after each queue pair's first 5 (BRAID_FAKE_VERBS_FAIL_AFTER is
  // read when a queue pair is created): the sender's third step (two writes each) fails.
  setenv("BRAID_FAKE_VERBS_FAIL_AFTER", "5", 1);
  Pair p("=mlx5_0");
  unsetenv("BRAID_FAKE_VERBS_FAIL_AFTER");
  for (int i = 0; i < 3; ++i) REQUIRE(sendSimple(p, 100));
  transport::FaultBox* box = p.send->faultBox(false);  // what the sender's end learnt about its peer
  REQUIRE(eventually([&] { return kernels::loadAcquire(&box->raised) == transport::kFaultRaised; }));
  CHECK(box->code == ncclRemoteError);
  CHECK_THAT(std::string(box->text), Catch::Contains("rank 1") && Catch::Contains("mlx5_0 port 1") &&
                                         Catch::Contains("remote access error"));
  CHECK(recvSimple(p, 100) == "");  // the first two steps made it
  CHECK(recvSimple(p, 100) == "");
}

TEST_CASE("verbs transport: a receiver whose queue pair is gone fails the sender's next write", "[unit][transport][ib]") {
  SKIP_WITHOUT_DOUBLE();
  Pair p;
  REQUIRE(sendSimple(p, 10));
  REQUIRE(recvSimple(p, 10) == "");
  transport::FaultBox* box = p.send->faultBox(false);
  p.recv.reset();  // says goodbye: no failure yet (a notice that it left), its queue pair is simply gone
  std::this_thread::sleep_for(100ms);
  CHECK(kernels::loadAcquire(&box->raised) == transport::kFaultLeft);
  REQUIRE(sendSimple(p, 10));  // nobody to take it: the double reports retries exhausted, quietly after a goodbye
  std::this_thread::sleep_for(200ms);
  CHECK(kernels::loadAcquire(&box->raised) == transport::kFaultLeft);
}

TEST_CASE("verbs transport: ports, GID indexes and the registration cache", "[unit][transport][ib]") {
  SKIP_WITHOUT_DOUBLE();
  std::string why, what;
  REQUIRE(transport::ib::available(settingsFor(0), &why, &what));
  CHECK(what == "[0]mlx5_0:1/IB [1]mlx5_1:1/RoCE");  // mlx5_1 port 2 is down
  CHECK_FALSE(transport::ib::available(settingsFor(0, "mlx4"), &why, &what));
  CHECK_THAT(why, Catch::Contains("no active port") && Catch::Contains("NCCL_IB_HCA=mlx4"));
  transport::ib::Settings missing = settingsFor(0);
  missing.library = "libbraid-no-such-verbs.so";
  CHECK_FALSE(transport::ib::available(missing, &why, &what));
  CHECK_THAT(why, Catch::Contains("libbraid-no-such-verbs.so cannot be loaded"));

  transport::Descriptor d;
  CHECK_THROWS_WITH(transport::ib::createReceiver({4096, 64, 8}, settingsFor(1, "^mlx5"), 0, &d),
                    Catch::Contains("rank 1 has no active port") && Catch::Contains("NCCL_IB_HCA=^mlx5"));
  transport::ib::Settings badGid = settingsFor(1);
  badGid.gidIndex = 9;
  CHECK_THROWS_WITH(transport::ib::createReceiver({4096, 64, 8}, badGid, 0, &d),
                    Catch::Contains("GID index 9 of mlx5_0 port 1"));
  // A RoCE receiver cannot be reached from InfiniBand ports only.
  auto roce = transport::ib::createReceiver({4096, 64, 8}, settingsFor(1, "=mlx5_1"), 0, &d);
  CHECK(d.ib.roce == 1);
  CHECK_THROWS_WITH(transport::ib::connectSender(d, settingsFor(0, "=mlx5_0"), 1),
                    Catch::Contains("no active RoCE port"));

#if BRAID_HAVE_IBVERBS_HEADERS
  std::string loadWhy;
  const transport::ib::Verbs* v = transport::ib::loadVerbs(fakeVerbs(), &loadWhy);
  REQUIRE(v != nullptr);
  auto device = transport::ib::openDevice(*v, "mlx5_0");
  CHECK(transport::ib::openDevice(*v, "mlx5_0") == device);  // one per process
  std::vector<char> memory(1 << 16);
  const size_t before = device->registrations();
  ibv_mr* whole = device->registerMemory(memory.data(), memory.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ibv_mr* part = device->registerMemory(memory.data() + 100, 1000, IBV_ACCESS_LOCAL_WRITE);
  CHECK(part == whole);  // covered with enough access: shared
  ibv_mr* more = device->registerMemory(memory.data() + 100, 1000, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE);
  CHECK(more != whole);  // other access: its own region
  CHECK(device->registrations() == before + 2);
  device->release(part);
  device->release(more);
  CHECK(device->registrations() == before + 1);
  device->release(whole);
  CHECK(device->registrations() == before);
#endif
}
