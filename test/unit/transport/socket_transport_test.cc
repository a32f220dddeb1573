// The socket transport alone, over loopback: this test plays both kernels (it fills the
// sender's slots and publishes steps, and drains the receiver's), while the real proxy thread
// forwards them. Steps of every size, Simple and LL, striped over several sockets; the
// signature, announcement and fault notices; strangers on the data port; a sender that never
// comes.
#include <netinet/in.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "core/socket.h"
#include "core/status.h"
#include "kernels/primitives.h"
#include "proxy/proxy.h"
#include "transport/net/socket/socket_transport.h"
#include "unit/transport/step_pair.h"

using namespace braid;
using namespace std::chrono_literals;
using braid::test::eventually;

namespace {

constexpr uint64_t kHash = 0x1234abcd5678ef00ull;

transport::socket::Settings settingsFor(int rank, int nSockets, std::chrono::seconds timeout = 10s) {
  transport::socket::Settings s;
  s.listenAt = net::SocketAddress::parse("127.0.0.1:0");
  s.nSockets = nSockets;
  s.commHash = kHash;
  s.rank = rank;
  s.timeout = timeout;
  return s;
}

struct Pair : test::StepPair {
  explicit Pair(int nSockets, transport::FifoSizes sizes = {64 * 1024, 512, 64}) {
    transport::Descriptor d;
    recv = transport::socket::createReceiver(sizes, settingsFor(1, nSockets), 0, &d);
    send = transport::socket::connectSender(d, settingsFor(0, nSockets), 1);
    bind();
  }
};

}  // namespace

TEST_CASE("socket transport: Simple steps of every size arrive whole and in order, over 1 and 3 sockets",
          "[unit][transport][socket]") {
  for (int nSockets : {1, 3}) {
    INFO(nSockets << " sockets");
    Pair p(nSockets);
    CHECK(test::roundTrip(p, {0, 1, 7, 4096, 65535, 64 * 1024}, 300) == "");
  }
  CHECK(proxy::attachedCount() == 0);
}

TEST_CASE("socket transport: LL lines land with their flags; the step's signature travels with it", "[unit][transport][socket]") {
  Pair p(2);
  test::checkLLWithSignatures(p);
}

TEST_CASE("socket transport: LL128 lines land data first, flag last", "[unit][transport][socket]") {
  Pair p(2);
  test::checkLL128(p);
}

TEST_CASE("socket transport: the announcement and fault notices cross; a goodbye is no fault", "[unit][transport][socket]") {
  {
    Pair p(1);
    test::checkNotices(p);
  }
  {
    // On 4 sockets: the goodbye on socket 0 may overtake data on the others.
    Pair p(4);
    test::checkGoodbyeAfterFullFifo(p);
  }
  CHECK(proxy::attachedCount() == 0);
}

TEST_CASE("socket transport: garbage, a truncated hello and a wrong nonce on the data port; the real sender still connects",
          "[unit][transport][socket]") {
  transport::Descriptor d;
  auto recv = transport::socket::createReceiver({4096, 64, 8}, settingsFor(1, 1), 0, &d);
  const auto address = net::SocketAddress::unpack(d.listen);
  const auto deadline = net::Clock::now() + 5s;
  // Half a hello, then silence, kept open while the real sender connects.
  net::Socket truncated = net::Socket::connect(address, deadline, nullptr);
  truncated.sendAll("BRNH\1\0\0\0\0\0", 10, deadline, nullptr);
  {
    net::Socket garbage = net::Socket::connect(address, deadline, nullptr);
    const char junk[64] = "GET / HTTP/1.0\r\n\r\n";
    garbage.sendAll(junk, sizeof junk, deadline, nullptr);
    transport::Descriptor forged = d;
    forged.nonce ^= 1;
    auto impostor = transport::socket::connectSender(forged, settingsFor(0, 1), 1);
    std::this_thread::sleep_for(200ms);
  }
  auto send = transport::socket::connectSender(d, settingsFor(0, 1), 1);
  kernels::ConnHandle s = send->handle(true), r = recv->handle(false);
  std::memcpy(s.simple, "hello", 6);
  kernels::publishStep(s, 0, kernels::stepInfo(6, false));
  CHECK(eventually([&] { return kernels::loadAcquire(r.tail) == 1; }));
  CHECK(std::string(r.simple) == "hello");
  CHECK(kernels::loadAcquire(&recv->faultBox(true)->raised) == 0);
}

TEST_CASE("socket transport: a sender that never connects is reported after the timeout", "[unit][transport][socket]") {
  transport::Descriptor d;
  auto recv = transport::socket::createReceiver({4096, 64, 8}, settingsFor(1, 2, 1s), 0, &d);
  transport::FaultBox* box = recv->faultBox(true);
  CHECK(eventually([&] { return kernels::loadAcquire(&box->raised) == transport::kFaultRaised; }));
  CHECK_THAT(std::string(box->text), Catch::Contains("never connected") && Catch::Contains("0 arrived"));
  CHECK(box->code == ncclRemoteError);
}

TEST_CASE("socket transport: bad settings and descriptors are refused by name", "[unit][transport][socket]") {
  transport::Descriptor d;
  CHECK_THROWS_WITH(transport::socket::createReceiver({4096, 64, 8}, settingsFor(1, 65), 0, &d),
                    Catch::Contains("65 sockets per connection"));
  std::memset(&d, 0, sizeof d);
  d.nSockets = 0;
  CHECK_THROWS_WITH(transport::socket::connectSender(d, settingsFor(0, 1), 1), Catch::Contains("rank 1 sent"));
}

// Not a test (hidden; run with "[.bench]"): one-way throughput of 512 KiB Simple steps and the
// round trip of 8-byte steps through the real proxy, for tuning the transport by itself.
TEST_CASE("socket transport: throughput and round trip by themselves", "[.bench]") {
  static const uint32_t kNoAbort = 0;
  {
    Pair p(1, {512 * 1024, 512, 64});
    const int steps = 400;
    std::thread receiver([&] {
      for (int i = 0; i < steps; ++i) {
        const uint64_t step = p.recvStep;
        kernels::waitUntil([&] { return kernels::loadAcquire(p.r.tail) > step; }, &kNoAbort);
        kernels::storeRelease(p.r.head, step + 1);
        ++p.recvStep;
      }
    });
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) {
      const uint64_t step = p.sendStep;
      kernels::waitUntil([&] { return kernels::loadAcquire(p.s.head) + kernels::kSteps > step; }, &kNoAbort);
      kernels::publishStep(p.s, step, kernels::stepInfo(512 * 1024, false));
      ++p.sendStep;
    }
    receiver.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    WARN("one way, 512 KiB steps: " << steps * 512.0 * 1024 / s / 1e9 << " GB/s");
  }
  {
    Pair there(1), back(1);  // there: rank 0 -> 1; back: its receiver end answers
    const int rounds = 2000;
    std::thread echo([&] {
      for (int i = 0; i < rounds; ++i) {
        kernels::waitUntil([&] { return kernels::loadAcquire(there.r.tail) > there.recvStep; }, &kNoAbort);
        kernels::storeRelease(there.r.head, ++there.recvStep);
        kernels::publishStep(back.s, back.sendStep, kernels::stepInfo(8, false));
        ++back.sendStep;
      }
    });
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < rounds; ++i) {
      kernels::publishStep(there.s, there.sendStep, kernels::stepInfo(8, false));
      ++there.sendStep;
      kernels::waitUntil([&] { return kernels::loadAcquire(back.r.tail) > back.recvStep; }, &kNoAbort);
      kernels::storeRelease(back.r.head, ++back.recvStep);
    }
    echo.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    WARN("round trip of 8-byte steps: " << s / rounds * 1e6 << " us");
  }
}
