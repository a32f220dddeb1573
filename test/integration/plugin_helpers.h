// Helpers shared by the plugin tests (plugin_test.cc, net_plugin_test.cc, profiler_proxy_test.cc):
// where the test plugins are, running test/plugins/plugin_driver, and searching its output.
#pragma once

#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "harness/ranks.h"

namespace braid::test::plugins {

inline std::string pluginDir() {
  const char* dir = std::getenv("BRAID_PLUGIN_DIR");
  return dir != nullptr ? dir : "";
}

inline std::string plugin(const std::string& name) { return pluginDir() + "/libnccl-" + name + ".so"; }

/// Runs the driver with `env` (plugin variables cleared first) and the log of every subsystem
/// the tests look at; returns everything it printed.
inline std::string runDriver(const std::string& env, const std::string& args) {
  const char* driver = std::getenv("BRAID_PLUGIN_DRIVER");
  REQUIRE(driver != nullptr);
  return braid::test::runCommand(
      "unset NCCL_TUNER_PLUGIN NCCL_ENV_PLUGIN NCCL_NET_PLUGIN NCCL_PROFILER_PLUGIN NCCL_PROFILE_EVENT_MASK NCCL_ALGO "
      "NCCL_PROTO; export NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING,ENV,COLL,PROFILE "
      "BRAID_BOOTSTRAP_TIMEOUT=20 " + env + "; timeout 120 " +
      driver + " " + args);
}

inline size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

/// The lines of `text` that contain `what`.
inline std::string linesWith(const std::string& text, const std::string& what) {
  std::string out;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    if (line.find(what) != std::string::npos) out += line + "\n";
    start = end + 1;
  }
  return out;
}

}  // namespace braid::test::plugins
