// The cost model and the tuner: predictions are the model's formula, the choice is the least
// prediction among the candidates, filters and bounds hold, the GPU model meets its published
// figures on the 8xH100 file, the planner's errors name the collective, braid-topo --tuning.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/status.h"
#include "plan/planner.h"
#include "topology/topology.h"
#include "topology/tuner.h"
#include "cost_shapes.h"
#include "../core/test_env.h"

using namespace braid;
using namespace braid::topo;
using kernels::Algo;
using kernels::Func;
using kernels::Proto;
using test::hostShape;

namespace {

constexpr int kRing = static_cast<int>(Algo::kRing);
constexpr int kSimple = static_cast<int>(Proto::kSimple);
constexpr int kLL = static_cast<int>(Proto::kLL);
constexpr uint32_t kAllAlgos = (1u << kTunerAlgos) - 1;
constexpr uint32_t kAllProtos = (1u << kTunerProtos) - 1;

std::string topoFile(const std::string& name) {
  const char* dir = std::getenv("BRAID_TOPO_DATA");
  if (dir == nullptr) FAIL("BRAID_TOPO_DATA is not set (run the tests through meson test)");
  return std::string(dir) + "/" + name;
}

Tuner h100(int nodes) {
  TopologyRequest r;
  r.topoFile = topoFile("ibm-cloud-gx3d-160x1792x8h100-topo.xml");
  r.detect = false;
  r.nodes = nodes;
  auto t = loadTopology(r);
  return Tuner(kGpuCostTable, gpuShape(t->ring, t->system.count(NodeType::Gpu), nodes));
}

double busBw(Func f, int n, uint64_t bytes, double us) { return bytes * busFactor(f, n) / (1000.0 * us); }

}  // namespace

TEST_CASE("A prediction is the model's formula", "[tuner]") {
  const CostTable& t = kHostCostTable;
  const uint64_t bytes = 1 << 20;
  SECTION("Ring/Simple AllReduce on 4 ranks with CPUs to spare: 6 steps, 3/2 of the bytes") {
    Tuner tuner(t, hostShape(4, 16));
    const double bw = std::min(t.channelBandwidth[2], t.aggregateBandwidth[2]) * t.protoEfficiency[kSimple];
    const double expected = t.baseLatency[kRing][kSimple] + 6 * t.hopLatency[2][kSimple] + bytes * 1.5 / (1000 * bw);
    CHECK(tuner.predict(Func::kAllReduce, Algo::kRing, Proto::kSimple, 1, bytes) == Approx(expected));
  }
  SECTION("oversubscribed: 4 ranks on 2 CPUs pay the scheduling wait per step; the ring keeps its speed") {
    Tuner tuner(t, hostShape(4, 2));
    const double bw = std::min(t.channelBandwidth[2], t.aggregateBandwidth[2]) * t.llReducingEfficiency *
                      std::min(1.0, t.ringCpuShare[kLL] * 2 / 4);
    const double expected = t.baseLatency[kRing][kLL] + 6 * t.oversubscribedHop[kLL] + bytes * 1.5 / (1000 * bw);
    CHECK(tuner.predict(Func::kAllReduce, Algo::kRing, Proto::kLL, 1, bytes) == Approx(expected));
  }
  SECTION("8 ranks on 2 CPUs: twice the wait per step, a quarter of the speed") {
    Tuner tuner(t, hostShape(8, 2));
    const double bw = std::min(t.channelBandwidth[2], t.aggregateBandwidth[2]) * t.protoEfficiency[kSimple] / 4;
    CHECK(tuner.predict(Func::kAllReduce, Algo::kRecDoubling, Proto::kSimple, 1, bytes) ==
          Approx(t.baseLatency[3][kSimple] + 3 * 2 * t.oversubscribedHop[kSimple] + 3.0 * bytes / (1000 * bw)));
  }
  SECTION("8 ranks on 2 CPUs: a binomial round waits and moves at its own transfers' load") {
    // Rounds of 1, 2 and 4 transfers: 2, 4 and 8 busy threads on 2 CPUs (loads 1, 2, 4: the
    // first round waits as on idle CPUs), bytes at max(1, 1/2), max(1, 1), max(1, 2).
    Tuner tuner(t, hostShape(8, 2));
    const double bw = std::min(t.channelBandwidth[2], t.aggregateBandwidth[2]) * t.protoEfficiency[kSimple];
    const double hops = t.hopLatency[2][kSimple] + t.oversubscribedHop[kSimple] * (2.0 / 2 + 4.0 / 2);
    const double once = hops + 4.0 * bytes / (1000 * bw);
    const int binomial = static_cast<int>(Algo::kBinomial);
    for (Func f : {Func::kBroadcast, Func::kReduce})
      CHECK(tuner.predict(f, Algo::kBinomial, Proto::kSimple, 1, bytes) == Approx(t.baseLatency[binomial][kSimple] + once));
    CHECK(tuner.predict(Func::kAllReduce, Algo::kBinomial, Proto::kSimple, 1, bytes) ==
          Approx(t.baseLatency[binomial][kSimple] + 2 * once));
    // 5 ranks: rounds of 1, 1 and 2 transfers (the root to 4, to 2, then 0 to 1 and 2 to 3).
    Tuner five(t, hostShape(5, 2));
    const double load = 5.0 / 2;
    const double fiveHops = 2 * t.hopLatency[2][kSimple] + t.oversubscribedHop[kSimple] * (2 * 2.0 / 5 * load) / 2;
    CHECK(five.predict(Func::kBroadcast, Algo::kBinomial, Proto::kSimple, 1, bytes) ==
          Approx(t.baseLatency[binomial][kSimple] + fiveHops + 3.0 * bytes / (1000 * bw)));
    // The ring's Broadcast and Reduce are a chain: its steps wake one rank at a time (as on idle
    // CPUs); Broadcast pipelines at the ring's share of a CPU, Reduce (which adds) at 1/load.
    const double chain = t.baseLatency[kRing][kSimple] + 7 * t.hopLatency[2][kSimple];
    CHECK(tuner.predict(Func::kBroadcast, Algo::kRing, Proto::kSimple, 1, bytes) ==
          Approx(chain + bytes / (1000 * bw * std::min(1.0, t.ringCpuShare[kSimple] / 4))));
    CHECK(tuner.predict(Func::kReduce, Algo::kRing, Proto::kSimple, 1, bytes) == Approx(chain + bytes / (1000 * bw / 4)));
  }
  SECTION("2 ranks on 2 CPUs: one channel fits, a second oversubscribes") {
    Tuner tuner(t, hostShape(2, 2));
    const double one = tuner.predict(Func::kAllGather, Algo::kRing, Proto::kSimple, 1, 8);
    const double two = tuner.predict(Func::kAllGather, Algo::kRing, Proto::kSimple, 2, 8);
    // 8 bytes stay in the caches: Simple moves them cachedSpeedup times faster.
    const double bw = std::min(t.channelBandwidth[2], t.aggregateBandwidth[2]) * t.cachedSpeedup;
    const double bw2 = std::min(2 * t.channelBandwidth[2], t.aggregateBandwidth[2]) * t.cachedSpeedup;
    CHECK(one == Approx(t.baseLatency[kRing][kSimple] + t.hopLatency[2][kSimple] + 8 * 0.5 / (1000 * bw)));
    CHECK(two == Approx(t.baseLatency[kRing][kSimple] + t.oversubscribedHop[kSimple] + 8 * 0.5 / (1000 * bw2)));
    CHECK(two > one);
  }
  SECTION("a message that stays in the caches moves faster by Simple, not by LL") {
    Tuner tuner(t, hostShape(2, 16));
    const uint64_t small = t.cachedBytes, large = t.cachedBytes + 1;
    const double bw = std::min(t.channelBandwidth[2], t.aggregateBandwidth[2]);
    const double simple = t.baseLatency[kRing][kSimple] + 2 * t.hopLatency[2][kSimple];
    const double ll = t.baseLatency[kRing][kLL] + 2 * t.hopLatency[2][kLL];
    REQUIRE(t.cachedSpeedup > 1);
    CHECK(tuner.predict(Func::kAllReduce, Algo::kRing, Proto::kSimple, 1, small) ==
          Approx(simple + small / (1000 * bw * t.cachedSpeedup)));
    CHECK(tuner.predict(Func::kAllReduce, Algo::kRing, Proto::kSimple, 1, large) == Approx(simple + large / (1000 * bw)));
    CHECK(tuner.predict(Func::kAllReduce, Algo::kRing, Proto::kLL, 1, small) ==
          Approx(ll + small / (1000 * bw * t.llReducingEfficiency)));
  }
  SECTION("RecDoubling and HalvingDoubling on 6 ranks fold 2 ranks in and out") {
    Tuner tuner(t, hostShape(6, 64));
    const double bw = std::min(t.channelBandwidth[2], t.aggregateBandwidth[2]) * t.protoEfficiency[kSimple];
    const double hop = t.hopLatency[2][kSimple];
    CHECK(tuner.predict(Func::kAllReduce, Algo::kRecDoubling, Proto::kSimple, 1, bytes) ==
          Approx(t.baseLatency[3][kSimple] + 4 * hop + 4.0 * bytes / (1000 * bw)));
    CHECK(tuner.predict(Func::kAllReduce, Algo::kHalvingDoubling, Proto::kSimple, 1, bytes) ==
          Approx(t.baseLatency[4][kSimple] + 6 * hop + (1.5 + 2) * bytes / (1000 * bw)));
    // Binomial: ceil(log2 6) = 3 levels of store-and-forward, twice for AllReduce.
    CHECK(tuner.predict(Func::kBroadcast, Algo::kBinomial, Proto::kSimple, 1, bytes) ==
          Approx(t.baseLatency[5][kSimple] + 3 * hop + 3.0 * bytes / (1000 * bw)));
    CHECK(tuner.predict(Func::kAllReduce, Algo::kBinomial, Proto::kSimple, 1, bytes) ==
          Approx(t.baseLatency[5][kSimple] + 6 * hop + 6.0 * bytes / (1000 * bw)));
    // ReduceScatter and AllGather: the halving or the doubling alone; folding moves all, then a block.
    for (Func f : {Func::kReduceScatter, Func::kAllGather}) {
      CHECK(tuner.predict(f, Algo::kHalvingDoubling, Proto::kSimple, 1, bytes) ==
            Approx(t.baseLatency[4][kSimple] + 4 * hop + (0.75 + 1 + 1.0 / 6) * bytes / (1000 * bw)));
    }
  }
  SECTION("AlltoAll on 6 ranks: Direct one step, Pairwise 5, Bruck 3 of packed blocks") {
    Tuner tuner(t, hostShape(6, 64));
    const double bw = std::min(t.channelBandwidth[2], t.aggregateBandwidth[2]) * t.protoEfficiency[kSimple];
    const double hop = t.hopLatency[2][kSimple];
    CHECK(busFactor(Func::kAlltoAll, 6) == Approx(5.0 / 6));
    CHECK(tuner.predict(Func::kAlltoAll, Algo::kDirect, Proto::kSimple, 1, bytes) ==
          Approx(t.baseLatency[2][kSimple] + hop + 5.0 / 6 * bytes / (1000 * bw)));
    CHECK(tuner.predict(Func::kAlltoAll, Algo::kPairwise, Proto::kSimple, 1, bytes) ==
          Approx(t.baseLatency[7][kSimple] + 5 * hop + 5.0 / 6 * bytes / (1000 * bw)));
    // Bruck's rounds send the blocks {1, 3, 5}, {2, 3} and {4, 5} of 6: 7/6 of the data, each
    // byte also packed and unpacked (counted once more).
    CHECK(tuner.predict(Func::kAlltoAll, Algo::kBruck, Proto::kSimple, 1, bytes) ==
          Approx(t.baseLatency[8][kSimple] + 3 * hop + 2 * 7.0 / 6 * bytes / (1000 * bw)));
    // Direct's sends of up to the table's LL threshold (64 bytes on the host) move as LL.
    CHECK(tuner.predict(Func::kAlltoAll, Algo::kDirect, Proto::kSimple, 1, 6 * 8) ==
          Approx(t.baseLatency[2][kLL] + t.hopLatency[2][kLL] + 5.0 / 6 * 48 / (1000 * t.channelBandwidth[2] * t.protoEfficiency[kLL])));
    // With CPUs to spare Direct's one step wins; oversubscribed its thread waits for each peer
    // in turn (n steps), so Bruck wins small messages and Pairwise large ones.
    Choice c;
    REQUIRE(tuner.choose(Func::kAlltoAll, 6 * 8, kAllAlgos, kAllProtos, 0, &c));
    CHECK(c.algo == Algo::kDirect);
    Tuner loaded(t, hostShape(6, 2));
    const double slowHop = t.oversubscribedHop[kSimple] * 3 / 2;  // 3 threads per CPU
    CHECK(loaded.predict(Func::kAlltoAll, Algo::kDirect, Proto::kSimple, 1, bytes) ==
          Approx(t.baseLatency[2][kSimple] + 6 * slowHop + 5.0 / 6 * bytes / (1000 * bw / 3)));
    REQUIRE(loaded.choose(Func::kAlltoAll, 6 * 8, kAllAlgos, kAllProtos, 0, &c));
    CHECK(c.algo == Algo::kBruck);
    REQUIRE(loaded.choose(Func::kAlltoAll, 64 << 20, kAllAlgos, kAllProtos, 0, &c));
    CHECK(c.algo == Algo::kPairwise);
  }
  SECTION("Tree: 2 x depth steps, the bytes twice; Hier2D: rows and columns, the ring's bytes") {
    Tuner tuner(t, hostShape(6, 64));
    const double bw = std::min(t.channelBandwidth[2], t.aggregateBandwidth[2]) * t.protoEfficiency[kSimple];
    const double hop = t.hopLatency[2][kSimple];
    // One node: a chain of 6 (depth 5); a grid of 2 x 3 (2 x 2 + 2 x 1 steps).
    CHECK(tuner.predict(Func::kAllReduce, Algo::kTree, Proto::kSimple, 1, bytes) ==
          Approx(t.baseLatency[0][kSimple] + 10 * hop + 2.0 * bytes / (1000 * bw)));
    const double bw2 = std::min(2 * t.channelBandwidth[2], t.aggregateBandwidth[2]) * t.protoEfficiency[kSimple];
    CHECK(tuner.predict(Func::kAllReduce, Algo::kTree, Proto::kSimple, 2, bytes) ==  // (memory's aggregate caps it)
          Approx(t.baseLatency[0][kSimple] + 10 * hop + 2.0 * bytes / (1000 * bw2)));
    CHECK(tuner.predict(Func::kAllReduce, Algo::kHier2D, Proto::kSimple, 1, bytes) ==
          Approx(t.baseLatency[6][kSimple] + 6 * hop + 2.0 * 5 / 6 * bytes / (1000 * bw)));
    // 3 nodes of 2 (BRAID_RANKS_PER_NODE on one host: the steps between nodes cost the same):
    // Tree 1 in the chain + 2 between heads; Hier2D 3 rows of 2: 2 x 1 + 2 x 2 steps.
    CostShape s = hostShape(6, 64);
    s.nNodes = 3;
    s.ranksPerNode = 2;
    s.inter = LinkClass::kMemory;
    Tuner nodes(t, s);
    CHECK(nodes.predict(Func::kAllReduce, Algo::kTree, Proto::kSimple, 1, bytes) ==
          Approx(t.baseLatency[0][kSimple] + 6 * hop + 2.0 * bytes / (1000 * bw)));
    CHECK(nodes.predict(Func::kAllReduce, Algo::kHier2D, Proto::kSimple, 1, bytes) ==
          Approx(t.baseLatency[6][kSimple] + 6 * hop + 2.0 * 5 / 6 * bytes / (1000 * bw)));
  }
  SECTION("across nodes the inter-node steps cost the network's latency") {
    CostShape s = hostShape(8, 64);
    s.nNodes = 2;
    s.ranksPerNode = 4;
    Tuner tuner(t, s);
    const double bw = std::min(t.aggregateBandwidth[3], t.channelBandwidth[3]) * t.protoEfficiency[kSimple];
    CHECK(tuner.predict(Func::kReduceScatter, Algo::kRing, Proto::kSimple, 1, bytes) ==
          Approx(t.baseLatency[kRing][kSimple] + 6 * t.hopLatency[2][kSimple] + 1 * t.hopLatency[3][kSimple] +
                 bytes * 7.0 / 8 / (1000 * bw)));
  }
}

TEST_CASE("The tuner chooses the least prediction among the allowed candidates", "[tuner]") {
  for (const CostTable* table : {&kHostCostTable, &kGpuCostTable}) {
    for (int n = 1; n <= 9; ++n) {
      CostShape s = hostShape(n, 2);
      s.maxChannels = table == &kGpuCostTable ? 8 : 2;
      const Tuner tuner(*table, s);
      for (int fi = 0; fi < kTunerFuncs; ++fi) {
        const Func f = static_cast<Func>(fi);
        for (uint64_t bytes = 1; bytes <= (uint64_t(1) << 34); bytes *= 4) {
          INFO(table->name << ", " << n << " ranks, " << funcName(f) << ", " << bytes << " bytes");
          Choice c;
          REQUIRE(tuner.choose(f, bytes, kAllAlgos, kAllProtos, 0, &c));
          CHECK(c.timeUs == Approx(tuner.predict(f, c.algo, c.proto, c.nChannels, bytes)));
          for (int ai = 0; ai < kTunerAlgos; ++ai)
            for (int pi = 0; pi < kTunerProtos; ++pi)
              for (int ch = 1; ch <= s.maxChannels; ++ch) {
                if (pi == static_cast<int>(Proto::kLL128) && !table->ll128ByDefault) continue;
                const uint64_t perThread = table->bytesPerThread[pi];
                if (ch > 1 && perThread > 0 && bytes < ch * s.threads * perThread) continue;  // NCCL's shrink rule
                const double other = tuner.predict(f, static_cast<Algo>(ai), static_cast<Proto>(pi), ch, bytes);
                if (other >= 0) CHECK(c.timeUs <= other * (1 + 1e-12));
              }
        }
      }
    }
  }
}

TEST_CASE("Filters, bounds and what is not a candidate", "[tuner]") {
  Tuner tuner(kHostCostTable, hostShape(4, 2));
  Choice c;
  const uint32_t ring = 1u << kRing, direct = 1u << static_cast<int>(Algo::kDirect);
  REQUIRE(tuner.choose(Func::kAllReduce, 8, ring, 1u << kSimple, 1u << kSimple, &c));
  CHECK((c.algo == Algo::kRing && c.proto == Proto::kSimple));
  REQUIRE(tuner.choose(Func::kAllReduce, 8, direct, kAllProtos, 0, &c));
  CHECK((c.algo == Algo::kDirect && c.proto == Proto::kLL && c.nChannels == 1));
  // Direct carries one LL step; beyond it, and with Simple alone, it is no candidate.
  CHECK(tuner.predict(Func::kAllReduce, Algo::kDirect, Proto::kLL, 1, tuner.shape().directMaxBytes) > 0);
  CHECK(tuner.predict(Func::kAllReduce, Algo::kDirect, Proto::kLL, 1, tuner.shape().directMaxBytes + 1) < 0);
  CHECK_FALSE(tuner.choose(Func::kAllReduce, 1 << 20, direct, kAllProtos, 0, &c));
  CHECK_FALSE(tuner.choose(Func::kAllReduce, 8, direct, 1u << kSimple, 1u << kSimple, &c));
  // Where NCCL_ALGO names Direct, Simple runs it as two exchanges at any size: the ring's bytes
  // in 2(n-1) steps, never predicted faster than the ring (which also pipelines across
  // oversubscribed CPUs).
  CostShape named = tuner.shape();
  named.directExchanges = true;
  Tuner exchanges(kHostCostTable, named);
  REQUIRE(exchanges.choose(Func::kAllReduce, 1 << 20, direct, kAllProtos, 0, &c));
  CHECK((c.algo == Algo::kDirect && c.proto == Proto::kSimple));
  CHECK(exchanges.predict(Func::kAllReduce, Algo::kDirect, Proto::kSimple, 1, 1 << 20) >=
        exchanges.predict(Func::kAllReduce, Algo::kRing, Proto::kSimple, 1, 1 << 20));
  CHECK(exchanges.predict(Func::kAllReduce, Algo::kDirect, Proto::kLL, 1, named.directMaxBytes + 1) > 0);
  REQUIRE(exchanges.choose(Func::kAllReduce, 1 << 20, kAllAlgos, kAllProtos, 0, &c));
  CHECK(c.algo != Algo::kDirect);
  // Tree, Direct and RecDoubling serve AllReduce only, HalvingDoubling ReduceScatter and
  // AllGather too; LL128 has no kernel.
  const uint32_t hd = 1u << static_cast<int>(Algo::kHalvingDoubling), binomial = 1u << static_cast<int>(Algo::kBinomial);
  for (Func f : {Func::kBroadcast, Func::kReduce}) {  // and Binomial serves these two
    CHECK_FALSE(tuner.choose(f, 8, kAllAlgos & ~ring & ~binomial, kAllProtos, 0, &c));
    REQUIRE(tuner.choose(f, 8, binomial, kAllProtos, 0, &c));
    CHECK((c.algo == Algo::kBinomial && c.nChannels == 1));
    REQUIRE(tuner.choose(f, 1 << 20, ring, kAllProtos, 0, &c));
    CHECK(c.algo == Algo::kRing);
  }
  for (Func f : {Func::kAllGather, Func::kReduceScatter}) {
    CHECK_FALSE(tuner.choose(f, 8, kAllAlgos & ~ring & ~hd, kAllProtos, 0, &c));
    REQUIRE(tuner.choose(f, 8, hd, kAllProtos, 0, &c));
    CHECK((c.algo == Algo::kHalvingDoubling && c.nChannels == 1));
  }
  const uint32_t tree = 1u << static_cast<int>(Algo::kTree);
  REQUIRE(tuner.choose(Func::kAllReduce, 8, tree, kAllProtos, 0, &c));
  CHECK(c.algo == Algo::kTree);
  const uint32_t hier2d = 1u << static_cast<int>(Algo::kHier2D);
  REQUIRE(tuner.choose(Func::kAllReduce, 8, hier2d, kAllProtos, 0, &c));
  CHECK((c.algo == Algo::kHier2D && c.nChannels == 1));
  for (Func f : {Func::kBroadcast, Func::kReduce, Func::kAllGather, Func::kReduceScatter}) {
    CHECK_FALSE(tuner.choose(f, 8, tree, kAllProtos, 0, &c));
    CHECK_FALSE(tuner.choose(f, 8, hier2d, kAllProtos, 0, &c));
  }
  // AlltoAll: Direct (modelled as Simple, its sends choose their own protocol), Pairwise and
  // Bruck only; the pairwise and Bruck algorithms serve nothing else.
  const uint32_t pairwise = 1u << static_cast<int>(Algo::kPairwise), bruck = 1u << static_cast<int>(Algo::kBruck);
  CHECK_FALSE(tuner.choose(Func::kAlltoAll, 8, kAllAlgos & ~direct & ~pairwise & ~bruck, kAllProtos, 0, &c));
  CHECK_FALSE(tuner.choose(Func::kAlltoAll, 8, direct, 1u << kLL, 1u << kLL, &c));
  REQUIRE(tuner.choose(Func::kAlltoAll, 1 << 30, direct, kAllProtos, 0, &c));  // no size limit for AlltoAll
  CHECK((c.algo == Algo::kDirect && c.proto == Proto::kSimple && c.nChannels == 1));
  for (Func f : {Func::kBroadcast, Func::kReduce, Func::kAllGather, Func::kReduceScatter, Func::kAllReduce})
    CHECK_FALSE(tuner.choose(f, 8, pairwise | bruck, kAllProtos, 0, &c));
  // LL128 runs on the host only where NCCL_PROTO forces it (never for Direct).
  const uint32_t ll128 = 1u << static_cast<int>(Proto::kLL128);
  for (uint64_t bytes = 8; bytes <= (uint64_t(1) << 30); bytes *= 8) {
    REQUIRE(tuner.choose(Func::kAllReduce, bytes, kAllAlgos, kAllProtos, 0, &c));
    CHECK(c.proto != Proto::kLL128);
  }
  REQUIRE(tuner.choose(Func::kAllReduce, 8, kAllAlgos, ll128, ll128, &c));
  CHECK(c.proto == Proto::kLL128);
  CHECK_FALSE(tuner.choose(Func::kAllReduce, 8, direct, ll128, ll128, &c));
  REQUIRE(tuner.choose(Func::kAlltoAll, 8, kAllAlgos, ll128, ll128, &c));
  CHECK((c.proto == Proto::kLL128 && c.algo != Algo::kDirect));
  // Channel bounds hold for every algorithm but AlltoAll's Direct (sends and receives, one
  // channel); AllReduce's Direct carries one LL step on each channel.
  CostShape s = hostShape(4, 64);
  s.minChannels = s.maxChannels = 3;
  Tuner three(kHostCostTable, s);
  REQUIRE(three.choose(Func::kAllGather, 1 << 20, ring, kAllProtos, 0, &c));
  CHECK(c.nChannels == 3);
  for (Algo a : {Algo::kTree, Algo::kHalvingDoubling, Algo::kRecDoubling, Algo::kBinomial, Algo::kHier2D}) {
    REQUIRE(three.choose(Func::kAllReduce, 1 << 20, 1u << static_cast<int>(a), kAllProtos, 0, &c));
    CHECK((c.algo == a && c.nChannels == 3));
  }
  for (Algo a : {Algo::kPairwise, Algo::kBruck}) {
    REQUIRE(three.choose(Func::kAlltoAll, 1 << 20, 1u << static_cast<int>(a), kAllProtos, 0, &c));
    CHECK((c.algo == a && c.nChannels == 3));
  }
  REQUIRE(three.choose(Func::kAlltoAll, 1 << 20, direct, kAllProtos, 0, &c));
  CHECK((c.algo == Algo::kDirect && c.nChannels == 1));
  CHECK(three.predict(Func::kAllReduce, Algo::kDirect, Proto::kLL, 3, 3 * s.directMaxBytes) > 0);
  CHECK(three.predict(Func::kAllReduce, Algo::kDirect, Proto::kLL, 3, 3 * s.directMaxBytes + 1) < 0);
  // One rank: Direct is a local copy for AllReduce and AlltoAll alike; Ring costs its base
  // latency alone.
  Tuner one(kHostCostTable, hostShape(1, 2));
  CHECK(one.predict(Func::kAllReduce, Algo::kDirect, Proto::kLL, 1, 8) > 0);
  CHECK(one.predict(Func::kAlltoAll, Algo::kDirect, Proto::kSimple, 1, 8) > 0);
  CHECK(one.predict(Func::kAllReduce, Algo::kRing, Proto::kSimple, 1, 1 << 20) ==
        Approx(kHostCostTable.baseLatency[kRing][kSimple]));
}

TEST_CASE("Nodes of BRAID_RANKS_PER_NODE on one host share its CPUs", "[tuner]") {
  // 8 ranks as 4 nodes of 2 on a 2-CPU host: as loaded as 8 ranks on one node, not as 2.
  CostShape s = hostShape(8, 2);
  s.nNodes = 4;
  s.ranksPerNode = 2;
  s.inter = LinkClass::kMemory;
  CostShape alone = s;
  alone.ranksPerCpuSet = 0;  // (what 4 real hosts of 2 CPUs would be)
  s.ranksPerCpuSet = 8;
  const Tuner shared(kHostCostTable, s), separate(kHostCostTable, alone);
  for (Algo a : {Algo::kRing, Algo::kTree}) {
    INFO(algoName(a));
    CHECK(shared.predict(Func::kAllReduce, a, Proto::kSimple, 1, 8) >
          separate.predict(Func::kAllReduce, a, Proto::kSimple, 1, 8));
    CHECK(shared.predict(Func::kAllReduce, a, Proto::kSimple, 1, 1 << 20) >
          separate.predict(Func::kAllReduce, a, Proto::kSimple, 1, 1 << 20));
  }
}

TEST_CASE("The GPU model on the 8xH100 file meets the published figures", "[tuner][gpu]") {
  const Tuner tuner = h100(1);
  CHECK(tuner.shape().intra == LinkClass::kNvlink);
  const uint64_t gib = uint64_t(1) << 30;
  Choice c;
  REQUIRE(tuner.choose(Func::kAllReduce, gib, 1u << kRing, kAllProtos, 0, &c));
  CHECK(c.proto == Proto::kSimple);
  const double bw = busBw(Func::kAllReduce, 8, gib, c.timeUs);
  INFO("predicted ring AllReduce busbw at 1 GiB: " << bw << " GB/s; published about 370");
  CHECK(std::fabs(bw - 370) <= 0.15 * 370);
  // NCCL leaves Ring/LL after 1 MiB (published-busbw.md); the model's switch to Simple must lie
  // within a factor of two of 1-2 MiB.
  uint64_t firstSimple = 0;
  for (uint64_t bytes = 8; bytes <= gib && firstSimple == 0; bytes *= 2) {
    REQUIRE(tuner.choose(Func::kAllReduce, bytes, 1u << kRing, kAllProtos & ~(1u << 1), 0, &c));
    if (c.proto == Proto::kSimple) firstSimple = bytes;
  }
  INFO("first size on Simple: " << firstSimple);
  CHECK(firstSimple >= (uint64_t(1) << 20));
  CHECK(firstSimple <= (uint64_t(4) << 20));
  // More nodes: never faster at a large size than one node's ring, and the LL ceiling falls.
  const Tuner many = h100(16);
  REQUIRE(many.choose(Func::kAllReduce, gib, 1u << kRing, kAllProtos, 0, &c));
  CHECK(busBw(Func::kAllReduce, 128, gib, c.timeUs) <= bw);
  CHECK(many.shape().nRanks == 128);
  // Across 16 nodes the tree's 2 x (7 + 5) hops beat the ring's 2 x 127 on small messages;
  // within one node (a chain, as NCCL's) it never wins.
  CHECK(many.predict(Func::kAllReduce, Algo::kTree, Proto::kLL, 1, 8) <
        many.predict(Func::kAllReduce, Algo::kRing, Proto::kLL, 1, 8));
  // Hier2D's grid is 16 rows (nodes) of 8: 2 x 7 + 2 x 15 steps, the ring's bytes.
  CHECK(many.predict(Func::kAllReduce, Algo::kHier2D, Proto::kLL, 1, 8) <
        many.predict(Func::kAllReduce, Algo::kRing, Proto::kLL, 1, 8));
  CHECK(many.predict(Func::kAllReduce, Algo::kHier2D, Proto::kLL, 1, 8) >
        many.predict(Func::kAllReduce, Algo::kTree, Proto::kLL, 1, 8));
  REQUIRE(many.choose(Func::kAllReduce, 8, kAllAlgos, kAllProtos, 0, &c));
  CHECK(c.algo != Algo::kRing);
  REQUIRE(tuner.choose(Func::kAllReduce, 8, (1u << kRing) | (1u << static_cast<int>(Algo::kTree)), kAllProtos, 0, &c));
  CHECK(c.algo == Algo::kRing);
}

TEST_CASE("The planner's choice honours NCCL_ALGO and names the collective it cannot serve", "[tuner]") {
  plan::PlanLimits limits;
  limits.shape = hostShape(4, 2);
  plan::Task task;
  task.func = kernels::Func::kAllGather;
  task.count = 1000;
  task.dtype = ncclFloat;
  task.name = "ncclAllGather";
  plan::CollPlan p = plan::planCollective(task, 4, limits);
  CHECK(p.choice.algo == Algo::kRing);
  CHECK(p.copy);
  // The tuner counts the gathered buffer: 4 ranks x 4000 bytes.
  const topo::Tuner tuner = plan::tunerFor(4, limits);
  CHECK(p.choice.timeUs == Approx(tuner.predict(Func::kAllGather, p.choice.algo, p.choice.proto, p.nChannels, 16000)));
  limits.mask = plan::parseAlgoProto("Tree,RecDoubling", "");
  task.func = kernels::Func::kAllReduce;
  task.name = "ncclAllReduce";
  CHECK(plan::planCollective(task, 4, limits).choice.algo == Algo::kRecDoubling);
  task.func = kernels::Func::kReduceScatter;
  try {
    plan::planCollective(task, 4, limits);
    FAIL("a filter leaving nothing must throw");
  } catch (const braid::Error& e) {
    CHECK(e.code() == ncclInvalidUsage);
    CHECK_THAT(e.what(), Catch::Contains("for ReduceScatter of 16000 bytes on 4 ranks"));
  }
  limits.mask = plan::parseAlgoProto("^NVLS", "");  // what PyTorch sets
  CHECK_NOTHROW(plan::planCollective(task, 4, limits));
  // Direct's two exchanges (a connection to every rank) only where NCCL_ALGO names Direct, or
  // leaves nothing else: not for a '^' list that merely keeps it.
  CHECK_FALSE(plan::tunerFor(4, limits).shape().directExchanges);
  limits.mask = plan::parseAlgoProto("^Ring,Tree", "");
  CHECK_FALSE(plan::tunerFor(4, limits).shape().directExchanges);
  limits.mask = plan::parseAlgoProto("allreduce:Direct,Ring", "");
  CHECK(plan::tunerFor(4, limits).shape().directExchanges);
  limits.mask = plan::AlgoProtoMask::all();
  for (auto& a : limits.mask.algos) a = 1u << static_cast<int>(plan::EnvAlgo::kDirect);
  CHECK(plan::tunerFor(4, limits).shape().directExchanges);
}

TEST_CASE("NCCL_ALGO and NCCL_PROTO filter AlltoAll only through an 'AlltoAll:' entry", "[tuner]") {
  plan::PlanLimits limits;
  limits.shape = hostShape(5, 2);
  plan::Task task;
  task.func = kernels::Func::kAlltoAll;
  task.count = 3;
  task.dtype = ncclFloat;
  task.name = "ncclAlltoAll";
  // NCCL does not tune AlltoAll: its own filters leave it alone.
  limits.mask = plan::parseAlgoProto("Ring", "LL");
  plan::CollPlan p = plan::planCollective(task, 5, limits);
  CHECK(p.copy);
  CHECK(p.nChannels == 1);
  const topo::Tuner tuner = plan::tunerFor(5, limits);  // the tuner counts the whole input: 5 blocks of 12 bytes
  CHECK(p.choice.timeUs == Approx(tuner.predict(Func::kAlltoAll, p.choice.algo, p.choice.proto, 1, 60)));
  limits.mask = plan::parseAlgoProto("Ring;alltoall:bruck", "");
  p = plan::planCollective(task, 5, limits);
  CHECK(p.choice.algo == Algo::kBruck);
  CHECK(p.scratchBytes == 2 * 3 * 12);  // ceil(5/2) blocks packed, as many arriving
  limits.mask = plan::parseAlgoProto("AlltoAll:Pairwise", "");
  CHECK(plan::planCollective(task, 5, limits).choice.algo == Algo::kPairwise);
  limits.mask = plan::parseAlgoProto("AlltoAll:^Pairwise,Bruck", "");
  CHECK(plan::planCollective(task, 5, limits).choice.algo == Algo::kDirect);
  limits.mask = plan::parseAlgoProto("AllReduce:Tree;AlltoAll:Ring", "");
  try {
    plan::planCollective(task, 5, limits);
    FAIL("a filter leaving nothing must throw");
  } catch (const braid::Error& e) {
    CHECK(e.code() == ncclInvalidUsage);
    CHECK_THAT(e.what(), Catch::Contains("for AlltoAll of 60 bytes on 5 ranks"));
  }
  try {
    plan::parseAlgoProto("AlltoAll:Bruk", "");
    FAIL("an unknown name must throw");
  } catch (const braid::Error& e) {
    CHECK(e.code() == ncclInvalidUsage);
    CHECK_THAT(e.what(), Catch::Contains("unknown name 'Bruk'"));
  }
}

TEST_CASE("AlltoAll's Direct and Pairwise (a connection to every rank) above 8 ranks only where NCCL_ALGO names them",
          "[tuner][scale]") {
  // The model alone: on 9 ranks and more they are no candidates unless the shape allows them.
  for (int n : {9, 64, 1024}) {
    Tuner tuner(kHostCostTable, hostShape(n, 2));
    for (Algo a : {Algo::kDirect, Algo::kPairwise}) {
      CHECK(tuner.predict(Func::kAlltoAll, a, Proto::kSimple, 1, 1 << 20) < 0);
      CHECK(tuner.predict(Func::kAlltoAll, a, Proto::kLL, 1, 1 << 20) < 0);
    }
    CHECK(tuner.predict(Func::kAlltoAll, Algo::kBruck, Proto::kSimple, 1, 1 << 20) > 0);
    CostShape named = tuner.shape();
    named.everyPeerAlltoAll = true;
    Tuner allowed(kHostCostTable, named);
    CHECK(allowed.predict(Func::kAlltoAll, Algo::kPairwise, Proto::kSimple, 1, 1 << 20) > 0);
    CHECK(allowed.predict(Func::kAlltoAll, Algo::kDirect, Proto::kSimple, 1, 1 << 20) > 0);
  }
  Tuner eight(kHostCostTable, hostShape(8, 2));
  CHECK(eight.predict(Func::kAlltoAll, Algo::kPairwise, Proto::kSimple, 1, 1 << 20) > 0);
  CHECK(eight.predict(Func::kAlltoAll, Algo::kDirect, Proto::kSimple, 1, 1 << 20) > 0);

  // Through the planner and NCCL_ALGO.
  plan::PlanLimits limits;
  plan::Task task;
  task.func = kernels::Func::kAlltoAll;
  task.dtype = ncclFloat;
  task.name = "ncclAlltoAll";
  auto choiceAt = [&](int n, uint64_t count, const char* algo) {
    limits.shape = hostShape(n, 2);
    limits.mask = plan::parseAlgoProto(algo, "");
    task.count = count;
    return plan::planCollective(task, n, limits).choice.algo;
  };
  for (int n : {9, 64, 256}) {
    for (uint64_t count : {1, 256, 1 << 18}) {
      CAPTURE(n, count);
      CHECK(choiceAt(n, count, "") == Algo::kBruck);
      CHECK(choiceAt(n, count, "^NVLS") == Algo::kBruck);  // what PyTorch sets
      CHECK(choiceAt(n, count, "AlltoAll:Pairwise") == Algo::kPairwise);
      CHECK(choiceAt(n, count, "AlltoAll:Direct") == Algo::kDirect);
      CHECK(choiceAt(n, count, "AlltoAll:^Bruck") != Algo::kBruck);  // nothing else is left
    }
  }
  // 8 ranks keep every candidate: at 16 KiB a block the pairwise exchange wins here.
  CHECK(choiceAt(8, 4096, "") != Algo::kBruck);
  // A forced choice still runs at any size on many ranks: the plan is made, a block per peer.
  CHECK(choiceAt(1024, 1 << 10, "AlltoAll:Pairwise") == Algo::kPairwise);
  CHECK(plan::tunerFor(64, limits).shape().everyPeerAlltoAll);
  limits.mask = plan::parseAlgoProto("AlltoAll:Direct,Bruck", "");
  CHECK(plan::tunerFor(64, limits).shape().everyPeerAlltoAll);
  limits.mask = plan::parseAlgoProto("AlltoAll:^Direct", "");
  CHECK_FALSE(plan::tunerFor(64, limits).shape().everyPeerAlltoAll);
  limits.mask = plan::parseAlgoProto("AllReduce:Direct", "");
  CHECK_FALSE(plan::tunerFor(64, limits).shape().everyPeerAlltoAll);
}

TEST_CASE("braid-topo --tuning prints the choice per size and every algorithm's bandwidth", "[tuner][tools]") {
  const char* exe = std::getenv("BRAID_TOPO_EXE");
  if (exe == nullptr) FAIL("BRAID_TOPO_EXE is not set (run the tests through meson test)");
  auto run = [](const std::string& command) { return braid::test::runShell(command); };
  const std::string ibm = topoFile("ibm-cloud-gx3d-160x1792x8h100-topo.xml");
  std::string out = run(std::string(exe) + " --tuning --no-detect --topo-file " + ibm);
  CHECK_THAT(out, Catch::EndsWith("exit=0\n"));
  CHECK_THAT(out, Catch::Contains("AllReduce on 8 ranks"));
  CHECK_THAT(out, Catch::Contains("    16 GiB  Ring             Simple"));
  CHECK_THAT(out, Catch::Contains("HalvingDoubling"));
  out = run(std::string(exe) + " --tuning --no-detect --nodes 128 --topo-file " + ibm);
  CHECK_THAT(out, Catch::Contains("AllReduce on 1024 ranks"));
  CHECK_THAT(out, Catch::Contains("1024 ranks on 128 node(s)"));
  out = run("NCCL_ALGO=ring NCCL_PROTO=LL " + std::string(exe) + " --tuning --backend host --ranks 3 --no-detect --topo-file " + ibm);
  CHECK_THAT(out, Catch::Contains("AllReduce on 3 ranks"));
  CHECK_THAT(out, Catch::Contains("     1 GiB  Ring             LL"));
  CHECK_THAT(out, !Catch::Contains("HalvingDoubling\n"));  // the AllReduce table has no column but Ring
  out = run(std::string(exe) + " --tuning --backend tpu");
  CHECK_THAT(out, Catch::Contains("--backend tpu: expected gpu or host"));
  CHECK_THAT(out, Catch::EndsWith("exit=2\n"));
}

TEST_CASE("Sends and receives move as LL up to the backend's threshold or NCCL_P2P_LL_THRESHOLD's", "[tuner]") {
  const CostShape plain;
  CHECK(peerProtocolFor(64, kHostCostTable, plain) == Proto::kLL);
  CHECK(peerProtocolFor(65, kHostCostTable, plain) == Proto::kSimple);
  CHECK(peerProtocolFor(16384, kGpuCostTable, plain) == Proto::kLL);  // NCCL's default
  CHECK(peerProtocolFor(16385, kGpuCostTable, plain) == Proto::kSimple);
  CostShape set;
  set.peerLLMaxBytes = 0;  // NCCL_P2P_LL_THRESHOLD=0: Simple for every size but an empty message
  CHECK(peerProtocolFor(8, kGpuCostTable, set) == Proto::kSimple);
  CHECK(peerProtocolFor(0, kHostCostTable, set) == Proto::kLL);
  set.peerLLMaxBytes = 4096;
  CHECK(peerProtocolFor(4096, kHostCostTable, set) == Proto::kLL);
  CHECK(Tuner(kHostCostTable, set).peerProtocol(4097) == Proto::kSimple);
}
