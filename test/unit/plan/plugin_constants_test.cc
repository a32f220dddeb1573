// A v5 tuner plugin's constants (plan/plugin_choice.h): what Braid hands the plugin comes from
// its cost table, and what the plugin changed moves Tree's and Ring's latencies in a copy of
// the table, by exactly the change, and nothing else.
#include <catch2/catch.hpp>

#include <utility>

#include "plan/plugin_choice.h"
#include "plugin/tuner_plugin.h"
#include "topology/tuner.h"

using namespace braid;
using kernels::Algo;
using kernels::Func;
using kernels::Proto;

namespace {

constexpr int kTree = 0, kRing = 1;  // NCCL's ids, and Braid's
constexpr int kLL = static_cast<int>(Proto::kLL), kSimple = static_cast<int>(Proto::kSimple);
constexpr int kNvlink = 0, kNet = 2;  // NCCL_HW_NVLINK, NCCL_HW_NET

/// Four ranks on two nodes of the host backend: steps within a node over memory, across over
/// the network; CPUs never oversubscribed.
topo::CostShape twoNodes() {
  topo::CostShape s;
  s.nRanks = 4;
  s.nNodes = 2;
  s.ranksPerNode = 2;
  s.intra = topo::LinkClass::kMemory;
  s.inter = topo::LinkClass::kNetwork;
  return s;
}

}  // namespace

TEST_CASE("a tuner plugin is given Braid's latencies for Tree and Ring", "[plan][tuner]") {
  const topo::CostTable& t = topo::kGpuCostTable;
  plugin::TunerCommInfo info;
  plan::fillConstants(t, &info);
  CHECK(info.baseLatency[kTree][kLL] == t.baseLatency[kTree][kLL]);
  CHECK(info.baseLatency[kRing][kSimple] == t.baseLatency[kRing][kSimple]);
  CHECK(info.hwLatency[kNvlink][kTree][kSimple] == t.hopLatency[static_cast<int>(topo::LinkClass::kNvlink)][kSimple]);
  CHECK(info.hwLatency[1][kRing][kLL] == t.hopLatency[static_cast<int>(topo::LinkClass::kPcie)][kLL]);
  CHECK(info.hwLatency[kNet][kRing][kSimple] == t.hopLatency[static_cast<int>(topo::LinkClass::kNetwork)][kSimple]);
}

TEST_CASE("a tuner plugin's changed constants move Tree's and Ring's latencies only", "[plan][tuner]") {
  const topo::CostTable& t = topo::kHostCostTable;
  plugin::TunerCommInfo given;
  plan::fillConstants(t, &given);
  topo::CostTable tuned{};

  SECTION("unchanged: no table of its own") {
    CHECK_FALSE(plan::applyConstants(t, given, given, 0, &tuned));
  }
  SECTION("Tree/LL's base latency and Ring/Simple's step over the network") {
    plugin::TunerCommInfo returned = given;
    returned.baseLatency[kTree][kLL] = 100;
    returned.hwLatency[kNet][kRing][kSimple] += 10;
    REQUIRE(plan::applyConstants(t, given, returned, 0, &tuned));
    CHECK(tuned.baseLatency[kTree][kLL] == 100);
    CHECK(tuned.baseLatency[kRing][kLL] == t.baseLatency[kRing][kLL]);
    CHECK(tuned.hopShift[kRing][static_cast<int>(topo::LinkClass::kNetwork)][kSimple] == Approx(10));
    CHECK(tuned.hopShift[kTree][static_cast<int>(topo::LinkClass::kNetwork)][kSimple] == 0);

    const topo::Tuner before(t, twoNodes()), after(tuned, twoNodes());
    const uint64_t bytes = 8;
    // Tree/LL: its base latency, once.
    const double treeLL = before.predict(Func::kAllReduce, Algo::kTree, Proto::kLL, 1, bytes);
    CHECK(after.predict(Func::kAllReduce, Algo::kTree, Proto::kLL, 1, bytes) ==
          Approx(treeLL - t.baseLatency[kTree][kLL] + 100));
    // Ring/Simple's AllReduce crosses the network twice (out of and back into each node).
    CHECK(after.predict(Func::kAllReduce, Algo::kRing, Proto::kSimple, 1, bytes) ==
          Approx(before.predict(Func::kAllReduce, Algo::kRing, Proto::kSimple, 1, bytes) + 2 * 10));
    // Ring/LL, Tree/Simple and Braid's own algorithms keep Braid's figures.
    using Candidate = std::pair<Algo, Proto>;
    for (auto [algo, proto] : {Candidate{Algo::kRing, Proto::kLL}, Candidate{Algo::kTree, Proto::kSimple},
                               Candidate{Algo::kRecDoubling, Proto::kSimple}, Candidate{Algo::kRecDoubling, Proto::kLL}}) {
      CHECK(after.predict(Func::kAllReduce, algo, proto, 1, bytes) ==
            Approx(before.predict(Func::kAllReduce, algo, proto, 1, bytes)));
    }
    // Handed to a plugin again, the tuned table gives what the plugin left.
    plugin::TunerCommInfo again;
    plan::fillConstants(tuned, &again);
    CHECK(again.baseLatency[kTree][kLL] == 100);
    CHECK(again.hwLatency[kNet][kRing][kSimple] == Approx(returned.hwLatency[kNet][kRing][kSimple]));
    CHECK(again.hwLatency[kNet][kTree][kSimple] == given.hwLatency[kNet][kTree][kSimple]);
  }
}
