// Collectives through the public API, swept over functions, types, ops, counts, rank counts,
// threads/processes, in/out of place, protocols and channel counts. CI runs a seeded sample
// that covers every pair of values of any two dimensions; BRAID_TEST_FULL=1 runs everything.
#include <dirent.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "core/socket.h"
#include "harness/ranks.h"
#include "kernels/types.h"
#include "plan/planner.h"
#include "plan/task.h"
#include "datapath/data_path.h"
#include "test_env.h"

using namespace braid;
using braid::test::expect;

namespace {

enum class Coll { kAllReduce, kReduceScatter, kReduce, kAllGather, kBroadcast, kAlltoAll, kGather, kScatter, kCount };
const char* const kCollNames[] = {"AllReduce", "ReduceScatter", "Reduce", "AllGather", "Broadcast", "AlltoAll", "Gather", "Scatter"};
const ncclRedOp_t kOps[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg, ncclSum /* PreMulSum: created per case */};
const char* const kOpNames[] = {"sum", "prod", "max", "min", "avg", "premulsum"};
const size_t kCounts[] = {0, 1, 7, 1000, (1 << 20) + 3};
const int kRanks[] = {1, 2, 3, 4, 8};

struct Case {
  int coll, dtype, op, count, ranks, processes, inPlace, proto, channels;  ///< proto: 0 LL, 1 Simple, 2 LL128
  int algo = -1;        ///< a plan::EnvAlgo NCCL_ALGO is limited to, or -1: the planner's choice
  int rankCount = 0;    ///< overrides kRanks[ranks] when set
  int channelCount = 0; ///< overrides channels (1 or 3) when set
  int ranksPerNode = 0; ///< BRAID_RANKS_PER_NODE, when set
  int nRanks() const { return rankCount > 0 ? rankCount : kRanks[ranks]; }
  int nChannels() const { return channelCount > 0 ? channelCount : channels ? 3 : 1; }
  std::string describe() const {
    return std::string(kCollNames[coll]) + (algo >= 0 ? " algo=" + std::to_string(algo) : "") + " dtype=" +
           std::to_string(dtype) + " op=" + kOpNames[op] + " count=" + std::to_string(kCounts[count]) +
           " ranks=" + std::to_string(nRanks()) +
           (processes % 2 ? " processes" : " threads") +
           (processes >= 4 ? " over IB" : processes >= 2 ? " over sockets" : "") + (inPlace ? " in-place" : " out-of-place") +
           (proto == 0 ? " LL" : proto == 2 ? " LL128" : " Simple") + " channels=" + std::to_string(nChannels()) +
           (ranksPerNode > 0 ? " ranks-per-node=" + std::to_string(ranksPerNode) : "");
  }
};
constexpr int kDims = 9;
// mode: threads, processes, then the same with every connection through the socket transport,
// then through the verbs transport over the verbs double.
const int kDimSizes[kDims] = {static_cast<int>(Coll::kCount), ncclNumTypes, 6, 5, 5, 6, 2, 2, 2};

int& dim(Case& c, int d) {
  int* fields[] = {&c.coll, &c.dtype, &c.op, &c.count, &c.ranks, &c.processes, &c.inPlace, &c.proto, &c.channels};
  return *fields[d];
}

/// A greedy pairwise covering sample: every value of every dimension meets every value of
/// every other dimension in at least one case. Seeded, so CI runs the same cases each time.
std::vector<Case> pairwiseCases(unsigned seed) {
  std::mt19937 rng(seed);
  std::set<std::tuple<int, int, int, int>> uncovered;
  for (int a = 0; a < kDims; ++a)
    for (int b = a + 1; b < kDims; ++b)
      for (int x = 0; x < kDimSizes[a]; ++x)
        for (int y = 0; y < kDimSizes[b]; ++y) uncovered.insert({a, x, b, y});
  std::vector<Case> cases;
  while (!uncovered.empty()) {
    Case best{};
    size_t bestGain = 0;
    const auto& target = *uncovered.begin();  // make sure each round covers something new
    for (int attempt = 0; attempt < 60; ++attempt) {
      Case c{};
      for (int d = 0; d < kDims; ++d) dim(c, d) = static_cast<int>(rng() % kDimSizes[d]);
      dim(c, std::get<0>(target)) = std::get<1>(target);
      dim(c, std::get<2>(target)) = std::get<3>(target);
      size_t gain = 0;
      for (int a = 0; a < kDims; ++a)
        for (int b = a + 1; b < kDims; ++b) gain += uncovered.count({a, dim(c, a), b, dim(c, b)});
      if (gain > bestGain) {
        bestGain = gain;
        best = c;
      }
    }
    for (int a = 0; a < kDims; ++a)
      for (int b = a + 1; b < kDims; ++b) uncovered.erase({a, dim(best, a), b, dim(best, b)});
    cases.push_back(best);
  }
  return cases;
}

// ---- element values ----------------------------------------------------------------------

size_t sizeOf(int t) { return plan::typeSize(static_cast<ncclDataType_t>(t)); }
bool isFloat(int t) { return t >= ncclFloat16 && t != ncclInt8; }
bool isSmall(int t) { return t == ncclFloat8e4m3 || t == ncclFloat8e5m2; }

void store(int t, void* p, double v) {
  switch (t) {
    case ncclInt8: *static_cast<int8_t*>(p) = static_cast<int8_t>(v); break;
    case ncclUint8: *static_cast<uint8_t*>(p) = static_cast<uint8_t>(v); break;
    case ncclInt32: *static_cast<int32_t*>(p) = static_cast<int32_t>(v); break;
    case ncclUint32: *static_cast<uint32_t*>(p) = static_cast<uint32_t>(v); break;
    case ncclInt64: *static_cast<int64_t*>(p) = static_cast<int64_t>(v); break;
    case ncclUint64: *static_cast<uint64_t*>(p) = static_cast<uint64_t>(v); break;
    case ncclFloat16: *static_cast<kernels::Half*>(p) = kernels::toHalf(static_cast<float>(v)); break;
    case ncclFloat32: *static_cast<float*>(p) = static_cast<float>(v); break;
    case ncclFloat64: *static_cast<double*>(p) = v; break;
    case ncclBfloat16: *static_cast<kernels::BFloat16*>(p) = kernels::toBFloat16(static_cast<float>(v)); break;
    case ncclFloat8e4m3: *static_cast<kernels::Fp8E4M3*>(p) = kernels::toFp8E4M3(static_cast<float>(v)); break;
    default: *static_cast<kernels::Fp8E5M2*>(p) = kernels::toFp8E5M2(static_cast<float>(v)); break;
  }
}

double load(int t, const void* p) {
  switch (t) {
    case ncclInt8: return *static_cast<const int8_t*>(p);
    case ncclUint8: return *static_cast<const uint8_t*>(p);
    case ncclInt32: return *static_cast<const int32_t*>(p);
    case ncclUint32: return *static_cast<const uint32_t*>(p);
    case ncclInt64: return static_cast<double>(*static_cast<const int64_t*>(p));
    case ncclUint64: return static_cast<double>(*static_cast<const uint64_t*>(p));
    case ncclFloat16: return kernels::toFloat(*static_cast<const kernels::Half*>(p));
    case ncclFloat32: return *static_cast<const float*>(p);
    case ncclFloat64: return *static_cast<const double*>(p);
    case ncclBfloat16: return kernels::toFloat(*static_cast<const kernels::BFloat16*>(p));
    case ncclFloat8e4m3: return kernels::toFloat(*static_cast<const kernels::Fp8E4M3*>(p));
    default: return kernels::toFloat(*static_cast<const kernels::Fp8E5M2*>(p));
  }
}

/// Inputs whose reduction is exact in every type and whatever the order.
double inputValue(int op, int t, int rank, uint64_t i) {
  switch (op) {
    case 1: return (rank + i) % 4 == 0 ? 2 : 1;                        // prod: at most two 2s among 8 ranks
    case 2:
    case 3: return static_cast<double>((rank * 3 + i) % (isSmall(t) ? 7 : 11));  // max, min
    default: return static_cast<double>((rank + i) % (isSmall(t) ? 2 : 5));     // sum, avg, premulsum
  }
}

double expectedReduction(int op, int t, int nRanks, uint64_t i) {
  double acc = inputValue(op, t, 0, i);
  for (int r = 1; r < nRanks; ++r) {
    const double v = inputValue(op, t, r, i);
    switch (op) {
      case 1: acc *= v; break;
      case 2: acc = std::max(acc, v); break;
      case 3: acc = std::min(acc, v); break;
      default: acc += v; break;
    }
  }
  if (op == 4) acc = isFloat(t) ? acc / nRanks : std::floor(acc / nRanks);
  if (op == 5) acc *= 2;  // every rank's scalar is 2
  return acc;
}

/// Byte pattern for the copy collectives: distinct per rank and position.
uint8_t patternByte(int rank, uint64_t byte) { return static_cast<uint8_t>(rank * 131 + byte * 7 + 1); }

bool closeEnough(int op, int t, double got, double want) {
  // Avg multiplies each input by 1/n (rounded) and adds: in fp8 e5m2 (2 mantissa bits) every
  // rounding may cost 12.5%, and the order of the additions depends on the algorithm.
  if (op == 4 && isFloat(t)) return std::fabs(got - want) <= (isSmall(t) ? 0.2 : 0.13) * std::fabs(want) + 1e-6;
  return got == want;
}

// ---- one case, on one rank ------------------------------------------------------------------

void runRank(const Case& c, const ncclUniqueId& id, int rank) {
  const int n = c.nRanks();
  const int t = c.dtype;
  const size_t es = sizeOf(t);
  size_t count = kCounts[c.count];
  const Coll coll = static_cast<Coll>(c.coll);
  const bool blockwise = coll == Coll::kAlltoAll || coll == Coll::kGather || coll == Coll::kScatter ||
                         coll == Coll::kAllGather || coll == Coll::kReduceScatter;
  if (blockwise && count * es * n > (16u << 20)) count = ((16u << 20) / es / n) | 1;  // keep memory bounded
  const int root = n - 1 - (c.count % n);
  ncclComm_t comm = nullptr;
  EXPECT_OK(ncclCommInitRank(&comm, n, id, rank));
  plan::PlanLimits& limits = comm->dataPath().limits();
  for (auto& p : limits.mask.protos) p = 1u << (c.proto == 0 ? 0 : c.proto == 2 ? 1 : 2);
  if (c.algo >= 0)
    for (auto& a : limits.mask.algos) a = 1u << c.algo;
  limits.minChannels = limits.maxChannels = c.nChannels();
  if (c.ranksPerNode > 0) comm->dataPath().setRanksPerNode(c.ranksPerNode);
  transport::ConnectorOptions& connector = comm->dataPath().connectorOptions();
  connector.networkOnly = c.processes >= 2;
  if (c.processes >= 4) {
    connector.net = "IB";
    connector.ib.library = test::verbsDouble();
  }

  const size_t inBlocks = (coll == Coll::kReduceScatter || coll == Coll::kAlltoAll || coll == Coll::kScatter) ? n : 1;
  const size_t outBlocks = (coll == Coll::kAllGather || coll == Coll::kAlltoAll || coll == Coll::kGather) ? n : 1;
  std::vector<char> in(std::max<size_t>(1, count * inBlocks * es)), out(std::max<size_t>(1, count * outBlocks * es));
  const bool reduction = coll == Coll::kAllReduce || coll == Coll::kReduceScatter || coll == Coll::kReduce;
  for (size_t b = 0; b < inBlocks; ++b) {
    for (size_t i = 0; i < count; ++i) {
      char* p = in.data() + (b * count + i) * es;
      if (reduction) {
        store(t, p, inputValue(c.op, t, rank, i + b * count));
      } else {
        for (size_t k = 0; k < es; ++k) p[k] = static_cast<char>(patternByte(rank, (b * count + i) * es + k));
      }
    }
  }
  std::memset(out.data(), 0x5a, out.size());

  ncclRedOp_t op = kOps[c.op];
  std::vector<char> two(8);  // read when the operation runs (ncclScalarDevice): must outlive it
  if (c.op == 5) {
    store(t, two.data(), 2.0);
    EXPECT_OK(ncclRedOpCreatePreMulSum(&op, two.data(), static_cast<ncclDataType_t>(t),
                                       rank % 2 ? ncclScalarHostImmediate : ncclScalarDevice, comm));
  }
  // In place: the input is the right block of the output (or the same buffer).
  const void* send = in.data();
  void* recv = out.data();
  if (c.inPlace) {
    if (coll == Coll::kAllGather) {
      std::memcpy(out.data() + rank * count * es, in.data(), count * es);
      send = out.data() + rank * count * es;
    } else if (coll == Coll::kReduceScatter) {
      recv = in.data() + rank * count * es;
    } else if (coll == Coll::kAllReduce || coll == Coll::kReduce || coll == Coll::kBroadcast) {
      std::memcpy(out.data(), in.data(), count * es);
      send = out.data();
    } else if (coll == Coll::kAlltoAll) {  // n blocks in, n out, in the same buffer
      std::memcpy(out.data(), in.data(), count * n * es);
      send = out.data();
    }
  }
  const auto dt = static_cast<ncclDataType_t>(t);
  switch (coll) {
    case Coll::kAllReduce: EXPECT_OK(ncclAllReduce(send, recv, count, dt, op, comm, nullptr)); break;
    case Coll::kReduceScatter: EXPECT_OK(ncclReduceScatter(send, recv, count, dt, op, comm, nullptr)); break;
    case Coll::kReduce: EXPECT_OK(ncclReduce(send, recv, count, dt, op, root, comm, nullptr)); break;
    case Coll::kAllGather: EXPECT_OK(ncclAllGather(send, recv, count, dt, comm, nullptr)); break;
    case Coll::kBroadcast: EXPECT_OK(ncclBroadcast(send, recv, count, dt, root, comm, nullptr)); break;
    case Coll::kAlltoAll: EXPECT_OK(ncclAlltoAll(send, recv, count, dt, comm, nullptr)); break;
    case Coll::kGather: EXPECT_OK(ncclGather(send, recv, count, dt, root, comm, nullptr)); break;
    default: EXPECT_OK(ncclScatter(send, recv, count, dt, root, comm, nullptr)); break;
  }
  if (c.op == 5) EXPECT_OK(ncclRedOpDestroy(op, comm));

  // Check.
  const char* result = static_cast<const char*>(recv);
  auto checkReduced = [&](const char* base, uint64_t offset) {
    for (size_t i = 0; i < count; ++i) {
      const double got = load(t, base + i * es);
      const double want = expectedReduction(c.op, t, n, i + offset);
      if (!closeEnough(c.op, t, got, want)) {  // (the message only on failure: it costs more than the check)
        expect(false, "element " + std::to_string(i) + " is " + std::to_string(got) + ", expected " + std::to_string(want));
      }
    }
  };
  auto checkBytes = [&](const char* base, int fromRank, uint64_t firstByte, size_t bytes) {
    for (size_t k = 0; k < bytes; ++k) {
      if (static_cast<uint8_t>(base[k]) != patternByte(fromRank, firstByte + k)) {
        expect(false, "byte " + std::to_string(k) + " from rank " + std::to_string(fromRank) + " is wrong");
      }
    }
  };
  switch (coll) {
    case Coll::kAllReduce: checkReduced(result, 0); break;
    case Coll::kReduceScatter: checkReduced(result, rank * count); break;
    case Coll::kReduce:
      if (rank == root) checkReduced(result, 0);
      break;
    case Coll::kAllGather:
      for (int r = 0; r < n; ++r) checkBytes(result + r * count * es, r, 0, count * es);
      break;
    case Coll::kBroadcast: checkBytes(result, root, 0, count * es); break;
    case Coll::kAlltoAll:
      for (int r = 0; r < n; ++r) checkBytes(result + r * count * es, r, rank * count * es, count * es);
      break;
    case Coll::kGather:
      if (rank == root) {
        for (int r = 0; r < n; ++r) checkBytes(result + r * count * es, r, 0, count * es);
      }
      break;
    default: checkBytes(result, root, rank * count * es, count * es); break;
  }
  EXPECT_OK(ncclCommDestroy(comm));
}

std::string runCase(const Case& c) {
  if (std::getenv("BRAID_TEST_TRACE")) std::fprintf(stderr, "case: %s\n", c.describe().c_str());
  if (c.processes >= 4 && test::verbsDouble().empty()) {
    WARN("skipped: " << c.describe() << ": built without the verbs headers, so no verbs double");
    return "";
  }
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return "ncclGetUniqueId failed";
  auto body = [&c, id](int rank) { runRank(c, id, rank); };
  return c.processes % 2 ? test::runProcesses(c.nRanks(), body, std::chrono::seconds(120))
                         : test::runThreads(c.nRanks(), body, std::chrono::seconds(120));
}

}  // namespace

TEST_CASE("collectives: pairwise sweep over function, type, op, count, ranks, mode, place, protocol, channels",
          "[integration][collectives][sweep]") {
  std::vector<Case> cases;
  if (std::getenv("BRAID_TEST_FULL") != nullptr) {
    Case c{};
    std::function<void(int)> all = [&](int d) {
      if (d == kDims) {
        cases.push_back(c);
        return;
      }
      for (int v = 0; v < kDimSizes[d]; ++v) {
        dim(c, d) = v;
        all(d + 1);
      }
    };
    all(0);
  } else {
    cases = pairwiseCases(20261129);
  }
  INFO(cases.size() << " cases");
  for (const Case& c : cases) {
    INFO(c.describe());
    REQUIRE(runCase(c) == "");
  }
}

TEST_CASE("RecDoubling AllReduce, HalvingDoubling AllReduce, ReduceScatter and AllGather, Binomial AllReduce, Reduce "
          "and Broadcast, Direct AllReduce: ranks 1 to 9, 1 to 3 channels, counts, types, ops, protocols, places, modes",
          "[integration][algorithms][sweep]") {
  const std::pair<Coll, plan::EnvAlgo> kinds[] = {{Coll::kAllReduce, plan::EnvAlgo::kDirect},
                                                  {Coll::kAllReduce, plan::EnvAlgo::kRecDoubling},
                                                  {Coll::kAllReduce, plan::EnvAlgo::kHalvingDoubling},
                                                  {Coll::kReduceScatter, plan::EnvAlgo::kHalvingDoubling},
                                                  {Coll::kAllGather, plan::EnvAlgo::kHalvingDoubling},
                                                  {Coll::kAllReduce, plan::EnvAlgo::kBinomial},
                                                  {Coll::kReduce, plan::EnvAlgo::kBinomial},
                                                  {Coll::kBroadcast, plan::EnvAlgo::kBinomial}};
  for (const auto& [coll, algo] : kinds) {
    int cases = 0;
    const bool perRankBlocks = coll != Coll::kAllReduce;  // n blocks of the count: the largest on 3 ranks only
    // (Direct: one-shot with LL up to 16 KiB a channel, two exchanges beyond and with Simple)
    for (int ranks = 1; ranks <= 9; ++ranks) {
      for (int count = 0; count < 5; ++count) {
        if (count == 4 && ranks != 3 && (perRankBlocks || ranks != 8)) continue;  // 1M+3: one folded, one power of two
        for (int proto = 0; proto < 2; ++proto) {
          // Types, ops and channels rotate with the other dimensions; processes for every other case.
          const int k = ranks * 10 + count * 2 + proto;
          Case c{static_cast<int>(coll), k % ncclNumTypes, k % 6, count, 0, k % 2, (k / 2) % 2, proto, 0};
          c.algo = static_cast<int>(algo);
          c.rankCount = ranks;
          c.channelCount = 1 + (k / 2) % 3;
          INFO(c.describe());
          REQUIRE(runCase(c) == "");
          ++cases;
        }
      }
    }
    for (int t = 0; t < ncclNumTypes; ++t) {  // every type and op on 5 ranks (one folded in and out)
      for (int op = 0; op < 6; ++op) {
        Case c{static_cast<int>(coll), t, op, 3 /*1000*/, 0, 0, op % 2, (t + op) % 2, 0};
        c.algo = static_cast<int>(algo);
        c.rankCount = 5;
        c.channelCount = 1 + (t + op) % 2;
        INFO(c.describe());
        REQUIRE(runCase(c) == "");
        ++cases;
      }
    }
    CHECK(cases == (perRankBlocks ? 146 : 148));
  }
}

TEST_CASE("Tree and Hier2D AllReduce: ranks 1 to 9, nodes of 1, 2, 3 ranks or one node, 1 to 3 channels, counts, "
          "types, ops, protocols, places, modes", "[integration][algorithms][sweep]") {
  for (const int algo : {static_cast<int>(plan::EnvAlgo::kTree), static_cast<int>(plan::EnvAlgo::kHier2D)}) {
    int cases = 0;
    for (int ranks = 1; ranks <= 9; ++ranks) {
      for (int count = 0; count < 5; ++count) {
        if (count == 4 && ranks != 3 && ranks != 8) continue;  // 1M+3 on 3 and 8 ranks
        for (int proto = 0; proto < 2; ++proto) {
          const int k = ranks * 10 + count * 2 + proto;
          Case c{static_cast<int>(Coll::kAllReduce), k % ncclNumTypes, k % 6, count, 0, k % 2, (k / 2) % 2, proto, 0};
          c.algo = algo;
          c.rankCount = ranks;
          c.ranksPerNode = (k / 3) % 4;  // 0: one node (Tree: a chain; Hier2D: a factorised grid)
          c.channelCount = 1 + (k / 2) % 3;
          INFO(c.describe());
          REQUIRE(runCase(c) == "");
          ++cases;
        }
      }
    }
    // Every type and op on 7 ranks in nodes of 2 (Tree: 3 children at a head; Hier2D: unequal
    // nodes, one row of 7) and on 6 in nodes of 3 (Hier2D: 2 rows of 3).
    for (int t = 0; t < ncclNumTypes; ++t) {
      for (int op = 0; op < 6; ++op) {
        Case c{static_cast<int>(Coll::kAllReduce), t, op, 3 /*1000*/, 0, op % 2, (t + op) % 2, (t + op) % 2, 0};
        c.algo = algo;
        c.rankCount = (t + op) % 2 ? 7 : 6;
        c.ranksPerNode = (t + op) % 2 ? 2 : 3;
        c.channelCount = 2;
        INFO(c.describe());
        REQUIRE(runCase(c) == "");
        ++cases;
      }
    }
    CHECK(cases == 148);
  }
}

TEST_CASE("AlltoAll Direct, Pairwise and Bruck: ranks 1 to 9, 1 to 3 channels, counts, types, protocols, places, modes",
          "[integration][algorithms][sweep]") {
  for (const auto algo : {plan::EnvAlgo::kDirect, plan::EnvAlgo::kPairwise, plan::EnvAlgo::kBruck}) {
    int cases = 0;
    for (int ranks = 1; ranks <= 9; ++ranks) {
      for (int count = 0; count < 5; ++count) {
        if (count == 4 && ranks != 3 && ranks != 8) continue;  // 1M+3 elements per block (bounded to 16 MiB in all)
        for (int proto = 0; proto < 2; ++proto) {
          if (algo == plan::EnvAlgo::kDirect && proto == 0) continue;  // Direct's sends choose their own protocol
          // Types rotate with the other dimensions (a copy: the element size sets the block's bytes).
          const int k = ranks * 10 + count * 2 + proto;
          Case c{static_cast<int>(Coll::kAlltoAll), k % ncclNumTypes, 0, count, 0, k % 2, (k / 2) % 2, proto, 0};
          c.algo = static_cast<int>(algo);
          c.rankCount = ranks;
          c.channelCount = 1 + (k / 2) % 3;  // (Direct runs on one whatever the bounds)
          INFO(c.describe());
          REQUIRE(runCase(c) == "");
          ++cases;
        }
      }
    }
    CHECK(cases == (algo == plan::EnvAlgo::kDirect ? 38 : 76));
  }
  // Over the socket and verbs transports (every connection through the network), 5 and 6 ranks.
  for (const auto algo : {plan::EnvAlgo::kPairwise, plan::EnvAlgo::kBruck}) {
    for (int mode = 2; mode < 6; ++mode) {
      Case c{static_cast<int>(Coll::kAlltoAll), ncclFloat, 0, 3 /*1000*/, 0, mode, mode % 2, mode % 2, 0};
      c.algo = static_cast<int>(algo);
      c.rankCount = 5 + mode % 2;
      c.channelCount = 1 + mode % 2;
      INFO(c.describe());
      REQUIRE(runCase(c) == "");
    }
  }
}

TEST_CASE("LL128 (forced): every algorithm of every collective, ranks 1 to 7, counts, types, ops, places, modes",
          "[integration][collectives][sweep]") {
  using plan::EnvAlgo;
  const std::pair<Coll, EnvAlgo> kinds[] = {
      {Coll::kAllReduce, EnvAlgo::kRing},          {Coll::kAllReduce, EnvAlgo::kTree},
      {Coll::kAllReduce, EnvAlgo::kRecDoubling},   {Coll::kAllReduce, EnvAlgo::kHalvingDoubling},
      {Coll::kAllReduce, EnvAlgo::kBinomial},      {Coll::kAllReduce, EnvAlgo::kHier2D},
      {Coll::kReduceScatter, EnvAlgo::kRing},      {Coll::kReduceScatter, EnvAlgo::kHalvingDoubling},
      {Coll::kAllGather, EnvAlgo::kRing},          {Coll::kAllGather, EnvAlgo::kHalvingDoubling},
      {Coll::kBroadcast, EnvAlgo::kRing},          {Coll::kBroadcast, EnvAlgo::kBinomial},
      {Coll::kReduce, EnvAlgo::kRing},             {Coll::kReduce, EnvAlgo::kBinomial},
      {Coll::kAlltoAll, EnvAlgo::kPairwise},       {Coll::kAlltoAll, EnvAlgo::kBruck}};
  int cases = 0;
  for (const auto& [coll, algo] : kinds) {
    for (const int ranks : {1, 3, 4, 7}) {
      for (int count = 0; count < 5; ++count) {
        if (count != 3 && ranks != 3) continue;  // every count on 3 ranks, 1000 elements on the others
        const int k = cases++;
        Case c{static_cast<int>(coll), k % ncclNumTypes, k % 6, count, 0, k % 2, (k / 2) % 2, 2, 0};
        c.algo = static_cast<int>(algo);
        c.rankCount = ranks;
        c.channelCount = 1 + k % 2;
        c.ranksPerNode = algo == EnvAlgo::kTree || algo == EnvAlgo::kHier2D ? (k / 3) % 3 : 0;
        INFO(c.describe());
        REQUIRE(runCase(c) == "");
      }
    }
  }
  CHECK(cases == 16 * 8);
  for (int mode = 2; mode < 6; ++mode) {  // over the socket and verbs transports (staged, landed flag last)
    Case c{static_cast<int>(mode % 2 ? Coll::kAllReduce : Coll::kAllGather), ncclFloat, 0, 3 /*1000*/, 0, mode, 0, 2, 0};
    c.rankCount = 3;
    INFO(c.describe());
    REQUIRE(runCase(c) == "");
  }
}

TEST_CASE("every type and op on 3 ranks, LL and Simple", "[integration][collectives][sweep]") {
  for (int t = 0; t < ncclNumTypes; ++t) {
    for (int op = 0; op < 6; ++op) {
      for (int proto = 0; proto < 2; ++proto) {
        Case c{static_cast<int>(Coll::kAllReduce), t, op, 3 /*1000*/, 2 /*3 ranks*/, 0, 0, proto, 1};
        INFO(c.describe());
        REQUIRE(runCase(c) == "");
      }
    }
  }
}

TEST_CASE("random floats reduce to bit-identical results on every rank, run after run", "[integration][collectives]") {
  // Ring on 3 ranks; RecDoubling and HalvingDoubling on 3 and 6 ranks (ranks folded in and
  // out); Tree on 5 ranks in nodes of 2 over both trees; Hier2D on 2 nodes of 3; both protocols.
  struct Config {
    int n;
    int algo;  // -1: the planner's choice (Ring at this size)
    int proto;
    size_t count;
  };
  const int rd = static_cast<int>(plan::EnvAlgo::kRecDoubling);
  const int hd = static_cast<int>(plan::EnvAlgo::kHalvingDoubling);
  const int tree = static_cast<int>(plan::EnvAlgo::kTree);
  const int hier2d = static_cast<int>(plan::EnvAlgo::kHier2D);
  for (const Config& config : {Config{3, -1, 2, 300001}, Config{3, rd, 2, 300001}, Config{6, rd, 2, 300001},
                               Config{6, rd, 0, 3001}, Config{3, hd, 2, 300001}, Config{6, hd, 2, 300001},
                               Config{7, hd, 0, 3001}, Config{5, tree, 2, 300001}, Config{5, tree, 0, 3001},
                               Config{6, hier2d, 2, 300001}, Config{6, hier2d, 0, 3001}}) {
    const int n = config.n;
    const size_t count = config.count;
    INFO(n << " ranks, algo " << config.algo << ", proto " << config.proto);
    std::vector<std::vector<float>> results(2 * n);
    for (int run = 0; run < 2; ++run) {
      ncclUniqueId id;
      REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
      REQUIRE(test::runThreads(n, [&](int rank) {
        std::mt19937 rng(1234 + rank);
        std::uniform_real_distribution<float> u(-1000, 1000);
        std::vector<float> in(count);
        for (auto& x : in) x = u(rng);
        ncclComm_t comm = nullptr;
        EXPECT_OK(ncclCommInitRank(&comm, n, id, rank));
        plan::PlanLimits& limits = comm->dataPath().limits();
        for (auto& p : limits.mask.protos) p = 1u << config.proto;
        if (config.algo >= 0)
          for (auto& a : limits.mask.algos) a = 1u << config.algo;
        if (config.algo == tree) {  // two nodes of 2 and one of 1, both trees
          comm->dataPath().setRanksPerNode(2);
          limits.minChannels = limits.maxChannels = 2;
        }
        if (config.algo == hier2d) comm->dataPath().setRanksPerNode(3);  // 2 rows of 3
        results[run * n + rank].resize(count);
        EXPECT_OK(ncclAllReduce(in.data(), results[run * n + rank].data(), count, ncclFloat, ncclSum, comm, nullptr));
        EXPECT_OK(ncclCommDestroy(comm));
      }) == "");
    }
    for (size_t r = 1; r < results.size(); ++r) {
      CHECK(std::memcmp(results[0].data(), results[r].data(), count * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("one thread drives every rank of a ncclCommInitAll set in one group", "[integration][collectives][group]") {
  const int n = 4;
  const size_t count = 100003;
  std::vector<ncclComm_t> comms(n);
  REQUIRE(ncclCommInitAll(comms.data(), n, nullptr) == ncclSuccess);
  std::vector<std::vector<int32_t>> in(n, std::vector<int32_t>(count)), out(n, std::vector<int32_t>(count, -1));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) in[r][i] = static_cast<int32_t>(r * 1000 + i % 13);
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < n; ++r) {
    REQUIRE(ncclAllReduce(in[r].data(), out[r].data(), count, ncclInt32, ncclSum, comms[r], nullptr) == ncclSuccess);
  }
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; i += 997) CHECK(out[r][i] == static_cast<int32_t>(6000 + 4 * (i % 13)));
  }
  // Sends and receives of all ranks in one group: a ring shift, larger than any FIFO.
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < n; ++r) {
    REQUIRE(ncclSend(in[r].data(), count, ncclInt32, (r + 1) % n, comms[r], nullptr) == ncclSuccess);
    REQUIRE(ncclRecv(out[r].data(), count, ncclInt32, (r + n - 1) % n, comms[r], nullptr) == ncclSuccess);
  }
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  for (int r = 0; r < n; ++r) CHECK(out[r] == in[(r + n - 1) % n]);
  for (auto c : comms) REQUIRE(ncclCommDestroy(c) == ncclSuccess);
}

TEST_CASE("point to point: ring shift, self, uneven sizes, several messages per peer", "[integration][p2p]") {
  const int n = 3;
  // The backend's LL threshold (64 bytes on the host: the messages move as Simple), then NCCL's
  // 16 KiB (the first message, 5000-15002 bytes, moves as LL). Ranks that are threads move
  // Simple-sized messages straight into the receiver's buffer, or (NCCL_P2P_DIRECT_DISABLE)
  // through the FIFO.
  for (int64_t llThreshold : {int64_t(-1), int64_t(16384)}) {
  for (bool direct : {true, false}) {
  INFO("NCCL_P2P_LL_THRESHOLD " << llThreshold << ", direct " << direct);
  auto makeBody = [&] {
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    return [id, n, llThreshold, direct](int rank) {
      ncclComm_t comm = nullptr;
      EXPECT_OK(ncclCommInitRank(&comm, n, id, rank));
      comm->dataPath().setPeerLLThreshold(llThreshold);
      comm->dataPath().setPeerDirect(direct);
      const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
      // Uneven: rank r sends 5000*(r+1)+r bytes to next; two messages to next per group; plus self.
      const size_t big = 5000 * (rank + 1) + rank, bigIn = 5000 * (prev + 1) + prev;
      std::vector<uint8_t> a(big), b(300000), self(77, static_cast<uint8_t>(rank));
      for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i * 3 + rank);
      for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 5 + rank);
      std::vector<uint8_t> ra(bigIn), rb(300000), rself(77);
      EXPECT_OK(ncclGroupStart());
      EXPECT_OK(ncclSend(a.data(), a.size(), ncclUint8, next, comm, nullptr));
      EXPECT_OK(ncclSend(b.data(), b.size(), ncclUint8, next, comm, nullptr));
      EXPECT_OK(ncclRecv(ra.data(), ra.size(), ncclUint8, prev, comm, nullptr));
      EXPECT_OK(ncclRecv(rb.data(), rb.size(), ncclUint8, prev, comm, nullptr));
      EXPECT_OK(ncclSend(self.data(), self.size(), ncclUint8, rank, comm, nullptr));
      EXPECT_OK(ncclRecv(rself.data(), rself.size(), ncclUint8, rank, comm, nullptr));
      EXPECT_OK(ncclGroupEnd());
      for (size_t i = 0; i < ra.size(); ++i) expect(ra[i] == static_cast<uint8_t>(i * 3 + prev), "first message");
      for (size_t i = 0; i < rb.size(); ++i) expect(rb[i] == static_cast<uint8_t>(i * 5 + prev), "second message");
      expect(rself == self, "self message");
      EXPECT_OK(ncclCommDestroy(comm));
    };
  };
  REQUIRE(test::runBoth(n, makeBody) == "");
  }
  }
}

TEST_CASE("point to point split over several connections a peer: sizes around every part boundary, exact",
          "[integration][p2p]") {
  const int n = 3;
  constexpr size_t kPart = 128 * 1024;  // (datapath::kPeerPartMinBytes)
  // Each rank sends every size below to its next rank and receives them from its previous one,
  // and one more large message the other way round; the sizes: under one part, at 2, 3 and 4
  // parts and a byte either side, and more than 4 FIFOs' worth.
  const std::vector<size_t> sizes = {0, 1, 2 * kPart - 1, 2 * kPart, 2 * kPart + 1, 3 * kPart + 7, 4 * kPart - 1,
                                     (5 << 20) + 3};
  for (int perPeer : {2, 4}) {
  for (bool direct : {true, false}) {
  INFO(perPeer << " connections a peer, direct " << direct);
  auto makeBody = [&] {
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    return [id, n, perPeer, direct, sizes](int rank) {
      ncclComm_t comm = nullptr;
      EXPECT_OK(ncclCommInitRank(&comm, n, id, rank));
      comm->dataPath().setPeerChannelsPerPeer(perPeer);
      comm->dataPath().setPeerDirect(direct);
      const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
      auto fill = [](std::vector<uint8_t>& v, int from, size_t k) {
        for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i * 7 + i / 4093 + from * 31 + k);
      };
      std::vector<std::vector<uint8_t>> out, in;
      for (size_t k = 0; k < sizes.size(); ++k) {
        out.emplace_back(sizes[k]);
        fill(out.back(), rank, k);
        in.emplace_back(sizes[k], 0xee);
      }
      std::vector<uint8_t> back(3 * kPart + 100), backIn(back.size(), 0xee);
      fill(back, rank, 99);
      EXPECT_OK(ncclGroupStart());
      for (size_t k = 0; k < sizes.size(); ++k) {
        EXPECT_OK(ncclSend(out[k].data(), out[k].size(), ncclUint8, next, comm, nullptr));
        EXPECT_OK(ncclRecv(in[k].data(), in[k].size(), ncclUint8, prev, comm, nullptr));
      }
      EXPECT_OK(ncclSend(back.data(), back.size(), ncclUint8, prev, comm, nullptr));
      EXPECT_OK(ncclRecv(backIn.data(), backIn.size(), ncclUint8, next, comm, nullptr));
      EXPECT_OK(ncclGroupEnd());
      for (size_t k = 0; k < sizes.size(); ++k) {
        std::vector<uint8_t> want(sizes[k]);
        fill(want, prev, k);
        expect(in[k] == want, "message " + std::to_string(k) + " of " + std::to_string(sizes[k]) + " bytes");
      }
      std::vector<uint8_t> want(backIn.size());
      fill(want, next, 99);
      expect(backIn == want, "the message the other way");
      // A lone large send and receive after the group, on the same connections.
      std::vector<float> x(300000, static_cast<float>(rank)), y(x.size(), -1);
      EXPECT_OK(ncclGroupStart());
      EXPECT_OK(ncclSend(x.data(), x.size(), ncclFloat, next, comm, nullptr));
      EXPECT_OK(ncclRecv(y.data(), y.size(), ncclFloat, prev, comm, nullptr));
      EXPECT_OK(ncclGroupEnd());
      expect(y.front() == prev && y.back() == prev && y[150001] == prev, "the lone message");
      EXPECT_OK(ncclCommDestroy(comm));
    };
  };
  REQUIRE(test::runBoth(n, makeBody) == "");
  }
  }
}

TEST_CASE("bad collective arguments are named and nothing runs", "[integration][collectives]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comm = nullptr, other = nullptr;
  REQUIRE(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess);
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  REQUIRE(ncclCommInitRank(&other, 1, id, 0) == ncclSuccess);
  float x[4] = {1, 2, 3, 4};
  auto last = [] { return std::string(ncclGetLastError(nullptr)); };
  CHECK(ncclAllReduce(nullptr, x, 4, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidArgument);
  CHECK(last() == "ncclAllReduce: sendbuff is NULL with count 4");
  CHECK(ncclAllReduce(x, x, 4, static_cast<ncclDataType_t>(12), ncclSum, comm, nullptr) == ncclInvalidArgument);
  CHECK_THAT(last(), Catch::Contains("datatype is 12"));
  CHECK(ncclAllReduce(x, x, 4, ncclFloat, static_cast<ncclRedOp_t>(9), comm, nullptr) == ncclInvalidArgument);
  CHECK_THAT(last(), Catch::Contains("op 9"));
  CHECK(ncclBroadcast(x, x, 4, ncclFloat, 1, comm, nullptr) == ncclInvalidArgument);
  CHECK_THAT(last(), Catch::Contains("root is 1"));
  CHECK(ncclSend(x, 4, ncclFloat, -1, comm, nullptr) == ncclInvalidArgument);
  CHECK_THAT(last(), Catch::Contains("peer is -1"));
  CHECK(ncclAllReduce(x, x, 4, ncclFloat, ncclSum, nullptr, nullptr) == ncclInvalidArgument);
  float scalar = 2;
  ncclRedOp_t op;
  REQUIRE(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarHostImmediate, other) == ncclSuccess);
  CHECK(ncclAllReduce(x, x, 4, ncclFloat, op, comm, nullptr) == ncclInvalidArgument);
  CHECK_THAT(last(), Catch::Contains("not one created on this communicator") || Catch::Contains("neither"));
  CHECK(ncclAllReduce(x, x, 4, ncclDouble, op, other, nullptr) == ncclInvalidArgument);
  CHECK_THAT(last(), Catch::Contains("created for datatype 7"));
  REQUIRE(ncclRedOpDestroy(op, other) == ncclSuccess);
  CHECK(ncclRedOpDestroy(op, other) == ncclInvalidArgument);
  // Nothing ran: x is untouched, and a NULL buffer with count 0 is fine.
  CHECK((x[0] == 1 && x[3] == 4));
  CHECK(ncclAllReduce(nullptr, nullptr, 0, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess);
  // Reduce's receive buffer off the root may be NULL (here the only rank is the root).
  CHECK(ncclReduce(x, nullptr, 4, ncclFloat, ncclSum, 0, comm, nullptr) == ncclInvalidArgument);
  CHECK_THAT(last(), Catch::Contains("recvbuff is NULL"));
  REQUIRE(ncclCommDestroy(other) == ncclSuccess);
  REQUIRE(ncclCommDestroy(comm) == ncclSuccess);
}

TEST_CASE("nonblocking communicators: collectives return ncclInProgress and complete", "[integration][collectives]") {
  const int n = 3;
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  REQUIRE(test::runThreads(n, [&](int rank) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    ncclCommInitRankConfig(&comm, n, id, rank, &config);
    auto settle = [&] { expect(test::settle(comm) == ncclSuccess, "the operation failed"); };
    settle();
    std::vector<float> in(50000, 1.0f + rank), out(50000, 0);
    const ncclResult_t r = ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comm, nullptr);
    expect(r == ncclInProgress || r == ncclSuccess, "allreduce returned " + std::to_string(r));
    settle();
    expect(out[0] == 6.0f && out[49999] == 6.0f, "result " + std::to_string(out[0]));
    EXPECT_OK(ncclCommDestroy(comm));
  }) == "");
}

namespace {
int braidShmSegments() {
  int count = 0;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) count += std::strncmp(e->d_name, "braid-", 6) == 0;
    closedir(d);
  }
  return count;
}
}  // namespace

TEST_CASE("shared-memory segments are unlinked as soon as both sides map them", "[integration][shm]") {
  const int before = braidShmSegments();
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  REQUIRE(test::runProcesses(3, [&](int rank) {
    ncclComm_t comm = nullptr;
    EXPECT_OK(ncclCommInitRank(&comm, 3, id, rank));
    std::vector<double> x(100000, rank);
    EXPECT_OK(ncclAllReduce(x.data(), x.data(), x.size(), ncclDouble, ncclSum, comm, nullptr));
    expect(x[5] == 3.0, "allreduce result");
    if (rank == 0) std::_Exit(0);  // a rank that vanishes without destroying anything
    EXPECT_OK(ncclCommDestroy(comm));
  }) == "");
  CHECK(braidShmSegments() == before);
}

TEST_CASE("ncclCommAbort from another thread ends a collective that waits for a peer", "[integration][failure]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  std::vector<ncclComm_t> comms(2, nullptr);
  REQUIRE(test::runThreads(2, [&](int rank) { EXPECT_OK(ncclCommInitRank(&comms[rank], 2, id, rank)); }) == "");
  std::vector<float> x(1000, 1);
  ncclResult_t result = ncclSuccess;
  std::string text;
  std::thread waiter([&] {  // rank 0 alone: rank 1 never joins the collective
    result = ncclAllReduce(x.data(), x.data(), x.size(), ncclFloat, ncclSum, comms[0], nullptr);
    text = ncclGetLastError(nullptr);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(ncclCommAbort(comms[0]) == ncclSuccess);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
  waiter.join();
  CHECK(result == ncclInvalidUsage);
  CHECK_THAT(text, Catch::Contains("aborted"));
  REQUIRE(ncclCommDestroy(comms[1]) == ncclSuccess);
}

TEST_CASE("small AllReduce gives the same bits Direct and Ring; Direct alone carries a large one in two exchanges",
          "[integration][collectives]") {
  const int n = 4;
  const size_t count = 333;  // 1332 bytes: within Direct's limit
  std::vector<std::vector<float>> results(2 * n);
  for (int pass = 0; pass < 2; ++pass) {
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    REQUIRE(test::runThreads(n, [&](int rank) {
      ncclComm_t comm = nullptr;
      EXPECT_OK(ncclCommInitRank(&comm, n, id, rank));
      plan::PlanLimits& limits = comm->dataPath().limits();
      for (auto& a : limits.mask.algos) a = 1u << static_cast<int>(pass == 0 ? plan::EnvAlgo::kDirect : plan::EnvAlgo::kRing);
      std::vector<float> in(count);
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(rank + 1) / 3.0f + static_cast<float>(i);
      results[pass * n + rank].resize(count);
      EXPECT_OK(ncclAllReduce(in.data(), results[pass * n + rank].data(), count, ncclFloat, ncclSum, comm, nullptr));
      if (pass == 0) {
        // Beyond one LL step Direct runs as two exchanges (Simple), exact; LL128 it refuses.
        std::vector<float> big(100003);
        for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>((i + rank) % 7);
        EXPECT_OK(ncclAllReduce(big.data(), big.data(), big.size(), ncclFloat, ncclSum, comm, nullptr));
        bool exact = true;
        for (size_t i = 0; i < big.size(); ++i) {
          float want = 0;
          for (int q = 0; q < n; ++q) want += static_cast<float>((i + q) % 7);
          exact = exact && big[i] == want;
        }
        expect(exact, "Direct-only large AllReduce: wrong result");
        for (auto& p : limits.mask.protos) p = 1u << 1;  // LL128 alone (another size: choices are kept per size)
        expect(ncclAllReduce(big.data(), big.data(), big.size() - 1, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidUsage,
               "Direct with LL128 must be refused");
        expect(std::string(ncclGetLastError(nullptr)).find("leave no algorithm and protocol Braid implements for AllReduce") != std::string::npos,
               ncclGetLastError(nullptr));
      }
      EXPECT_OK(ncclCommDestroy(comm));
    }) == "");
  }
  for (int r = 1; r < n; ++r) {
    CHECK(results[r] == results[0]);          // Direct: identical bits on every rank
    CHECK(results[n + r] == results[n]);      // Ring: identical bits on every rank
  }
  for (size_t i = 0; i < count; ++i) CHECK(std::fabs(results[0][i] - results[n][i]) <= 1e-3f * (1 + std::fabs(results[n][i])));
}

TEST_CASE("ncclGroupSimulateEnd reports the tuner's prediction and runs nothing", "[integration][collectives][tuner]") {
  const int n = 3;
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  REQUIRE(test::runThreads(n, [&](int rank) {
    ncclComm_t comm = nullptr;
    EXPECT_OK(ncclCommInitRank(&comm, n, id, rank));
    const size_t count = 100000;
    std::vector<float> in(count, 1.0f), out(count * n, -1.0f);
    plan::Task allReduce;
    allReduce.func = kernels::Func::kAllReduce;
    allReduce.count = count;
    allReduce.dtype = ncclFloat;
    plan::Task allGather = allReduce;
    allGather.func = kernels::Func::kAllGather;
    const plan::PlanLimits& limits = comm->dataPath().limits();
    const double expected = plan::chooseFor(allReduce, n, limits).timeUs + plan::chooseFor(allGather, n, limits).timeUs;

    ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
    EXPECT_OK(ncclGroupStart());
    EXPECT_OK(ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comm, nullptr));
    EXPECT_OK(ncclAllGather(in.data(), out.data(), count, ncclFloat, comm, nullptr));
    EXPECT_OK(ncclGroupSimulateEnd(&sim));
    expect(std::fabs(sim.estimatedTime - expected) <= 1e-3 * expected, "estimatedTime " + std::to_string(sim.estimatedTime) +
           " us, the tuner predicts " + std::to_string(expected));
    expect(sim.estimatedTime > 0, "a positive estimate");
    for (float v : out) expect(v == -1.0f, "nothing ran");

    // Afterwards the communicator runs normally: nothing of the simulated group lingers.
    EXPECT_OK(ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comm, nullptr));
    for (size_t i = 0; i < count; ++i) expect(out[i] == static_cast<float>(n), "AllReduce after the simulation");

    // An empty group predicts nothing; bad input is named.
    EXPECT_OK(ncclGroupStart());
    EXPECT_OK(ncclGroupSimulateEnd(&sim));
    expect(sim.estimatedTime == 0.0f, "an empty group takes no time");
    expect(ncclGroupSimulateEnd(&sim) == ncclInvalidUsage, "without ncclGroupStart");
    expect(std::string(ncclGetLastError(nullptr)).find("without a matching ncclGroupStart") != std::string::npos,
           ncclGetLastError(nullptr));
    ncclSimInfo_t bad = NCCL_SIM_INFO_INITIALIZER;
    bad.magic = 0;
    EXPECT_OK(ncclGroupStart());
    expect(ncclGroupSimulateEnd(&bad) == ncclInvalidArgument, "a simInfo without its magic");
    expect(std::string(ncclGetLastError(nullptr)).find("NCCL_SIM_INFO_INITIALIZER") != std::string::npos,
           ncclGetLastError(nullptr));
    EXPECT_OK(ncclGroupEnd());  // the bad call left the group open
    EXPECT_OK(ncclCommDestroy(comm));
  }) == "");
}

TEST_CASE("LL and LL128 copies of bytes at every alignment: AllGather and Broadcast, exact, nothing around touched",
          "[integration][collectives]") {
  // The line protocols copy the user's bytes in the widest words both addresses allow (8, 4,
  // 2 or 1 bytes; primitives.h, copyRun): buffers 0 to 8 bytes off, counts about LL's 8-byte
  // and LL128's 120-byte lines and 16-byte lanes.
  const int n = 3;
  const size_t counts[] = {1, 7, 8, 9, 15, 16, 17, 119, 120, 121, 241, 1001, 4099};
  const std::pair<size_t, size_t> offsets[] = {{0, 0}, {1, 1}, {2, 6}, {4, 4}, {3, 8}, {8, 5}, {7, 2}};
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  REQUIRE(test::runThreads(n, [&](int rank) {
    ncclComm_t comm = nullptr;
    EXPECT_OK(ncclCommInitRank(&comm, n, id, rank));
    plan::PlanLimits& limits = comm->dataPath().limits();
    for (auto& a : limits.mask.algos) a = 1u << static_cast<int>(plan::EnvAlgo::kRing);
    limits.minChannels = limits.maxChannels = 2;
    const uint8_t guard = 0xa5;
    int cases = 0;
    for (const kernels::Proto proto : {kernels::Proto::kLL, kernels::Proto::kLL128}) {
      for (auto& p : limits.mask.protos) p = 1u << static_cast<int>(proto);
      for (const auto& [sendOff, recvOff] : offsets) {
        for (const size_t count : counts) {
          const std::string what = "protocol " + std::to_string(static_cast<int>(proto)) + ", count " +
                                   std::to_string(count) + ", offsets " + std::to_string(sendOff) + "/" +
                                   std::to_string(recvOff);
          std::vector<uint8_t> in(count + 16), out(count * n + 16, guard);
          for (size_t i = 0; i < count; ++i) in[sendOff + i] = patternByte(rank, i);
          EXPECT_OK(ncclAllGather(in.data() + sendOff, out.data() + recvOff, count, ncclUint8, comm, nullptr));
          size_t wrong = 0;
          for (size_t i = 0; i < out.size(); ++i) {
            const bool inside = i >= recvOff && i < recvOff + count * n;
            const size_t at = i - recvOff;
            wrong += out[i] != (inside ? patternByte(static_cast<int>(at / count), at % count) : guard);
          }
          expect(wrong == 0, "AllGather, " + what + ": " + std::to_string(wrong) + " bytes wrong");
          std::fill(out.begin(), out.end(), guard);
          EXPECT_OK(ncclBroadcast(in.data() + sendOff, out.data() + recvOff, count, ncclUint8, 1, comm, nullptr));
          wrong = 0;
          for (size_t i = 0; i < out.size(); ++i) {
            const bool inside = i >= recvOff && i < recvOff + count;
            wrong += out[i] != (inside ? patternByte(1, i - recvOff) : guard);
          }
          expect(wrong == 0, "Broadcast, " + what + ": " + std::to_string(wrong) + " bytes wrong");
          ++cases;
        }
      }
    }
    expect(cases == 2 * 7 * 13, "every case ran");
    EXPECT_OK(ncclCommDestroy(comm));
  }, std::chrono::seconds(120)) == "");
}

TEST_CASE("credit lines: a ring whose senders end before their receivers map the senders' lines, 4 processes, 20 times",
          "[integration][collectives][credit]") {
  // Reduce of 7 elements on one Simple channel: a rank's steps fit the free slots, so it may
  // finish and destroy its communicator while the next rank is still taking hold of its FIFO
  // (and of the sender's credit line, which is gone by then). Seen as "cannot open the sender's
  // credit segment" in the pairwise sweep.
  Case c{};
  c.coll = static_cast<int>(Coll::kReduce);
  c.dtype = ncclFloat;
  c.op = 0;
  c.count = 2;  // (7 elements)
  c.ranks = 3;  // (4 ranks)
  c.processes = 1;
  c.proto = 1;
  for (int round = 0; round < 20; ++round) {
    INFO("round " << round);
    REQUIRE(runCase(c) == "");
  }
}
