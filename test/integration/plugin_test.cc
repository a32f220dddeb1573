// NCCL's tuner (v2-v5) and env (v1) plugins, loaded into fresh processes of
// test/plugins/plugin_driver (the plugins are read once per process): test/plugins/*.c are the
// plugins, built against the installed headers. Each run checks the AllReduce results exactly
// and the choices in the TUNING and COLL log lines.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "harness/ranks.h"
#include "test_env.h"

namespace {

std::string pluginDir() {
  const char* dir = std::getenv("BRAID_PLUGIN_DIR");
  return dir != nullptr ? dir : "";
}

std::string plugin(const std::string& name) { return pluginDir() + "/libnccl-" + name + ".so"; }

/// Runs the driver with `env` (plugin variables cleared first) and the log of every subsystem
/// the tests look at; returns everything it printed.
std::string runDriver(const std::string& env, const std::string& args) {
  const char* driver = std::getenv("BRAID_PLUGIN_DRIVER");
  REQUIRE(driver != nullptr);
  return braid::test::runCommand(
      "unset NCCL_TUNER_PLUGIN NCCL_ENV_PLUGIN NCCL_NET_PLUGIN NCCL_ALGO NCCL_PROTO; export NCCL_SOCKET_IFNAME=lo "
      "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING,ENV,COLL BRAID_BOOTSTRAP_TIMEOUT=20 " + env + "; timeout 120 " +
      driver + " " + args);
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

/// The lines of `text` that contain `what`.
std::string linesWith(const std::string& text, const std::string& what) {
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

}  // namespace

TEST_CASE("a v5 tuner plugin decides Tree/LL for small and Ring/Simple for large AllReduces", "[plugins]") {
  // 256 floats: 1 KiB (Tree/LL); 4096: 16 KiB (left to Braid); 262144: 1 MiB (Ring/Simple, 1 channel).
  const std::string out = runDriver("NCCL_TUNER_PLUGIN=" + plugin("tuner-ranges"), "4 threads destroy 256 4096 262144");
  INFO(out);
  CHECK_THAT(out, Catch::Contains("all ranks ok"));
  CHECK_THAT(out, Catch::Contains("TUNER/Plugin: Loaded tuner plugin ranges (v5)"));
  CHECK(occurrences(out, "TUNER/Plugin: Loaded tuner plugin") == 1);  // once per process
  CHECK(occurrences(out, "test tuner: init comm") == 4);             // once per communicator
  CHECK_THAT(out, Catch::Contains("nRanks 4 nNodes 1 nvlDomains 1 ranks per domain 4..4"));
  CHECK(occurrences(out, "tuner ranges chose Tree/LL, ") == 4);
  CHECK(occurrences(out, "for AllReduce of 1024 bytes") == 4);
  CHECK(occurrences(out, "tuner ranges chose Ring/Simple, 1 channel(s) for AllReduce of 1048576 bytes") == 4);
  CHECK(occurrences(out, "of 16384 bytes (Braid's own") == 0);  // the plugin left the table alone
  CHECK(occurrences(out, "AllReduce: 1024 bytes on 4 ranks -> Tree/LL") == 4);
  CHECK(occurrences(out, "AllReduce: 1048576 bytes on 4 ranks -> Ring/Simple, 1 channel(s)") == 4);
  CHECK(occurrences(out, "test tuner: finalize (4 ranks)") == 4);  // at destroy
  CHECK(occurrences(out, "NCCL WARN") == 0);
}

TEST_CASE("a tuner plugin found by name, ranks as processes, finalized after an abort", "[plugins]") {
  const std::string env = "LD_LIBRARY_PATH=" + pluginDir() + " NCCL_TUNER_PLUGIN=ranges NCCL_COMM_ID=127.0.0.1:" +
                          std::to_string(braid::test::freeLoopbackPort());
  const std::string out = runDriver(env, "2 processes abort 256 262144");
  INFO(out);
  CHECK_THAT(out, Catch::Contains("all ranks ok"));
  CHECK(occurrences(out, "TUNER/Plugin: Loaded tuner plugin ranges (v5)") == 2);  // one per process
  CHECK(occurrences(out, "AllReduce: 1024 bytes on 2 ranks -> Tree/LL") == 2);
  CHECK(occurrences(out, "AllReduce: 1048576 bytes on 2 ranks -> Ring/Simple, 1 channel(s)") == 2);
  CHECK(occurrences(out, "test tuner: finalize (2 ranks)") == 2);  // at abort
}

TEST_CASE("a tuner inside the net plugin's library is found when NCCL_TUNER_PLUGIN is unset", "[plugins]") {
  const std::string out = runDriver("NCCL_NET_PLUGIN=" + plugin("tuner-ranges"), "2 threads destroy 256");
  INFO(out);
  CHECK_THAT(out, Catch::Contains("all ranks ok"));
  CHECK_THAT(out, Catch::Contains("TUNER/Plugin: Could not find: libnccl-tuner.so"));
  CHECK_THAT(out, Catch::Contains("TUNER/Plugin: Loaded tuner plugin ranges (v5)"));
  CHECK(occurrences(out, "AllReduce: 1024 bytes on 2 ranks -> Tree/LL") == 2);
  CHECK(occurrences(out, "NCCL WARN") == 0);
}

TEST_CASE("NCCL_ALGO filters before the tuner plugin sees the table", "[plugins]") {
  const std::string out = runDriver("NCCL_ALGO=Ring NCCL_TUNER_PLUGIN=" + plugin("tuner-ranges"), "4 threads destroy 256");
  INFO(out);
  CHECK_THAT(out, Catch::Contains("all ranks ok"));
  CHECK(occurrences(out, "chose Tree") == 0);  // Tree's row was ignored: the plugin could not pick it
  CHECK(occurrences(out, "AllReduce: 1024 bytes on 4 ranks -> Ring/") == 4);
}

TEST_CASE("a tuner plugin exporting only v2 loads and decides", "[plugins]") {
  const std::string out = runDriver("NCCL_TUNER_PLUGIN=" + plugin("tuner-v2only"), "4 threads destroy 256 262144");
  INFO(out);
  CHECK_THAT(out, Catch::Contains("all ranks ok"));
  CHECK_THAT(out, Catch::Contains("TUNER/Plugin: Loaded tuner plugin only-v2 (v2)"));
  CHECK(occurrences(out, "test tuner v2: init nRanks 4 nNodes 1") == 4);
  CHECK(occurrences(out, "AllReduce: 1024 bytes on 4 ranks -> Ring/LL") == 4);
  CHECK(occurrences(out, "AllReduce: 1048576 bytes on 4 ranks -> Ring/LL") == 4);
  CHECK(occurrences(out, "tuner only-v2 chose Ring/LL") == 8);
}

TEST_CASE("bad tuner plugins: a WARN, and Braid runs without them", "[plugins]") {
  SECTION("missing file: INFO only") {
    const std::string out = runDriver("NCCL_TUNER_PLUGIN=/nonexistent/libnccl-tuner-x.so", "4 threads destroy 256");
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    CHECK_THAT(out, Catch::Contains("TUNER/Plugin: Could not find: /nonexistent/libnccl-tuner-x.so"));
    CHECK(occurrences(out, "NCCL WARN") == 0);
  }
  SECTION("no tuner symbol") {
    const std::string out = runDriver("NCCL_TUNER_PLUGIN=" + plugin("tuner-nosymbol"), "4 threads destroy 256");
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    CHECK(occurrences(out, "NCCL WARN") == 1);
    CHECK_THAT(linesWith(out, "NCCL WARN"),
               Catch::Contains("libnccl-tuner-nosymbol.so exports none of ncclTunerPlugin_v5, ncclTunerPlugin_v4, "
                               "ncclTunerPlugin_v3, ncclTunerPlugin_v2"));
  }
  SECTION("init fails") {
    const std::string out = runDriver("NCCL_TUNER_PLUGIN=" + plugin("tuner-initfails"), "4 threads destroy 256");
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    CHECK(occurrences(out, "tuner plugin bad (v5) init failed with 3") == 4);  // one per communicator
    CHECK(occurrences(out, "NCCL WARN") == 4);
    CHECK_THAT(out, Catch::Contains("libnccl-tuner-initfails.so"));
  }
  SECTION("a NULL function") {
    const std::string out = runDriver("NCCL_TUNER_PLUGIN=" + plugin("tuner-nullfunction"), "4 threads destroy 256");
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    CHECK(occurrences(out, "NCCL WARN") == 1);
    CHECK_THAT(out, Catch::Contains("bad (ncclTunerPlugin_v5) has no getCollInfo function"));
  }
  SECTION("NaN costs and 1000 channels") {
    const std::string out = runDriver("NCCL_TUNER_PLUGIN=" + plugin("tuner-badanswers"), "4 threads destroy 256 262144");
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    CHECK(occurrences(out, "not a time, ignored (said once)") == 4);  // once per communicator
    CHECK(occurrences(out, "left no available algorithm and protocol") == 4);
    CHECK(occurrences(out, "tuner ranges chose") == 0);
  }
}

TEST_CASE("an env plugin answers for NCCL variables", "[plugins]") {
  SECTION("NCCL_ALGO and NCCL_PROTO from the plugin") {
    const std::string out = runDriver("NCCL_ENV_PLUGIN=" + plugin("env-test") +
                                          " BRAID_TEST_ENV_NCCL_ALGO=Ring BRAID_TEST_ENV_NCCL_PROTO=Simple",
                                      "4 threads destroy 256");
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    CHECK(occurrences(out, "test env plugin: init 2.28.9") == 1);
    CHECK_THAT(out, Catch::Contains("ENV/Plugin: Loaded env plugin test-env (v1)"));
    CHECK_THAT(out, Catch::Contains("NCCL_ALGO set by environment to Ring"));
    CHECK(occurrences(out, "AllReduce: 1024 bytes on 4 ranks -> Ring/Simple") == 4);
    CHECK(occurrences(out, "test env plugin: finalize") == 1);
  }
  SECTION("NCCL_TUNER_PLUGIN from the plugin, by name") {
    const std::string out = runDriver("LD_LIBRARY_PATH=" + pluginDir() + " NCCL_ENV_PLUGIN=test" +
                                          " BRAID_TEST_ENV_NCCL_TUNER_PLUGIN=ranges",
                                      "2 threads destroy 256");
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    CHECK_THAT(out, Catch::Contains("TUNER/Plugin: Loaded tuner plugin ranges (v5)"));
    CHECK(occurrences(out, "AllReduce: 1024 bytes on 2 ranks -> Tree/LL") == 2);
  }
  SECTION("init fails: a WARN, variables from the environment") {
    const std::string out = runDriver("NCCL_ENV_PLUGIN=" + plugin("env-initfails") + " BRAID_TEST_ENV_NCCL_ALGO=Tree",
                                      "4 threads destroy 256");
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    CHECK(occurrences(out, "NCCL WARN") == 1);
    CHECK_THAT(linesWith(out, "NCCL WARN"), Catch::Contains("env plugin test-env (v1) init failed with 3"));
    CHECK(occurrences(out, "NCCL_ALGO set by") == 0);
  }
  SECTION("none disables it") {
    const std::string out = runDriver("NCCL_ENV_PLUGIN=none BRAID_TEST_ENV_NCCL_ALGO=Tree", "2 threads destroy 256");
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    CHECK(occurrences(out, "test env plugin") == 0);
    CHECK(occurrences(out, "NCCL_ALGO set by") == 0);
  }
}

// ---- net plugins (test/plugins/net_loopback.c), between processes forced onto the network ----

namespace {

/// Runs test/plugins/net_driver with `env` over NRANKS processes of this host whose every pair
/// goes through the network transport (NCCL_SHM_DISABLE, NCCL_P2P_DISABLE); returns its output.
std::string runNetDriver(const std::string& env, const std::string& args) {
  const char* driver = std::getenv("BRAID_NET_DRIVER");
  REQUIRE(driver != nullptr);
  return braid::test::runCommand(
      "unset NCCL_TUNER_PLUGIN NCCL_ENV_PLUGIN NCCL_NET_PLUGIN NCCL_NET NCCL_ALGO NCCL_PROTO; export "
      "NCCL_SOCKET_IFNAME=lo NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_DEBUG=INFO "
      "NCCL_DEBUG_SUBSYS=INIT,NET BRAID_BOOTSTRAP_TIMEOUT=20 NCCL_COMM_ID=127.0.0.1:" +
      std::to_string(braid::test::freeLoopbackPort()) + " " + env + "; timeout 120 " + driver + " " + args + " 2>&1");
}

const char* const kCounts = " 1 1001 300000";

}  // namespace

TEST_CASE("a v11 net plugin carries AllReduce, AllGather, Broadcast and Send/Recv between processes", "[plugins][net]") {
  const std::string out = runNetDriver("NCCL_NET_PLUGIN=" + plugin("net-loopback"), std::string("3 destroy") + kCounts);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("all ranks ok"));
  CHECK(occurrences(out, ": 300000 ok") == 3);
  CHECK(occurrences(out, "NET/Plugin: Loaded net plugin loopback (v11)") == 3);  // once per process
  CHECK(occurrences(out, "NET/Plugin : Using net plugin loopback (v11), 2 device(s)") == 3);
  CHECK(occurrences(out, "also exports ncclCollNetPlugin_v9; Braid does not run CollNet") == 3);
  CHECK(occurrences(out, "loopback net: init comm") == 3);  // v11: once per communicator
  CHECK(occurrences(out, "loopback net: finalize") == 3);   // at destroy
  CHECK(occurrences(out, "via NET/Plugin") >= 6);
  CHECK(occurrences(out, "via NET/Socket") == 0);
  CHECK(occurrences(out, "NCCL WARN") == 0);
  CHECK(occurrences(out, "loopback net: more than") == 0);  // never beyond 8 requests a comm
}

TEST_CASE("a net plugin found by name and chosen by NCCL_NET, 4 ranks, ended by abort", "[plugins][net]") {
  const std::string out = runNetDriver("LD_LIBRARY_PATH=" + pluginDir() + " NCCL_NET_PLUGIN=loopback NCCL_NET=LoopBack",
                                       std::string("4 abort") + kCounts);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("all ranks ok"));
  CHECK(occurrences(out, ": 300000 ok") == 4);
  CHECK(occurrences(out, "NET/Plugin : Using net plugin loopback") == 4);
  CHECK(occurrences(out, "loopback net: finalize") == 4);  // at abort too
  // (an abort says no goodbye, so peers that abort later see their connections lost, as over
  // Braid's own sockets; no plugin call failed)
  CHECK(occurrences(linesWith(out, "NCCL WARN"), "net plugin") == 0);
}

TEST_CASE("NCCL_NET=Socket leaves a net plugin unused", "[plugins][net]") {
  const std::string out =
      runNetDriver("NCCL_NET_PLUGIN=" + plugin("net-loopback") + " NCCL_NET=Socket", std::string("2 destroy 1001"));
  INFO(out);
  CHECK_THAT(out, Catch::Contains("all ranks ok"));
  CHECK(occurrences(out, "via NET/Plugin") == 0);
  CHECK(occurrences(out, "via NET/Socket") >= 2);
}

TEST_CASE("a net plugin exporting only v6 loads and carries the collectives", "[plugins][net]") {
  const std::string out = runNetDriver("NCCL_NET_PLUGIN=" + plugin("net-loopback6"), std::string("2 destroy") + kCounts);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("all ranks ok"));
  CHECK(occurrences(out, "NET/Plugin: Loaded net plugin loopback6 (v6)") == 2);
  CHECK(occurrences(out, "loopback net v6: init") == 2);  // once per process
  CHECK(occurrences(out, "via NET/Plugin") >= 2);
  CHECK(occurrences(out, "NCCL WARN") == 0);
}

TEST_CASE("a net plugin whose isend fails mid-collective: a named error on every rank and a clean abort",
          "[plugins][net]") {
  const std::string out = runNetDriver("NCCL_NET_PLUGIN=" + plugin("net-failisend"), std::string("2 destroy") + kCounts);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("FAILED"));
  // (a rank whose peer failed first may fail by losing it, before its own 3rd isend)
  CHECK(occurrences(out, "loopback net: the 3rd isend fails on purpose") >= 1);
  CHECK(occurrences(out, "rank 0: AllReduce of 1 failed") == 1);
  CHECK(occurrences(out, "rank 1: AllReduce of 1 failed") == 1);
  const std::string failures = linesWith(out, " failed: ");
  CHECK_THAT(failures, Catch::Contains("net plugin loopback-failing"));
  CHECK_THAT(failures, Catch::Contains("isend returned ncclSystemError (2)"));
  CHECK_THAT(failures, Catch::Contains("to rank"));
  CHECK(occurrences(out, "aborted") == 2);  // nothing hung
}

TEST_CASE("bad net plugins: a WARN, and Braid runs over its own network", "[plugins][net]") {
  SECTION("missing file: INFO only") {
    const std::string out = runNetDriver("NCCL_NET_PLUGIN=/nonexistent/libnccl-net-x.so", "2 destroy 1001");
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    CHECK_THAT(out, Catch::Contains("NET/Plugin: Could not find: /nonexistent/libnccl-net-x.so"));
    CHECK(occurrences(out, "via NET/Socket") >= 2);
    CHECK(occurrences(out, "NCCL WARN") == 0);
  }
  SECTION("no net symbol") {
    const std::string out = runNetDriver("NCCL_NET_PLUGIN=" + plugin("net-nosymbol"), "2 destroy 1001");
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    CHECK(occurrences(out, "NCCL WARN") == 2);  // one per process
    CHECK_THAT(linesWith(out, "NCCL WARN"),
               Catch::Contains("libnccl-net-nosymbol.so exports none of ncclNetPlugin_v11, ncclNetPlugin_v10, "
                               "ncclNetPlugin_v9, ncclNetPlugin_v8, ncclNetPlugin_v7, ncclNetPlugin_v6"));
    CHECK(occurrences(out, "via NET/Socket") >= 2);
  }
  SECTION("init fails") {
    const std::string out = runNetDriver("NCCL_NET_PLUGIN=" + plugin("net-initfails"), "2 destroy 1001");
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    CHECK(occurrences(out, "NCCL WARN") == 2);
    CHECK_THAT(linesWith(out, "NCCL WARN"), Catch::Contains("libnccl-net-initfails.so: net plugin loopback (v11) init "
                                                            "failed with ncclSystemError (2)"));
    CHECK(occurrences(out, "via NET/Socket") >= 2);
  }
  SECTION("no devices") {
    const std::string out = runNetDriver("NCCL_NET_PLUGIN=" + plugin("net-nodevices"), "2 destroy 1001");
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    CHECK(occurrences(out, "NCCL WARN") == 2);
    CHECK_THAT(linesWith(out, "NCCL WARN"), Catch::Contains("libnccl-net-nodevices.so: net plugin loopback (v11) reports 0 devices"));
    CHECK(occurrences(out, "loopback net: finalize") == 2);  // its context was given back
    CHECK(occurrences(out, "via NET/Socket") >= 2);
  }
}

TEST_CASE("a net plugin between thread ranks of one process (P2P and SHM disabled)", "[plugins][net]") {
  const std::string out = runDriver("NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_NET_PLUGIN=" +
                                        plugin("net-loopback"),
                                    "4 threads destroy 1 1001 300000");
  INFO(out);
  CHECK_THAT(out, Catch::Contains("all ranks ok"));
  CHECK(occurrences(out, "NET/Plugin: Loaded net plugin loopback (v11)") == 1);  // once per process
  CHECK(occurrences(out, "NET/Plugin : Using net plugin loopback") == 4);        // per communicator
  CHECK(occurrences(out, "via NET/Plugin") >= 8);
  CHECK(occurrences(out, "NCCL WARN") == 0);
}
