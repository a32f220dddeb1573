// The cost model and the tuner.
//
// For every candidate of a collective (an algorithm, a protocol, a channel count) the model
// predicts
//   time = latency + bytes each rank moves / bandwidth
//   latency   = the algorithm's base latency for the protocol
//             + its steps within a node x the latency of a step over the node's link
//             + its steps across nodes x the latency of a step over the network
//   bandwidth = channels x the bandwidth of one channel over the slowest link crossed
//             x the protocol's efficiency, capped by the protocol's ceiling, the link's
//             aggregate and the topology's bottleneck (all channels together)
// On the host every channel of every rank is a spinning CPU thread: when a node's ranks run
// more of them than it has CPUs, a step costs a wait for the peer to be scheduled (the
// table's oversubscribed step latency at 2 threads per CPU, in proportion to the threads per
// CPU) and each thread moves bytes for its share of a CPU (an exchange needs both partners
// running at once; a ring's pipeline moves while either neighbour runs, which the table's
// ring share says).
// and the tuner picks the least predicted time among the candidates that NCCL_ALGO/NCCL_PROTO
// allow and Braid's kernels implement, ties going to the earlier algorithm, protocol and the
// fewer channels. Both backends share the model; each has one constant table (tuner.cc says
// where each figure came from). Every rank must choose alike, so the shape holds only what all
// ranks agree on (rank and node counts, link classes, the channel bounds).
//
// Sizes are counted as nccl-tests counts them: AllReduce, Broadcast and Reduce the buffer,
// AllGather the gathered output, ReduceScatter and AlltoAll the whole input.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/work.h"

namespace braid::topo {

/// The link a step crosses.
enum class LinkClass : int { kNvlink = 0, kPcie, kMemory, kNetwork, kCount };
const char* linkClassName(LinkClass link);

constexpr int kTunerAlgos = static_cast<int>(kernels::Algo::kCount);
constexpr int kTunerProtos = static_cast<int>(kernels::Proto::kCount);
constexpr int kTunerLinks = static_cast<int>(LinkClass::kCount);
constexpr int kTunerFuncs = static_cast<int>(kernels::Func::kSendRecv);  ///< the six collectives

/// One backend's constants: µs and GB/s (1 GB/s = 1000 bytes per µs).
struct CostTable {
  const char* name;
  double baseLatency[kTunerAlgos][kTunerProtos];  ///< once per operation
  double hopLatency[kTunerLinks][kTunerProtos];    ///< per step over a link
  double oversubscribedHop[kTunerProtos];          ///< per step within a node running 2 threads per CPU (0: n/a)
  double channelBandwidth[kTunerLinks];            ///< one channel over a link, where the topology gives none
  double aggregateBandwidth[kTunerLinks];          ///< all channels together over a link (0: no cap)
  double ringCpuShare[kTunerProtos];               ///< oversubscribed, a ring thread moves bytes at this many shares of a CPU
  double protoEfficiency[kTunerProtos];            ///< the share of a channel's bandwidth a protocol delivers
  double llReducingEfficiency;                     ///< LL's share for AllReduce and Reduce (which also reduce)
  uint64_t cachedBytes;                            ///< messages up to this size stay in the CPUs' caches (0: none)...
  double cachedSpeedup;                            ///< ...where Simple and LL128 move bytes this many times faster
  double llCeiling[3];                             ///< LL bus bandwidth cap for 1, 2 and 4+ nodes (0: none)
  int bytesPerThread[kTunerProtos];                ///< channels shrink while bytes < channels x threads x this
  bool ll128ByDefault;                             ///< LL128 is a candidate without NCCL_PROTO naming it
  int64_t peerLLMaxBytes;                          ///< a send or receive of up to this many bytes moves as LL
  double connectUs;                                ///< one rank's setup of one connection on one channel, the first time a collective needs it (0: free)
  /// Tree's [0] and Ring's [1] per-step latency over a link beyond hopLatency's (negative:
  /// below it): what a v5 tuner plugin changed in NCCL's per-algorithm hwLatencies
  /// (plan/plugin_choice.h). Zero in the constant tables.
  double hopShift[2][kTunerLinks][kTunerProtos];
};

extern const CostTable kGpuCostTable;
extern const CostTable kHostCostTable;

/// What the model knows of one communicator (the same on every rank).
struct CostShape {
  int nRanks = 1;
  int nNodes = 1;
  int ranksPerNode = 1;              ///< the most ranks any node has
  int cpusPerNode = 0;               ///< the fewest CPUs a node's ranks may run on (0: unknown, never oversubscribed)
  int ranksPerCpuSet = 0;            ///< ranks sharing those CPUs when more than a node's (BRAID_RANKS_PER_NODE nodes of one host); 0: ranksPerNode
  LinkClass intra = LinkClass::kMemory;        ///< a step within a node
  LinkClass inter = LinkClass::kNetwork;       ///< a step across nodes
  double channelBwIntra = 0;         ///< GB/s per channel within a node (0: the table's for `intra`)
  double channelBwInter = 0;         ///< GB/s per channel across nodes (0: the table's for `inter`)
  double bottleneckBw = 0;           ///< GB/s all channels together can reach (0: no cap)
  int minChannels = 1, maxChannels = 1;
  int threads = 512;                 ///< per channel (NCCL_NTHREADS)
  int cpuThreadsPerChannel = 1;      ///< host backend: CPU threads running one channel of one rank
  uint64_t directMaxBytes = 16384;   ///< the most AllReduce's one-shot Direct carries per channel (one LL step of a peer connection)
  /// AllReduce's Direct also beyond one LL step and with Simple (its two-exchange form: a
  /// connection to every rank): only where NCCL_ALGO names Direct for AllReduce (tunerFor).
  bool directExchanges = false;
  /// AllReduce's Direct on more ranks than this (a connection, and its FIFO memory, to every
  /// other rank) only where NCCL_ALGO names it (directExchanges): on 128 ranks the default
  /// choice of Direct ran a 24 GiB machine out of memory (issue 26).
  int directMaxRanks = 8;
  /// AlltoAll's Direct and Pairwise (each a connection to every other rank) on more than
  /// directMaxRanks ranks: only where an 'AlltoAll:' entry of NCCL_ALGO names one of them, or
  /// leaves nothing else (tunerFor); otherwise Bruck (ceil(log2 n) partners) serves there.
  bool everyPeerAlltoAll = false;
  int64_t peerLLMaxBytes = -1;       ///< NCCL_P2P_LL_THRESHOLD: sends and receives up to this size move as LL (-1: the table's)
};

/// The protocol a send or receive of `bytes` moves with: LL up to the shape's threshold (or
/// the table's), else Simple. Both ends compute the same from the same size.
inline kernels::Proto peerProtocolFor(uint64_t bytes, const CostTable& table, const CostShape& shape) {
  const int64_t most = shape.peerLLMaxBytes >= 0 ? shape.peerLLMaxBytes : table.peerLLMaxBytes;
  return static_cast<int64_t>(bytes) <= most ? kernels::Proto::kLL : kernels::Proto::kSimple;
}

/// One candidate and its prediction.
struct Choice {
  kernels::Algo algo = kernels::Algo::kRing;
  kernels::Proto proto = kernels::Proto::kSimple;
  int nChannels = 1;
  double timeUs = 0;
};

struct Graph;
/// The GPU model's shape for `nodes` machines like the one `ring` was searched on: the ring
/// channels' count and bandwidth, their link class (NVLink up to NVB and C2C, else PCIe).
CostShape gpuShape(const Graph& ring, int gpusPerNode, int nodes);

const char* algoName(kernels::Algo a);
const char* protoName(kernels::Proto p);
const char* funcName(kernels::Func f);

/// nccl-tests' bus-bandwidth factor: bus bytes per byte of the collective.
double busFactor(kernels::Func f, int nRanks);

class Tuner {
 public:
  Tuner() = default;
  Tuner(const CostTable& table, const CostShape& shape) : table_(&table), shape_(shape) {}

  const CostTable& table() const { return *table_; }
  const CostShape& shape() const { return shape_; }
  CostShape& shape() { return shape_; }

  /// Whether Braid's kernels run `a` with `p` for `f` (on any number of channels, but for
  /// AlltoAll's Direct: one).
  static bool implemented(kernels::Func f, kernels::Algo a, kernels::Proto p);

  /// The predicted µs of one candidate for `bytes`; negative when it is not a candidate
  /// (not implemented, too large for Direct, a channel count it cannot use).
  double predict(kernels::Func f, kernels::Algo a, kernels::Proto p, int nChannels, uint64_t bytes) const;

  /// The distinct ranks one rank connects to for `a` on one channel (the most any rank does,
  /// the same on every rank): Ring 2, Tree 3 (parent, two children), Hier2D 4 (row and column
  /// neighbours), RecDoubling and HalvingDoubling ceil(log2 n) partners and a folding
  /// neighbour, Binomial and Bruck 2 ceil(log2 n) (me +- 2^k), Direct and Pairwise n-1; never
  /// more than n-1.
  int peersPerChannel(kernels::Algo a) const;

  /// The µs one rank spends making `nChannels` channels of connections for `a` (connectUs per
  /// connection), the first time a collective needs them.
  double setupUs(kernels::Algo a, int nChannels) const;

  /// The protocol a send or receive of `bytes` moves with (peerProtocolFor).
  kernels::Proto peerProtocol(uint64_t bytes) const { return peerProtocolFor(bytes, *table_, shape_); }

  /// A send or receive of `bytes` with protocol `p` on its own: one step over the slowest link.
  double predictPeer(uint64_t bytes, kernels::Proto p) const;

  /// The fastest candidate among the allowed algorithms and protocols (bits of kernels::Algo,
  /// kernels::Proto). `forcedProtos`: the protocols NCCL_PROTO named explicitly, which may be
  /// chosen even where the table keeps them out by default (LL128 on the host). False when
  /// no candidate is left.
  bool choose(kernels::Func f, uint64_t bytes, uint32_t algos, uint32_t protos, uint32_t forcedProtos,
              Choice* out) const;

  /// The latency/bandwidth table NCCL prints at TUNING: per collective, per algorithm and
  /// protocol, the base latency (µs) and bus bandwidth (GB/s) at the most channels.
  std::string describe() const;

 private:
  struct Terms {
    double latency;  ///< µs
    double moved;    ///< bytes each rank moves per byte of the collective
    double bandwidth;  ///< GB/s
  };
  bool terms(kernels::Func f, kernels::Algo a, kernels::Proto p, int nChannels, uint64_t bytes, Terms* out) const;

  const CostTable* table_ = &kHostCostTable;
  CostShape shape_;
};

}  // namespace braid::topo
