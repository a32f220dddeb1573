// NCCL's tuner (v2-v5), env (v1) and profiler (v1-v5) plugins, loaded into fresh processes of
// test/plugins/plugin_driver (the plugins are read once per process): test/plugins/*.c are the
// plugins, built against the installed headers (net plugins: net_plugin_test.cc). Each run checks the AllReduce results exactly
// and the choices in the TUNING and COLL log lines, or the events a profiler plugin printed.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "harness/ranks.h"
#include "plugin_helpers.h"
#include "profiler_lines.h"
#include "test_env.h"

using namespace braid::test::plugins;

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

// ---- profiler plugins (test/plugins/profiler_record.c prints every call it gets) -------------

namespace {

using braid::test::ProfLine;
using braid::test::profLines;
using braid::test::asInt;
using braid::test::checkProxyEvents;
using braid::test::ProxyOpSeen;
using braid::test::started;

/// "op what" of each line, KernelCh lines left out (checked on their own).
std::vector<std::string> shape(const std::vector<ProfLine>& lines) {
  std::set<int> kernelCh;
  std::vector<std::string> out;
  for (const auto& l : lines) {
    if (l.op == "start" && l.what == "KernelCh") kernelCh.insert(l.id);
    if (kernelCh.count(l.id) == 0) out.push_back(l.op + " " + l.what);
  }
  return out;
}


/// Checks rank r's KernelCh events: each starts under the Coll or P2P event begun last, gets
/// KernelChStop with a time not before its start, and stops; returns them by parent.
std::map<int, int> checkKernelCh(const std::vector<ProfLine>& lines) {
  std::map<int, int> perParent;
  int lastTask = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const ProfLine& l = lines[i];
    if (l.op == "start" && (l.what == "Coll" || l.what == "P2p")) lastTask = l.id;
    if (l.op != "start" || l.what != "KernelCh") continue;
    INFO(l.text);
    const int parent = asInt(l.fields.at("parent"));
    CHECK(parent != 0);
    const ProfLine* p = started(lines, parent);
    REQUIRE(p != nullptr);
    CHECK((p->what == "Coll" || p->what == "P2p"));
    if (p->what == "Coll") CHECK(parent == lastTask);
    REQUIRE(i + 2 < lines.size());
    CHECK(lines[i + 1].op == "state");
    CHECK(lines[i + 1].id == l.id);
    CHECK(lines[i + 1].what == "KernelChStop");
    CHECK(std::stoull(lines[i + 1].fields.at("pTimer")) >= std::stoull(l.fields.at("pTimer")));
    CHECK(std::stoull(l.fields.at("pTimer")) > 0);
    CHECK(lines[i + 2].op == "stop");
    CHECK(lines[i + 2].id == l.id);
    ++perParent[parent];
  }
  return perParent;
}

}  // namespace

TEST_CASE("a v5 profiler plugin sees a group of 3 collectives and a send/recv pair, in order, with parents",
          "[plugins][profiler]") {
  const std::string out = runDriver("NCCL_PROFILER_PLUGIN=" + plugin("profiler-record"), "2 threads destroy group 256");
  INFO(out);
  CHECK_THAT(out, Catch::Contains("all ranks ok"));
  CHECK(occurrences(out, "PROFILER/Plugin: Loaded profiler plugin record (v5)") == 1);
  CHECK(occurrences(out, "test profiler: init rank") == 2);  // through the logger it was given
  CHECK(occurrences(out, " nNodes=1 nranks=2 mask=0xfff") == 2);
  CHECK(occurrences(out, "prof finalize") == 2);  // at destroy
  CHECK(occurrences(out, "NCCL WARN") == 0);
  CHECK(occurrences(out, "parent=bad") + occurrences(out, "group=bad") == 0);  // no unknown parent
  CHECK(occurrences(out, "bad handle") == 0);
  const std::vector<std::string> group = {
      "start GroupApi", "state GroupStartApiStop",
      "start CollApi", "stop CollApi", "start CollApi", "stop CollApi", "start CollApi", "stop CollApi",
      "start P2pApi", "stop P2pApi", "start P2pApi", "stop P2pApi",
      "state GroupEndApiStart", "start Group",
      "start Coll", "start KernelLaunch", "stop KernelLaunch", "stop Coll",
      "start Coll", "start KernelLaunch", "stop KernelLaunch", "stop Coll",
      "start Coll", "start KernelLaunch", "stop KernelLaunch", "stop Coll",
      "start P2p", "start P2p", "start KernelLaunch", "stop KernelLaunch", "stop P2p", "stop P2p",
      "stop Group", "stop GroupApi"};
  const std::vector<std::string> lone = {  // the AllReduce alone: an implicit group
      "start GroupApi", "state GroupStartApiStop", "start CollApi", "stop CollApi", "state GroupEndApiStart",
      "start Group", "start Coll", "start KernelLaunch", "stop KernelLaunch", "stop Coll", "stop Group",
      "stop GroupApi"};
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    const std::vector<ProfLine> lines = profLines(out, r);
    std::vector<std::string> expected = group;
    expected.insert(expected.end(), lone.begin(), lone.end());
    CHECK(shape(lines) == expected);
    if (shape(lines) != expected) continue;
    std::vector<const ProfLine*> starts;  // the start lines, in order
    for (const auto& l : lines) {
      if (l.op == "start" && l.what != "KernelCh") starts.push_back(&l);
    }
    // Group API, Coll API x3, P2P API x2, Group, Coll x3 (each with its launch), P2P x2, launch.
    const ProfLine& groupApi = *starts[0];
    CHECK(groupApi.fields.at("parent") == "-");
    CHECK(groupApi.fields.at("depth") == "2");  // inside ncclGroupStart
    const char* funcs[] = {"AllReduce", "Broadcast", "AllGather"};
    const char* counts[] = {"256", "64", "32"};
    for (int k = 0; k < 3; ++k) {
      const ProfLine& api = *starts[1 + k];
      CHECK(api.fields.at("parent") == std::to_string(groupApi.id));
      CHECK(api.fields.at("func") == funcs[k]);
      CHECK(api.fields.at("count") == counts[k]);
      CHECK(api.fields.at("dtype") == "ncclFloat32");
    }
    CHECK(starts[4]->fields.at("func") == "Send");
    CHECK(starts[5]->fields.at("func") == "Recv");
    CHECK(starts[4]->fields.at("parent") == std::to_string(groupApi.id));
    const ProfLine& groupEvent = *starts[6];
    CHECK(groupEvent.what == "Group");
    CHECK(groupEvent.fields.at("parent") == "-");
    for (int k = 0; k < 3; ++k) {
      const ProfLine& coll = *starts[7 + 2 * k];
      const ProfLine& launch = *starts[8 + 2 * k];
      INFO(coll.text);
      CHECK(coll.fields.at("parent") == std::to_string(starts[1 + k]->id));  // its Coll API event
      CHECK(coll.fields.at("group") == std::to_string(groupEvent.id));
      CHECK(coll.fields.at("func") == funcs[k]);
      CHECK(coll.fields.at("count") == counts[k]);
      CHECK(coll.fields.at("dtype") == "ncclFloat32");
      CHECK(coll.fields.at("root") == "0");
      CHECK(coll.fields.at("seq") == "0");  // the first of its function
      CHECK(!coll.fields.at("algo").empty());
      CHECK(std::set<std::string>{"LL", "LL128", "SIMPLE"}.count(coll.fields.at("proto")) == 1);
      CHECK(asInt(coll.fields.at("nch")) >= 1);
      CHECK(launch.what == "KernelLaunch");
      CHECK(launch.fields.at("parent") == std::to_string(groupApi.id));
    }
    const ProfLine& send = *starts[13];
    const ProfLine& recv = *starts[14];
    CHECK(send.fields.at("parent") == std::to_string(starts[4]->id));
    CHECK(recv.fields.at("parent") == std::to_string(starts[5]->id));
    CHECK(send.fields.at("group") == std::to_string(groupEvent.id));
    CHECK(send.fields.at("peer") == std::to_string((r + 1) % 2));
    CHECK(recv.fields.at("peer") == std::to_string((r + 1) % 2));
    CHECK(send.fields.at("count") == "16");
    CHECK(starts[15]->fields.at("parent") == std::to_string(groupApi.id));
    const std::map<int, int> kernelCh = checkKernelCh(lines);
    for (int k = 0; k < 3; ++k) {
      const ProfLine& coll = *starts[7 + 2 * k];
      CHECK(kernelCh.count(coll.id) == 1);
      if (kernelCh.count(coll.id) == 1) CHECK(kernelCh.at(coll.id) == asInt(coll.fields.at("nch")));
    }
    CHECK(kernelCh.count(send.id) == 1);
    CHECK(kernelCh.count(recv.id) == 1);
    // The lone AllReduce: depth 1, the second AllReduce of the communicator.
    CHECK(starts[16]->what == "GroupApi");
    CHECK(starts[16]->fields.at("depth") == "1");
    CHECK(starts[19]->what == "Coll");
    CHECK(starts[19]->fields.at("seq") == "1");
    CHECK(starts[19]->fields.at("parent") == std::to_string(starts[17]->id));
  }
}

TEST_CASE("NCCL_PROFILE_EVENT_MASK, through the mask the plugin returns, limits the events", "[plugins][profiler]") {
  SECTION("Coll only: Coll events and their parents") {
    const std::string out = runDriver("NCCL_PROFILE_EVENT_MASK=2 NCCL_PROFILER_PLUGIN=" + plugin("profiler-record"),
                                      "2 threads destroy group");
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    std::set<std::string> types;
    for (const auto& l : profLines(out, 0)) types.insert(l.what);
    CHECK(types == std::set<std::string>{"GroupApi", "GroupStartApiStop", "CollApi", "GroupEndApiStart", "Group", "Coll"});
  }
  SECTION("0: no events") {
    const std::string out = runDriver("NCCL_PROFILE_EVENT_MASK=0 NCCL_PROFILER_PLUGIN=" + plugin("profiler-record"),
                                      "2 threads destroy group 256");
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    CHECK(profLines(out, 0).empty());
    CHECK(profLines(out, 1).empty());
    CHECK(occurrences(out, "prof finalize") == 2);
  }
  SECTION("KernelCh only: the whole chain above it, no API-only events") {
    const std::string out = runDriver("NCCL_PROFILE_EVENT_MASK=64 NCCL_PROFILER_PLUGIN=" + plugin("profiler-record"),
                                      "2 threads destroy group");
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    std::set<std::string> types;
    for (const auto& l : profLines(out, 1)) types.insert(l.what);
    CHECK(types == std::set<std::string>{"GroupApi", "GroupStartApiStop", "CollApi", "P2pApi", "GroupEndApiStart",
                                         "Group", "Coll", "P2p", "KernelCh", "KernelChStop"});
  }
}

TEST_CASE("a profiler plugin exporting only v1 gets v1's events", "[plugins][profiler]") {
  const std::string out = runDriver("NCCL_PROFILER_PLUGIN=" + plugin("profiler-v1only"), "2 threads destroy group");
  INFO(out);
  CHECK_THAT(out, Catch::Contains("all ranks ok"));
  CHECK_THAT(out, Catch::Contains("PROFILER/Plugin: Loaded profiler plugin record-v1 (v1)"));
  CHECK(occurrences(out, "prof init v1") == 2);
  CHECK(occurrences(out, "NCCL WARN") == 0);
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    const std::vector<ProfLine> lines = profLines(out, r);
    const std::vector<std::string> expected = {
        "start Group", "start Coll", "stop Coll", "start Coll", "stop Coll", "start Coll", "stop Coll",
        "start P2p", "start P2p", "stop P2p", "stop P2p", "stop Group"};
    CHECK(shape(lines) == expected);
    if (shape(lines) != expected) continue;
    const int group = lines[0].id;
    // v1: the Group event is the parent; NCCL's indices: AllReduce 4, Broadcast 0, AllGather 2;
    // ncclFloat32 7; Send 6, Recv 7.
    const char* funcs[] = {"4", "0", "2"};
    for (int k = 0; k < 3; ++k) {
      const ProfLine& coll = lines[1 + 2 * k];
      CHECK(coll.fields.at("parent") == std::to_string(group));
      CHECK(coll.fields.at("func") == funcs[k]);
      CHECK(coll.fields.at("dtype") == "7");
      CHECK(coll.fields.at("seq") == "0");
      CHECK(asInt(coll.fields.at("nch")) >= 1);
      CHECK(coll.fields.at("hash") != "0");
    }
    CHECK(lines[7].fields.at("func") == "6");
    CHECK(lines[8].fields.at("func") == "7");
    CHECK(lines[7].fields.at("parent") == std::to_string(group));
  }
  CHECK(occurrences(out, "prof finalize") == 2);
}

TEST_CASE("a profiler plugin found by name, ranks as processes, finalized after an abort", "[plugins][profiler]") {
  const std::string env = "LD_LIBRARY_PATH=" + pluginDir() + " NCCL_PROFILER_PLUGIN=record NCCL_COMM_ID=127.0.0.1:" +
                          std::to_string(braid::test::freeLoopbackPort());
  const std::string out = runDriver(env, "2 processes abort group 256");
  INFO(out);
  CHECK_THAT(out, Catch::Contains("all ranks ok"));
  CHECK(occurrences(out, "PROFILER/Plugin: Loaded profiler plugin record (v5)") == 2);  // one per process
  CHECK(occurrences(out, " Coll parent=") == 8);
  CHECK(occurrences(out, "prof finalize 0") == 2);  // at abort, in each process
}

TEST_CASE("a profiler inside the net plugin's library is found when NCCL_PROFILER_PLUGIN is unset",
          "[plugins][profiler]") {
  const std::string out = runDriver("NCCL_NET_PLUGIN=" + plugin("profiler-record"), "2 threads destroy 256");
  INFO(out);
  CHECK_THAT(out, Catch::Contains("all ranks ok"));
  CHECK_THAT(out, Catch::Contains("PROFILER/Plugin: Could not find: libnccl-profiler.so"));
  CHECK_THAT(out, Catch::Contains("PROFILER/Plugin: Loaded profiler plugin record (v5)"));
  CHECK(occurrences(out, " Coll parent=") == 2);
  CHECK(occurrences(out, "NCCL WARN") == 0);
}

TEST_CASE("bad profiler plugins: a WARN, and Braid runs without them", "[plugins][profiler]") {
  SECTION("missing file: INFO only") {
    const std::string out =
        runDriver("NCCL_PROFILER_PLUGIN=/nonexistent/libnccl-profiler-x.so", "2 threads destroy group");
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    CHECK_THAT(out, Catch::Contains("PROFILER/Plugin: Could not find: /nonexistent/libnccl-profiler-x.so"));
    CHECK(occurrences(out, "NCCL WARN") == 0);
  }
  SECTION("no profiler symbol") {
    const std::string out = runDriver("NCCL_PROFILER_PLUGIN=" + plugin("profiler-nosymbol"), "2 threads destroy group");
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    CHECK(occurrences(out, "NCCL WARN") == 1);
    CHECK_THAT(linesWith(out, "NCCL WARN"),
               Catch::Contains("libnccl-profiler-nosymbol.so exports none of ncclProfiler_v5, ncclProfiler_v4, "
                               "ncclProfiler_v3, ncclProfiler_v2, ncclProfiler_v1"));
  }
  SECTION("init fails") {
    const std::string out = runDriver("NCCL_PROFILER_PLUGIN=" + plugin("profiler-initfails"), "2 threads destroy group");
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    CHECK(occurrences(out, "profiler plugin record-initfails (v5) init failed with 3") == 2);  // one per communicator
    CHECK(occurrences(out, "NCCL WARN") == 2);
    CHECK_THAT(out, Catch::Contains("libnccl-profiler-initfails.so"));
    CHECK(occurrences(out, "prof ") == 0);  // no events, no finalize
  }
  SECTION("every mask bit, NULL handles and failing startEvent") {
    const std::string out = runDriver("NCCL_PROFILER_PLUGIN=" + plugin("profiler-badanswers"), "2 threads abort group 256");
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    CHECK(occurrences(out, "startEvent returned 3; its answer is ignored (said once)") == 2);  // once per communicator
    CHECK(occurrences(out, "bad handle") == 0);
    CHECK(occurrences(out, " Coll parent=") == 0);
    CHECK(occurrences(out, " GroupApi parent=") == 4);
    CHECK(occurrences(out, "prof finalize") == 2);
  }
}

TEST_CASE("profiler plugins exporting only v4 or v3 get their own layouts", "[plugins][profiler]") {
  // v4 and v3: no API or kernel launch events, the Group event parents Coll and P2P; v4's
  // KernelCh carries timestamps, v3's only the channel.
  const std::vector<std::string> expectedTail = {"stop Coll", "start Coll", "stop Coll", "start Coll", "stop Coll",
                                                 "start P2p", "start P2p", "stop P2p", "stop P2p", "stop Group"};
  for (const std::string version : {"v4", "v3"}) {
    INFO(version);
    const std::string out = runDriver("NCCL_PROFILER_PLUGIN=" + plugin("profiler-" + version + "only"),
                                      "2 threads destroy group");
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    CHECK_THAT(out, Catch::Contains("PROFILER/Plugin: Loaded profiler plugin record-" + version + " (" + version + ")"));
    CHECK(occurrences(out, "NCCL WARN") == 0);
    CHECK(occurrences(out, "parent=bad") + occurrences(out, "group=bad") == 0);
    if (version == "v4") CHECK(occurrences(out, " nNodes=1 nranks=2") == 2);
    for (int r = 0; r < 2; ++r) {
      const std::vector<ProfLine> lines = profLines(out, r);
      const std::vector<std::string> s = shape(lines);
      REQUIRE(s.size() == 12);
      CHECK(s[0] == "start Group");
      CHECK(s[1] == "start Coll");
      CHECK(std::vector<std::string>(s.begin() + 2, s.end()) == expectedTail);
      int kernelCh = 0;
      for (const auto& l : lines) {
        if (l.op == "start" && (l.what == "Coll" || l.what == "P2p")) {
          CHECK(l.fields.at("parent") == std::to_string(lines[0].id));
        }
        if (l.op == "start" && l.what == "KernelCh") ++kernelCh;
        if (l.op == "start" && l.what == "Coll" && version == "v3") CHECK(l.fields.at("hash") != "0");
      }
      CHECK(kernelCh >= 5);  // one per channel of each collective, one per send and receive
      if (version == "v4") checkKernelCh(lines);
      CHECK(lines[1].fields.at("func") == "AllReduce");
      CHECK(lines[1].fields.at("dtype") == "ncclFloat32");
    }
    CHECK(occurrences(out, "prof finalize") == 2);
  }
}

// ---- ProxyOp and ProxyStep events, of connections through the socket transport's proxy ---------

namespace {

/// Runs the group of plugin_driver, then an AllReduce of 2000000 floats (many steps a
/// connection), on 2 ranks as processes whose connections all go through the socket
/// transport (so through the proxy thread), with the recording profiler `name` asking for
/// `mask`; `env` may add a net plugin.
std::string runProxyDriver(const std::string& name, const std::string& mask, const std::string& env = "") {
  return runDriver("NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_PROFILE_EVENT_MASK=" + mask +
                       " NCCL_PROFILER_PLUGIN=" + plugin(name) + " NCCL_COMM_ID=127.0.0.1:" +
                       std::to_string(braid::test::freeLoopbackPort()) + " " + env,
                   "2 processes destroy group 2000000");
}


}  // namespace

TEST_CASE("ProxyOp and ProxyStep events of an AllReduce and a send/recv pair over the network",
          "[plugins][profiler]") {
  // Over Braid's socket transport, through a net plugin (the loopback one, over TCP), and over
  // Braid's verbs transport on the verbs double (RDMA writes played in shared memory).
  const std::string transport = GENERATE(as<std::string>(), "Socket", "loopback", "IB");
  const char* verbs = std::getenv("BRAID_FAKE_VERBS");
  if (transport == "IB" && (verbs == nullptr || *verbs == '\0')) {
    WARN("skipped over IB: no verbs double (BRAID_FAKE_VERBS)");
    return;
  }
  const std::string netEnv = transport == "loopback" ? "NCCL_NET_PLUGIN=" + plugin("net-loopback")
                             : transport == "IB"     ? "NCCL_IB_DISABLE=0 NCCL_NET=IB BRAID_IBVERBS_LIBRARY=" + std::string(verbs)
                                                     : "";
  INFO(transport);
  SECTION("asked for: every operation's network ends, with their steps") {
    const std::string out = runProxyDriver("profiler-record", "0xfff", netEnv);
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    if (transport == "loopback") CHECK_THAT(out, Catch::Contains("Using net plugin loopback"));
    if (transport == "IB") CHECK_THAT(out, Catch::Contains("via NET/IB") && !Catch::Contains("via NET/Socket"));
    CHECK(occurrences(out, "NCCL WARN") == 0);
    CHECK(occurrences(out, "parent=bad") + occurrences(out, "group=bad") == 0);
    CHECK(occurrences(out, "bad handle") == 0);
    for (int r = 0; r < 2; ++r) {
      INFO("rank " << r);
      const std::vector<ProfLine> lines = profLines(out, r);
      const std::vector<ProxyOpSeen> ops = checkProxyEvents(lines, r);
      std::map<std::string, int> sends, recvs;  // per parent function
      for (const ProxyOpSeen& op : ops) {
        (op.isSend ? sends : recvs)[op.parentFunc] += 1;
        if (op.parentType == "P2p") CHECK(op.channel == 0);
        if (op.parentType == "P2p") CHECK(op.isSend == (op.parentFunc == "Send"));
      }
      CHECK(sends["AllReduce"] >= 2);  // both ways on its channels, in both AllReduces
      CHECK(recvs["AllReduce"] >= 2);
      int most = 0;
      for (const ProxyOpSeen& op : ops) most = std::max(most, op.steps);
      CHECK(most >= 4);  // the large AllReduce's steps, in order
      CHECK(sends["Send"] == 1);  // the send's one connection, the receive's one
      CHECK(recvs["Send"] == 0);
      CHECK(recvs["Recv"] == 1);
      CHECK(sends["Recv"] == 0);
      CHECK(recvs["AllGather"] >= 1);
    }
  }
  SECTION("not asked for: none") {
    const std::string out = runProxyDriver("profiler-record", "0xf67", netEnv);  // (NetPlugin would start its parents)
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    CHECK(occurrences(out, " Coll parent=") == 8);  // (the rest of the events as ever)
    CHECK(occurrences(out, "ProxyOp") == 0);
    CHECK(occurrences(out, "ProxyStep") == 0);
  }
  SECTION("ProxyOp without ProxyStep: the operations, no steps") {
    const std::string out = runProxyDriver("profiler-record", "0x8", netEnv);
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    CHECK(occurrences(out, " ProxyOp parent=") >= 6);
    CHECK(occurrences(out, "ProxyStep") == 0);
  }
}

TEST_CASE("profiler plugins of v4 and v1 get ProxyOp and ProxyStep events in their layouts", "[plugins][profiler]") {
  for (const std::string version : {"v4", "v1"}) {
    INFO(version);
    const std::string out = runProxyDriver("profiler-" + version + "only", "0x1f");
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    CHECK(occurrences(out, "NCCL WARN") == 0);
    CHECK(occurrences(out, "parent=bad") + occurrences(out, "group=bad") == 0);
    for (int r = 0; r < 2; ++r) {
      INFO("rank " << r);
      CHECK(checkProxyEvents(profLines(out, r), r).size() >= 6);
    }
  }
}
