// The host thread group's barrier: every thread of a channel learns the same answer to "did
// any of us stop?" at each crossing, however the threads are scheduled.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "runtime/host/host_group.h"

using braid::runtime::host::ChannelShared;
using braid::runtime::host::HostGroup;

namespace {

/// Whether thread t passes true at crossing k: about one crossing in eight has a thread that
/// does, with runs of crossings where none does (a fixed pattern, so a failure repeats).
bool flagOf(int t, int k) {
  uint64_t x = (static_cast<uint64_t>(k) * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(t) * 0xBF58476D1CE4E5B9ull);
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return x % 29 == 0;
}

}  // namespace

TEST_CASE("syncAny: every thread gets the OR of the crossing's flags, crossing after crossing", "[unit][runtime]") {
  for (int threads : {1, 2, 3, 5}) {
    INFO(threads << " threads");
    constexpr int kCrossings = 4000;
    ChannelShared shared(threads);
    std::vector<std::vector<uint8_t>> seen(threads, std::vector<uint8_t>(kCrossings));
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        HostGroup g(t, threads, &shared);
        for (int k = 0; k < kCrossings; ++k) {
          // Plain crossings in between, as a step's other barriers.
          if (k % 3 == 0) g.sync();
          seen[t][k] = g.syncAny(flagOf(t, k));
        }
      });
    }
    for (auto& th : pool) th.join();
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(60));
    int mismatches = 0, stops = 0;
    for (int k = 0; k < kCrossings; ++k) {
      bool any = false;
      for (int t = 0; t < threads; ++t) any = any || flagOf(t, k);
      stops += any;
      for (int t = 0; t < threads; ++t) mismatches += seen[t][k] != any;
    }
    CHECK(mismatches == 0);
    CHECK(stops > 0);               // the pattern has crossings that stop...
    CHECK(stops < kCrossings / 2);  // ...and more that do not
  }
}
