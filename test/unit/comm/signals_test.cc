// SignalBoard: counters per (context, source rank) at the target, waits cumulative at the
// waiter. Two boards of one process stand for two ranks that are threads of it.
#include "comm/signals.h"

#include <catch2/catch.hpp>
#include <thread>

using braid::comm::SignalBoard;

TEST_CASE("signal board: bumps land in the target's counter of (ctx, source); waits consume",
          "[comm][signals]") {
  SignalBoard zero(0, 2, 2), one(1, 2, 2);
  CHECK(zero.reaches(0));
  CHECK_FALSE(zero.reaches(1));
  zero.learn(1, one.address());
  one.learn(0, zero.address());
  REQUIRE(zero.reaches(1));

  zero.bump(1, 1);  // rank 0 signals rank 1 on context 1, three times
  zero.bump(1, 1);
  zero.bump(1, 1);
  CHECK(one.arrivedCount(0, 1) == 3);
  CHECK(one.arrivedCount(0, 0) == 0);   // (another context)
  CHECK(zero.arrivedCount(1, 1) == 0);  // (the other direction)

  const uint64_t first = one.expect(0, 1, 2);  // a wait of 2, then one of 1: both satisfied
  CHECK(first == 2);
  CHECK(one.arrived(0, 1, first));
  const uint64_t second = one.expect(0, 1, 1);
  CHECK(one.arrived(0, 1, second));
  const uint64_t third = one.expect(0, 1, 1);  // a fourth signal has not come
  CHECK_FALSE(one.arrived(0, 1, third));
  CHECK(one.consumed(0, 1) == 4);

  std::thread sender([&] { zero.bump(1, 1); });
  while (!one.arrived(0, 1, third)) std::this_thread::yield();
  sender.join();
  CHECK(one.arrivedCount(0, 1) == 4);
}
