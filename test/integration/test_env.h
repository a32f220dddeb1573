// Shared set-up of the integration tests: loopback only, and a short bootstrap timeout so a
// broken test fails in seconds instead of NCCL's minutes.
#pragma once

#include <cstdlib>

#include "comm/init.h"

namespace braid::test {

/// Set before main() runs, so that the first read of the parameter registry sees them.
inline const bool kLoopbackOnly = [] {
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  setenv("BRAID_BOOTSTRAP_TIMEOUT", "30", 0);
  return true;
}();

/// Init settings for tests that call the internal init directly (own timeout, family, ...).
inline comm::InitSettings loopbackSettings(int timeoutSeconds = 30, const char* family = "") {
  comm::InitSettings s;
  s.net.interface.ifname = "lo";
  s.net.interface.family = family;
  s.net.timeout = std::chrono::seconds(timeoutSeconds);
  return s;
}

}  // namespace braid::test
