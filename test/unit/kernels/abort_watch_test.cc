// The block's abort watch (kernels/platform.h, pollAbortWatch), which a GPU block's waiting
// threads poll instead of each reading the abort word in host memory: here with a clock the
// test moves by hand, and with real threads polling one watch at once. One thread a period
// reads the word, every poller sees an abort once a look after it found it raised, and the
// watch never reports an abort that was not raised.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include "kernels/platform.h"

using namespace braid::kernels;

namespace {

/// A watch and the abort word it watches.
struct Watched {
  AbortWatch watch{};
  uint32_t word = 0;
};

}  // namespace

TEST_CASE("the abort watch reads the word once a period and keeps what it saw", "[kernels][abort]") {
  Watched w;
  constexpr uint64_t kPeriod = 100;
  // The first poll looks (the watch starts due at 0) and claims the next look for now + period.
  REQUIRE_FALSE(pollAbortWatch(w.watch, &w.word, 1000, kPeriod));
  REQUIRE(w.watch.nextLook == 1100);
  // Raised meanwhile: polls before the next look do not read the word, so they do not see it.
  w.word = 1;
  REQUIRE_FALSE(pollAbortWatch(w.watch, &w.word, 1050, kPeriod));
  REQUIRE_FALSE(pollAbortWatch(w.watch, &w.word, 1099, kPeriod));
  REQUIRE(w.watch.seen == 0);
  // The first poll at or past it reads the word and records the abort for everyone.
  REQUIRE(pollAbortWatch(w.watch, &w.word, 1100, kPeriod));
  REQUIRE(w.watch.seen == 1);
  // From then on every poll reports it, before its look is due and even were the word lowered.
  w.word = 0;
  REQUIRE(pollAbortWatch(w.watch, &w.word, 1101, kPeriod));
  REQUIRE(pollAbortWatch(w.watch, &w.word, 5000, kPeriod));
}

TEST_CASE("the abort watch tells every one of several pollers of an abort", "[kernels][abort]") {
  // kThreads threads poll one watch against a clock the test moves a period at a time; the word
  // is raised at kRaiseAt. Every thread must report the abort, none before the word was raised,
  // and the watch's next look must never run more than a period ahead of the clock.
  constexpr int kThreads = 8;
  constexpr uint64_t kPeriod = 10;
  constexpr uint64_t kRaiseAt = 50 * kPeriod;
  Watched w;
  std::atomic<uint64_t> clock{0};
  std::atomic<int> sawAbort{0};
  std::atomic<bool> early{false};
  std::vector<std::thread> pollers;
  for (int t = 0; t < kThreads; ++t) {
    pollers.emplace_back([&] {
      while (!pollAbortWatch(w.watch, &w.word, clock.load(), kPeriod)) std::this_thread::yield();
      if (__atomic_load_n(&w.word, __ATOMIC_RELAXED) == 0) early = true;  // (never lowered: 0 now was 0 then)
      sawAbort.fetch_add(1);
    });
  }
  bool ahead = false;
  for (uint64_t now = kPeriod; sawAbort.load() < kThreads && now < 1000000 * kPeriod; now += kPeriod) {
    if (now == kRaiseAt) __atomic_store_n(&w.word, 1u, __ATOMIC_RELAXED);
    clock.store(now);
    std::this_thread::yield();
    ahead = ahead || __atomic_load_n(&w.watch.nextLook, __ATOMIC_RELAXED) > now + kPeriod;
  }
  for (auto& p : pollers) p.join();
  REQUIRE(sawAbort.load() == kThreads);
  REQUIRE_FALSE(early.load());
  REQUIRE_FALSE(ahead);
  REQUIRE(w.watch.seen == 1);
}
