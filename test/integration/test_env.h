// Shared set-up of the integration tests: loopback only, and a short bootstrap timeout so a
// broken test fails in seconds instead of NCCL's minutes.
#pragma once

#include <catch2/catch.hpp>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <string>
#include <thread>

#include "bootstrap/root.h"
#include "comm/communicator.h"
#include "comm/init.h"
#include "core/status.h"
#include "harness/ranks.h"

namespace braid::test {

/// Set before main() runs, so that the first read of the parameter registry sees them.
inline const bool kLoopbackOnly = [] {
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  setenv("BRAID_BOOTSTRAP_TIMEOUT", "30", 0);
  return true;
}();

/// The verbs double (test/doubles/fake_verbs.c) when this build has one, else "".
inline std::string verbsDouble() {
  const char* v = std::getenv("BRAID_FAKE_VERBS");
  return v != nullptr && std::string(v).find("/nonexistent/") == std::string::npos ? v : "";
}

/// rank_main's output of a stream in which one rank was killed: each survivor's failure line
/// says ncclRemoteError with `naming`, came within 5 s, and its communicator was destroyed.
inline void checkSurvivorsFailed(const std::string& out, std::initializer_list<int> survivors,
                                 const Catch::Matchers::StdString::ContainsMatcher& naming) {
  for (int r : survivors) {
    const std::string prefix = "rank " + std::to_string(r) + ": op #";
    const size_t at = out.find(prefix);
    REQUIRE(at != std::string::npos);
    const std::string line = out.substr(at, out.find('\n', at) - at);
    CHECK_THAT(line, Catch::Contains("remote process exited or there was a network error"));
    CHECK_THAT(line, naming);
    CHECK(std::atof(line.c_str() + line.find(" after ") + 7) < 5.0);
    CHECK_THAT(out, Catch::Contains("rank " + std::to_string(r) + ": destroy: no error"));
  }
}

/// Runs the internal init of one rank with explicit settings; returns "" or "code: text"
/// (the communicator is kept in *keep when given and init succeeded).
inline std::string tryInit(const ncclUniqueId& id, int n, int rank, const comm::InitSettings& settings,
                           std::unique_ptr<ncclComm>* keep = nullptr) {
  auto c = comm::newCommunicator(rank, n, CommConfig{}, -1);
  try {
    comm::initRank(*c, id, settings);
  } catch (const Error& e) {
    return std::to_string(e.code()) + ": " + e.what();
  }
  if (keep != nullptr) *keep = std::move(c);
  return "";
}

/// Init settings for tests that call the internal init directly (own timeout, family, ...).
inline comm::InitSettings loopbackSettings(int timeoutSeconds = 30, const char* family = "") {
  comm::InitSettings s;
  s.net.interface.ifname = "lo";
  s.net.interface.family = family;
  s.net.timeout = std::chrono::seconds(timeoutSeconds);
  return s;
}

/// Waits up to 5 s for this process's descriptors and threads to be back at `fds` and
/// `threads` and, with `roots`, for no bootstrap root to run (a root that served may take a
/// moment to end). Returns "" or what was left, for a leak check.
inline std::string leftBehind(int fds, int threads, bool roots = true) {
  auto clean = [&] {
    return openFileDescriptors() == fds && liveThreads() == threads && (!roots || bootstrap::liveRoots() == 0);
  };
  const auto settle = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!clean() && std::chrono::steady_clock::now() < settle) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (clean()) return "";
  return "descriptors: " + std::to_string(fds) + " before, " + std::to_string(openFileDescriptors()) +
         " after; threads: " + std::to_string(threads) + " before, " + std::to_string(liveThreads()) +
         " after; bootstrap roots running: " + std::to_string(bootstrap::liveRoots());
}

/// Whether resident memory measures what the library holds: under AddressSanitizer, freed
/// blocks stay resident in its quarantine (256 MiB by default) and its shadow grows with every
/// allocation, so bounds on it would measure the sanitizer (CI's sanitizer stage saw 123 MiB
/// where the normal build stays under 20).
constexpr bool kResidentMeaningful =
#if defined(__SANITIZE_ADDRESS__)
    false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    false;
#else
    true;
#endif
#else
    true;
#endif

/// This process's resident memory (bytes), from /proc/self/statm.
inline size_t residentBytes() {
  long pages = 0, resident = 0;
  if (FILE* f = fopen("/proc/self/statm", "r")) {
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    fclose(f);
  }
  return static_cast<size_t>(resident) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace braid::test
