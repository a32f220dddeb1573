#include "topology/tuner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "topology/grid.h"
#include "topology/search.h"
#include "topology/trees.h"

namespace braid::topo {

using kernels::Algo;
using kernels::Func;
using kernels::Proto;

// GPUs: NCCL 2.28's published figures for Hopper (../shared/reference/nccl-facts.md). NCCL
// gives base latencies for Tree and Ring only; Direct, RecDoubling, HalvingDoubling,
// Binomial, Hier2D, Pairwise and Bruck are given Ring's (the same kernels' launch and FIFO costs).
// Per-step latency: Ring's per-hop figures per link; over the network Ring's plus NCCL's
// per-step network overhead on Intel (1 µs, three times that for Simple). Channel bandwidth
// comes from the topology's ring search; the figures here (NVLink 4 link 20.6, PCIe Gen4 x16
// 24, NCCL's default network 12 GB/s) stand in where the topology gives none. Protocol
// efficiency: LL128 x 0.92; Ring LL x 1/3, and x 1/4 for AllReduce and Reduce, as NCCL's
// ring-LL refinement has it (nccl-facts.md's single x 0.5 predicts 65 GB/s busbw for an
// 8-GPU 1 MiB AllReduce where NCCL measures 40, published-busbw.md, and puts the LL-to-Simple
// switch at 5 MiB where NCCL leaves LL at 1-2 MiB; a quarter gives 52 GB/s and 2.7 MiB).
// The LL ceilings are Hopper's for 1, 2 and 4+ nodes. NCCL has no figures for the algorithms
// over point-to-point connections: a byte they move costs what a ring's does, on as many
// channels. (So on an NVSwitch machine, where every pair of GPUs has the rings' bandwidth,
// HalvingDoubling is predicted the ring's bandwidth in fewer steps and chosen for large
// AllReduce: a prediction no GPU has measured yet.)
// Channels shrink as NCCL's do: each thread should have at least 8 (LL, LL128) or 64
// (Simple) bytes.
const CostTable kGpuCostTable = {
    "GPU (NCCL's published Hopper figures)",
    /*baseLatency*/ {{6.8, 14, 8.4}, {6.6, 14, 8.4}, {6.6, 14, 8.4}, {6.6, 14, 8.4}, {6.6, 14, 8.4}, {6.6, 14, 8.4},
                    {6.6, 14, 8.4}, {6.6, 14, 8.4}, {6.6, 14, 8.4}},
    /*hopLatency*/ {{0.6, 1.9, 3.4}, {1.0, 2.5, 5.7}, {1.0, 2.5, 5.7}, {3.7, 5.0, 17.0}},
    /*oversubscribedHop*/ {0, 0, 0},
    /*channelBandwidth*/ {20.6, 24, 24, 12},
    /*aggregateBandwidth*/ {0, 0, 0, 0},
    /*ringCpuShare*/ {1, 1, 1},
    /*protoEfficiency*/ {1.0 / 3, 0.92, 1.0},
    /*llReducingEfficiency*/ 0.25,
    /*cachedBytes*/ 0,
    /*cachedSpeedup*/ 1,
    /*llCeiling*/ {141, 45, 35},
    /*bytesPerThread*/ {8, 8, 64},
    /*ll128ByDefault*/ true,
    /*peerLLMaxBytes*/ 16384,  // NCCL_P2P_LL_THRESHOLD's default
    /*connectUs*/ 100,  // an estimate (FIFO memory mapped from a peer, one exchange): no GPU has run Braid's setup
    /*hopShift*/ {},
};

// The host backend: measured by perf/calibrate_host.sh on the development machine (2 CPUs,
// 24 GiB, Debian 12, `perf/calibrate_host.sh build-dev`, medians of 3 runs, two runs on
// 2026-12-02 averaged where they agreed; the script says how each figure is fitted). At 8 bytes
// and 2 ranks every algorithm takes 0.4-0.7 us; Ring at 4 ranks 7-9 us (LL, Simple), every
// step waiting for a descheduled peer. Ring/Simple at 64 MiB, 2 ranks: 22.6-23.5 ms on 1
// channel, 21.2-22.1 ms on 2 (a second channel's threads oversubscribe the CPUs; the 5% they
// add is within noise, and an aggregate above one channel's made the tuner pick two channels
// where perf/tuner_bench.sh measured them slower); at 16 MiB on 4 ranks RecDoubling and HalvingDoubling move a byte at 0.87-0.91
// times the ring's speed, within this machine's noise (repeated runs differ by up to 2x), so a
// byte costs the same in every algorithm. A message that stays in the caches (64 KiB) moves
// 2.0 times faster by Simple than one that leaves them (1 MiB and up; the cut at 256 KiB lies
// between the two sizes measured); LL does not gain (its speed is its flag polling's: 0.9-1.0
// GB/s at 64 KiB and 1 MiB, 0.3 of the channel). Oversubscribed (4 ranks, 1 MiB), the ring's
// Simple moves bytes at 2.4 shares of a CPU (its pipeline moves while either neighbour runs),
// LL's at 0.8 (a waiting receiver polls, taking its peer's CPU time). Over the socket transport
// on loopback: 23 us at 8 bytes, 37-56 ms at 64 MiB. Every algorithm shares the base latency.
// LL128 copies Simple's latencies; its efficiency is from one run of all_reduce_perf on 2
// ranks (Ring, 1 MiB: 1155 us against Simple's 524 and LL's 5000); it gains nothing over
// Simple on CPUs and is never chosen unless NCCL_PROTO names it. NVLink and PCIe rows are
// never used on the host and copy memory's. Sends and receives move as LL up to 64 bytes only
// (sendrecv_perf, 2 processes, 3 interleaved runs: LL 0.71-0.78 us at 8 bytes against Simple's
// 0.82-0.84, even at 128, then Simple ahead: 512 B 1.0 against 1.9, 2 KiB 1.6 against 5.4,
// 8 KiB 2.6-3.2 against 26; NCCL's 16 KiB is a GPU figure). A connection's setup: the first
// 8-byte AllReduce on 8 processes (all_reduce_perf -w 0 -n 1 against -w 3 -n 1, 5 runs each,
// a compile loading the CPUs) took 110 us more than a warm one with Direct (7 new peers), 114
// with RecDoubling (4), 73 with Ring (channel 0's ring, which every first collective makes):
// 40 us for Direct's peers beyond it at 4 ranks per CPU, about 1.5 us per connection and rank
// per CPU; RecDoubling's, 10. 3 us, scaled by the ranks per CPU.
const CostTable kHostCostTable = {
    "host (measured on 2 CPUs by perf/calibrate_host.sh)",
    /*baseLatency*/ {{0.26, 0.16, 0.16}, {0.26, 0.16, 0.16}, {0.26, 0.16, 0.16}, {0.26, 0.16, 0.16}, {0.26, 0.16, 0.16},
                    {0.26, 0.16, 0.16}, {0.26, 0.16, 0.16}, {0.26, 0.16, 0.16}, {0.26, 0.16, 0.16}},
    /*hopLatency*/ {{0.19, 0.26, 0.26}, {0.19, 0.26, 0.26}, {0.19, 0.26, 0.26}, {11.4, 11.6, 11.6}},
    /*oversubscribedHop*/ {1.0, 1.47, 1.47},
    /*channelBandwidth*/ {2.9, 2.9, 2.9, 1.5},
    /*aggregateBandwidth*/ {2.9, 2.9, 2.9, 1.5},
    /*ringCpuShare*/ {0.8, 2.4, 2.4},
    /*protoEfficiency*/ {0.30, 0.45, 1.0},
    /*llReducingEfficiency*/ 0.30,
    /*cachedBytes*/ 256 << 10,
    /*cachedSpeedup*/ 2.0,
    /*llCeiling*/ {0, 0, 0},
    /*bytesPerThread*/ {0, 0, 0},
    /*ll128ByDefault*/ false,
    /*peerLLMaxBytes*/ 64,
    /*connectUs*/ 3,  // see above
    /*hopShift*/ {},
};

const char* linkClassName(LinkClass link) {
  static const char* const names[] = {"NVLink", "PCIe", "memory", "network"};
  const int i = static_cast<int>(link);
  return i >= 0 && i < kTunerLinks ? names[i] : "?";
}

const char* algoName(Algo a) {
  static const char* const names[] = {"Tree",     "Ring",   "Direct",   "RecDoubling", "HalvingDoubling",
                                      "Binomial", "Hier2D", "Pairwise", "Bruck"};
  const int i = static_cast<int>(a);
  return i >= 0 && i < kTunerAlgos ? names[i] : "?";
}

const char* protoName(Proto p) {
  static const char* const names[] = {"LL", "LL128", "Simple"};
  const int i = static_cast<int>(p);
  return i >= 0 && i < kTunerProtos ? names[i] : "?";
}

const char* funcName(Func f) {
  static const char* const names[] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce", "AlltoAll", "SendRecv"};
  const int i = static_cast<int>(f);
  return i >= 0 && i <= kTunerFuncs ? names[i] : "?";
}

CostShape gpuShape(const Graph& ring, int gpusPerNode, int nodes) {
  CostShape s;
  s.nNodes = std::max(1, nodes);
  s.ranksPerNode = std::max(1, gpusPerNode);
  s.nRanks = s.nNodes * s.ranksPerNode;
  s.intra = ring.typeIntra <= PathType::C2c ? LinkClass::kNvlink : LinkClass::kPcie;
  s.inter = LinkClass::kNetwork;
  s.channelBwIntra = ring.bwIntra;
  s.channelBwInter = s.nNodes > 1 ? ring.bwInter : 0;
  s.minChannels = 1;
  s.maxChannels = std::max<int>(1, static_cast<int>(ring.channels.size()));
  return s;
}

bool Tuner::implemented(Func f, Algo a, Proto p) {
  if (static_cast<int>(f) >= kTunerFuncs) return false;
  if (f == Func::kAlltoAll) {  // Direct runs as sends and receives, each with its own protocol: modelled as Simple
    return (a == Algo::kDirect && p == Proto::kSimple) || a == Algo::kPairwise || a == Algo::kBruck;
  }
  switch (a) {
    case Algo::kRing: return true;
    case Algo::kTree: return f == Func::kAllReduce;
    case Algo::kDirect: return f == Func::kAllReduce && p != Proto::kLL128;  // (Simple: CostShape::directExchanges)
    case Algo::kRecDoubling: return f == Func::kAllReduce;
    case Algo::kHalvingDoubling: return f == Func::kAllReduce || f == Func::kReduceScatter || f == Func::kAllGather;
    case Algo::kBinomial: return f == Func::kAllReduce || f == Func::kReduce || f == Func::kBroadcast;
    case Algo::kHier2D: return f == Func::kAllReduce;
    default: return false;
  }
}

namespace {

int floorLog2(int n) {
  int k = 0;
  while ((2 << k) <= n) ++k;
  return k;
}
int ceilLog2(int n) { return n <= 1 ? 0 : floorLog2(n - 1) + 1; }

/// The share of the data one rank sends in all of Bruck's rounds: in the round of distance d,
/// the blocks i < n with bit d set.
double bruckShare(int n) {
  int blocks = 0;
  for (int d = 1; d < n; d *= 2)
    for (int i = 0; i < n; ++i) blocks += (i & d) != 0;
  return static_cast<double>(blocks) / n;
}

/// The transfers of round k (k = 0 .. ceil(log2 n) - 1) of a binomial Broadcast on n ranks:
/// the ranks that hold the data and have a child at distance m = 2^(ceil(log2 n)-1-k), the
/// multiples of 2m below n - m.
int binomialTransfers(int n, int k) {
  const int m = (1 << ceilLog2(n)) >> (k + 1);
  return m >= 1 && n > m ? (n - m + 2 * m - 1) / (2 * m) : 0;
}

}  // namespace

double busFactor(Func f, int n) {
  if (f == Func::kAllReduce) return 2.0 * (n - 1) / n;
  if (f == Func::kAllGather || f == Func::kReduceScatter || f == Func::kAlltoAll) return static_cast<double>(n - 1) / n;
  return 1.0;
}

bool Tuner::terms(Func f, Algo a, Proto p, int c, uint64_t bytes, Terms* out) const {
  const CostShape& s = shape_;
  const CostTable& t = *table_;
  const int n = std::max(1, s.nRanks);
  const int nodes = std::clamp(s.nNodes, 1, n);
  const bool allToAll = f == Func::kAlltoAll;
  if (!implemented(f, a, p) || c < 1) return false;
  // AlltoAll's Direct is sends and receives of a block each, which pick their own protocol.
  const Proto moving = a == Algo::kDirect && allToAll ? peerProtocol(bytes / n) : p;
  const int pi = static_cast<int>(moving);
  if (a == Algo::kDirect && allToAll && c != 1) return false;  // sends and receives: one thread, one channel
  // AllReduce's Direct: one-shot, each channel's slice one LL step (slices are whole multiples
  // of 64 bytes); beyond that, and with Simple, two exchanges, where the user named Direct.
  const bool exchanges = a == Algo::kDirect && !allToAll &&
                         (p == Proto::kSimple || bytes > s.directMaxBytes * static_cast<uint64_t>(c));
  if (exchanges && !s.directExchanges) return false;
  if (a == Algo::kDirect && !allToAll && n > s.directMaxRanks && !s.directExchanges) return false;
  const bool everyPeer = a == Algo::kPairwise || a == Algo::kDirect;
  if (allToAll && everyPeer && n > s.directMaxRanks && !s.everyPeerAlltoAll) return false;

  // Threads per CPU on the busiest node: above 1, a step waits for its peer to be scheduled,
  // longer the more threads share each CPU (the table's figure is for 2).
  const int sharing = std::max(s.ranksPerNode, s.ranksPerCpuSet);
  const double load =
      s.cpusPerNode > 0 ? static_cast<double>(sharing) * c * std::max(1, s.cpuThreadsPerChannel) / s.cpusPerNode : 0;
  const bool oversubscribed = t.oversubscribedHop[pi] > 0 && load > 1;
  int steps = 0, interSteps = 0;
  double moved = 0;
  const int pow2 = 1 << floorLog2(n);
  const int fold = n > pow2 ? 2 : 0;  // the extra ranks folded in and out
  switch (a) {
    case Algo::kRing:
      steps = f == Func::kAllReduce ? 2 * (n - 1) : n - 1;
      interSteps = f == Func::kAllReduce ? 2 * (nodes - 1) : nodes - 1;
      moved = f == Func::kBroadcast || f == Func::kReduce ? (n > 1 ? 1.0 : 0.0) : busFactor(f, n);
      break;
    case Algo::kTree: {  // up the tree then down it, pipelined: every byte in and out of a rank about twice
      const int perNode = (n + nodes - 1) / nodes;
      steps = 2 * treeDepth(nodes, perNode);
      interSteps = 2 * treeDepth(nodes, 1);
      moved = n > 1 ? 2.0 : 0.0;
      break;
    }
    case Algo::kHier2D: {  // rings along rows, then columns, then rows: the ring's bytes in fewer steps
      int rows = 1, cols = 1;
      gridShape(n, nodes, std::max(1, s.ranksPerNode), &rows, &cols);
      steps = 2 * (cols - 1) + 2 * (rows - 1);
      interSteps = nodes > 1 && rows == nodes ? 2 * (rows - 1) : std::min(steps, 2 * (nodes - 1));
      moved = busFactor(f, n);
      break;
    }
    case Algo::kDirect:  // AllReduce: every rank's whole vector to every other; AlltoAll: a block to each
      // On oversubscribed CPUs AlltoAll's one thread per rank serves its n-1 peers as each is
      // scheduled, and its round robin waits once more: n steps (perf/tuner_bench.sh COLL=alltoall:
      // on 4 and 8 ranks of 2 CPUs, Direct took 1.1-1.8x Pairwise's time from 64 KiB to 1 MiB).
      steps = allToAll && oversubscribed ? n : 1;
      interSteps = nodes > 1 ? 1 : 0;
      moved = allToAll ? busFactor(f, n) : n - 1;
      if (exchanges) {  // 2(n-1) exchanges of a chunk each: the ring's bytes
        steps = 2 * (n - 1);
        interSteps = nodes > 1 ? 2 * (n - 1) : 0;
        moved = busFactor(f, n);
      }
      break;
    case Algo::kPairwise: {  // one peer per step; the steps to other nodes cross the network
      const int perNode = (n + nodes - 1) / nodes;
      steps = n - 1;
      interSteps = nodes > 1 ? n - perNode : 0;
      moved = busFactor(f, n);
      break;
    }
    case Algo::kBruck:  // log2 steps of about half the data, each packed before and unpacked after (as costly again)
      steps = ceilLog2(n);
      interSteps = std::min(steps, ceilLog2(nodes));
      moved = 2 * bruckShare(n);
      break;
    case Algo::kRecDoubling:
      steps = floorLog2(n) + fold;
      interSteps = std::min(steps, ceilLog2(nodes));
      moved = steps;
      break;
    case Algo::kHalvingDoubling:
      if (f == Func::kAllReduce) {
        steps = 2 * floorLog2(n) + fold;
        interSteps = std::min(steps, 2 * ceilLog2(nodes));
        moved = 2.0 * (pow2 - 1) / pow2 + fold;  // folding: the whole vector in, the whole result out
      } else {  // ReduceScatter's halving or AllGather's doubling alone
        steps = floorLog2(n) + fold;
        interSteps = std::min(steps, ceilLog2(nodes));
        moved = static_cast<double>(pow2 - 1) / pow2 + (fold > 0 ? 1.0 + 1.0 / n : 0.0);  // folding: all, and a block
      }
      break;
    case Algo::kBinomial: {  // store-and-forward down (or up) the tree; the root handles ceil(log2 n) copies
      const int levels = ceilLog2(n);
      const int twice = f == Func::kAllReduce ? 2 : 1;
      steps = twice * levels;
      interSteps = std::min(steps, twice * ceilLog2(nodes));
      moved = steps;
      break;
    }
    default:
      return false;
  }
  // A step over a link: Tree's and Ring's as a tuner plugin's constants may have moved them.
  const int shifted = a == Algo::kTree ? 0 : a == Algo::kRing ? 1 : -1;
  auto hop = [&](LinkClass link) {
    const int l = static_cast<int>(link);
    return t.hopLatency[l][pi] + (shifted >= 0 ? t.hopShift[shifted][l][pi] : 0.0);
  };
  // A step waits for a descheduled peer longer the more threads share each CPU.
  auto hopAt = [&](double threadsPerCpu) {
    return t.oversubscribedHop[pi] > 0 && threadsPerCpu > 1 ? t.oversubscribedHop[pi] * threadsPerCpu / 2
                                                            : hop(s.intra);
  };
  // The ring's Broadcast and Reduce are a chain: a wavefront wakes one rank at a time while the
  // others nap, so its steps wait as on idle CPUs (perf/tuner_bench.sh, 8 B on 4 and 8 processes
  // of 2 CPUs: Broadcast 1.0 and 2.2 us, Reduce 0.9 and 2.6, where steps at the whole load
  // predicted 4.6 and 21).
  const bool chain = a == Algo::kRing && (f == Func::kBroadcast || f == Func::kReduce);
  const double intraHop = oversubscribed && !chain ? hopAt(load) : hop(s.intra);
  // Nodes that share the link class of a node's ranks (BRAID_RANKS_PER_NODE on one host) share
  // its CPUs too: their steps wait alike.
  const double interHop = s.inter == s.intra ? intraHop : hop(s.inter);
  out->latency = t.baseLatency[static_cast<int>(a)][pi] + (steps - interSteps) * intraHop + interSteps * interHop;
  // Oversubscribed, a binomial round keeps only its transfers' threads busy (the others sleep
  // in their wait): round k's t_k transfers wait at 2 t_k / n of the load and move bytes at
  // max(1, t_k / n of it), each transfer's pair of threads moving about one CPU's worth
  // (perf/tuner_bench.sh, Broadcast and Reduce, 4 and 8 processes on 2 CPUs: at 8 B 7.8-9.7 us
  // on 8 ranks where every step at the whole load predicted 16-23; at 64 MiB 40-60 ms on 4
  // ranks and 109-137 ms on 8 where the whole load predicted 93 and 278).
  const bool binomialRounds = a == Algo::kBinomial && oversubscribed && (nodes == 1 || s.inter == s.intra);
  if (binomialRounds) {
    const int twice = f == Func::kAllReduce ? 2 : 1;
    out->latency = t.baseLatency[static_cast<int>(a)][pi];
    moved = 0;
    for (int k = 0; k < ceilLog2(n); ++k) {
      const double share = static_cast<double>(binomialTransfers(n, k)) / n;
      out->latency += twice * hopAt(2 * share * load);
      moved += twice * std::max(1.0, share * load);
    }
  }

  const double intraBw = s.channelBwIntra > 0 ? s.channelBwIntra : t.channelBandwidth[static_cast<int>(s.intra)];
  const double interBw = s.channelBwInter > 0 ? s.channelBwInter : t.channelBandwidth[static_cast<int>(s.inter)];
  double perChannel = nodes > 1 ? std::min(intraBw, interBw) : intraBw;
  double bw = c * perChannel;
  const double aggregate = nodes > 1 ? t.aggregateBandwidth[static_cast<int>(s.inter)] : 0;
  for (double cap : {t.aggregateBandwidth[static_cast<int>(s.intra)], aggregate, s.bottleneckBw})
    if (cap > 0) bw = std::min(bw, cap);
  const bool reducing = f == Func::kAllReduce || f == Func::kReduce;
  bw *= moving == Proto::kLL && reducing ? t.llReducingEfficiency : t.protoEfficiency[pi];
  const double ceiling = t.llCeiling[nodes == 1 ? 0 : nodes == 2 ? 1 : 2];
  if (moving == Proto::kLL && ceiling > 0) bw = std::min(bw, ceiling);
  // Oversubscribed, only the ring keeps its pipeline moving while ranks wait to be scheduled
  // (each rank waits on one neighbour); a tree rank waits on up to three children and its
  // parent, and Hier2D's phases wait for each other: they move bytes at 1/load like the
  // exchanges (BRAID_RANKS_PER_NODE=2, 8 processes on 2 CPUs: Tree took 1.4x the ring's time
  // at 64 KiB and 2.5x at 1 MiB). The ring's Broadcast pipelines down its chain as the ring
  // does (4 and 8 processes, 64 MiB, Simple: 23.5 and 45.7 ms; the ring's share predicts 23.1
  // and 38.6, 1/load 46 and 93); its Reduce, which also adds at every rank, moves at 1/load
  // (39.7 and 73.5 ms; 1/load predicts 46 and 93, the share 23 and 39). Binomial's rounds
  // count their own load (above).
  const bool pipelined = a == Algo::kRing && f != Func::kReduce;
  if (oversubscribed && !binomialRounds) bw *= std::min(1.0, (pipelined ? t.ringCpuShare[pi] : 1.0) / load);
  // A message that stays in the caches moves faster by copies (Simple, LL128); LL's speed is
  // its flag polling's, the same at every size.
  if (moving != Proto::kLL && bytes <= t.cachedBytes) bw *= t.cachedSpeedup;
  out->moved = moved;
  out->bandwidth = bw;
  return bw > 0;
}

double Tuner::predict(Func f, Algo a, Proto p, int nChannels, uint64_t bytes) const {
  Terms t;
  if (!terms(f, a, p, nChannels, bytes, &t)) return -1;
  return t.latency + static_cast<double>(bytes) * t.moved / (1000.0 * t.bandwidth);
}

int Tuner::peersPerChannel(Algo a) const {
  const int n = std::max(1, shape_.nRanks);
  int peers = n - 1;
  switch (a) {
    case Algo::kRing: peers = 2; break;
    case Algo::kTree: peers = 3; break;
    case Algo::kHier2D: peers = 4; break;
    case Algo::kRecDoubling:
    case Algo::kHalvingDoubling: peers = ceilLog2(n) + 1; break;
    case Algo::kBinomial:
    case Algo::kBruck: peers = 2 * ceilLog2(n); break;
    default: break;  // Direct, Pairwise: every other rank
  }
  return std::min(peers, n - 1);
}

double Tuner::setupUs(Algo a, int nChannels) const {
  // On the host both ends of a connection spend CPU time on it, and every rank connects at
  // once: where a node's ranks oversubscribe its CPUs, each waits for the others' share.
  const CostShape& s = shape_;
  const int sharing = std::max(s.ranksPerNode, s.ranksPerCpuSet);
  const double load = table_->oversubscribedHop[0] > 0 && s.cpusPerNode > 0
                          ? std::max(1.0, static_cast<double>(sharing) / s.cpusPerNode)
                          : 1.0;
  return table_->connectUs * load * peersPerChannel(a) * std::max(0, nChannels);
}

double Tuner::predictPeer(uint64_t bytes, Proto p) const {
  // A two-rank Broadcast has the same shape: one step, the bytes once, one channel.
  Tuner pair(*table_, shape_);
  pair.shape_.nRanks = 2;
  pair.shape_.nNodes = std::min(2, std::max(1, shape_.nNodes));
  return pair.predict(Func::kBroadcast, Algo::kRing, p, 1, bytes);
}

bool Tuner::choose(Func f, uint64_t bytes, uint32_t algos, uint32_t protos, uint32_t forcedProtos, Choice* out) const {
  const CostShape& s = shape_;
  bool found = false;
  for (int ai = 0; ai < kTunerAlgos; ++ai) {
    if (!(algos & (1u << ai))) continue;
    for (int pi = 0; pi < kTunerProtos; ++pi) {
      const Proto p = static_cast<Proto>(pi);
      if (!(protos & (1u << pi))) continue;
      if (p == Proto::kLL128 && !table_->ll128ByDefault && !(forcedProtos & (1u << pi))) continue;
      const int minC = std::max(1, s.minChannels);
      for (int c = minC; c <= std::max(minC, s.maxChannels); ++c) {
        // NCCL's rule: a channel more only while each of its threads still has enough bytes.
        const uint64_t perThread = static_cast<uint64_t>(table_->bytesPerThread[pi]);
        if (c > minC && perThread > 0 && bytes < static_cast<uint64_t>(c) * s.threads * perThread) break;
        const double time = predict(f, static_cast<Algo>(ai), p, c, bytes);
        if (time < 0) continue;
        if (!found || time < out->timeUs) {
          *out = Choice{static_cast<Algo>(ai), p, c, time};
          found = true;
        }
      }
      // AlltoAll's Direct is sends and receives, on one channel whatever the bounds.
      if (f == Func::kAlltoAll && static_cast<Algo>(ai) == Algo::kDirect && minC > 1) {
        const double time = predict(f, Algo::kDirect, p, 1, bytes);
        if (time >= 0 && (!found || time < out->timeUs)) {
          *out = Choice{Algo::kDirect, p, 1, time};
          found = true;
        }
      }
    }
  }
  return found;
}

std::string Tuner::describe() const {
  const CostShape& s = shape_;
  std::string text;
  char line[256];
  snprintf(line, sizeof(line), "Tuner: %s; %d ranks on %d node(s), steps over %s within a node%s%s, channels %d..%d",
           table_->name, s.nRanks, s.nNodes, linkClassName(s.intra), s.nNodes > 1 ? " and " : "",
           s.nNodes > 1 ? linkClassName(s.inter) : "", s.minChannels, s.maxChannels);
  text += line;
  text += "\n  latency (us) / bus bandwidth (GB/s) at the most channels, per algorithm and protocol";
  for (int fi = 0; fi < kTunerFuncs; ++fi) {
    const Func f = static_cast<Func>(fi);
    snprintf(line, sizeof(line), "\n  %-13s", funcName(f));
    text += line;
    for (int ai = 0; ai < kTunerAlgos; ++ai) {
      for (int pi = 0; pi < kTunerProtos; ++pi) {
        const Algo a = static_cast<Algo>(ai);
        const Proto p = static_cast<Proto>(pi);
        if (!implemented(f, a, p)) continue;
        Terms t;
        const int c = a == Algo::kDirect && f == Func::kAlltoAll ? 1 : std::max(s.minChannels, s.maxChannels);
        const uint64_t probe = a == Algo::kDirect && f != Func::kAlltoAll ? s.directMaxBytes * c : uint64_t(1) << 30;
        if (!terms(f, a, p, c, probe, &t)) continue;
        const double bus = t.moved > 0 ? t.bandwidth * busFactor(f, std::max(1, s.nRanks)) / t.moved : 0;
        snprintf(line, sizeof(line), " | %s/%s %.1f/%.2f", algoName(a), protoName(p), t.latency, bus);
        text += line;
      }
    }
  }
  return text;
}

}  // namespace braid::topo
