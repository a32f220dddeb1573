// DataPathSettings from NCCL's and Braid's knobs: FIFO sizes, channels, the network transports'
// settings; and the send/recv connections' FIFO step, which depends on the rank count.
#include "datapath/data_path.h"

#include <algorithm>

#include "core/log.h"
#include "core/params.h"
#include "datapath/algorithm_peers.h"
#include "topology/paths.h"

namespace braid::datapath {

namespace {
constexpr int kHostDefaultMaxChannels = 2;
// A block each; the tuner gives small messages fewer. NCCL's rings on Hopper's NVLink take
// 16-32 channels; ranks that share a GPU split what it keeps resident (capChannels).
constexpr int kDeviceDefaultMaxChannels = 32;
constexpr uint32_t kP2pSimpleStepBytes = 128 * 1024;
constexpr uint32_t kP2pLLStepLines = 2048;  // 16 KiB of payload per step
constexpr uint32_t kP2pLL128StepLines = 256;  // 30 KiB of payload per step (LL128 only when NCCL_PROTO forces it)

/// An NCCL_IB_* integer within [low, high]; out of range: a warning and `fallback`.
int ibKnob(params::Store& p, const char* name, int low, int high, int fallback) {
  const int64_t v = p.integer(name);
  if (v >= low && v <= high) return static_cast<int>(v);
  BRAID_WARN("%s=%lld is outside %d..%d; using %d", name, static_cast<long long>(v), low, high, fallback);
  return fallback;
}

transport::ib::Settings ibSettingsFromParams(params::Store& p) {
  transport::ib::Settings ib;
  ib.library = p.string("BRAID_IBVERBS_LIBRARY");
  ib.hca = p.string("NCCL_IB_HCA");
  ib.gidIndex = ibKnob(p, "NCCL_IB_GID_INDEX", -1, 255, -1);
  ib.trafficClass = ibKnob(p, "NCCL_IB_TC", -1, 255, -1);
  ib.serviceLevel = ibKnob(p, "NCCL_IB_SL", -1, 15, -1);
  ib.ackTimeout = ibKnob(p, "NCCL_IB_TIMEOUT", 1, 31, 20);
  ib.retryCount = ibKnob(p, "NCCL_IB_RETRY_CNT", 0, 7, 7);
  return ib;
}

/// GPU Direct RDMA's knobs, for the verbs transport and net plugins alike (the allocator and
/// the GPU are the data path's).
transport::GpuDirectPolicy gpuDirectFromParams(params::Store& p) {
  transport::GpuDirectPolicy g;
  g.dmabuf = p.integer("NCCL_DMABUF_ENABLE") != 0;
  g.read = ibKnob(p, "NCCL_NET_GDR_READ", -1, 1, -1);
  g.level = topo::levelFromParams("NCCL_NET_GDR_LEVEL", topo::PathType::Pxb);
  g.forceFlush = p.integer("NCCL_NET_FORCE_FLUSH") != 0;
  return g;
}

/// One protocol's FIFO bytes per connection (NCCL_BUFFSIZE and its kin), or `fallback`, with
/// a warning, when the value lies outside [lo, hi] (`range` says so in words).
int64_t fifoBytes(params::Store& p, const char* name, int64_t lo, int64_t hi, int64_t fallback, const char* range) {
  const int64_t v = p.integer(name);
  if (v >= lo && v <= hi) return v;
  BRAID_WARN("%s=%lld is outside %s; using %lld", name, static_cast<long long>(v), range,
             static_cast<long long>(fallback));
  return fallback;
}
/// A channel count in 1..kMaxChannels, or `fallback` with a warning.
int channelKnob(params::Store& p, const char* name, int fallback) {
  const int64_t v = p.integer(name);
  if (v >= 1 && v <= kMaxChannels) return static_cast<int>(v);
  BRAID_WARN("%s=%lld must be 1..%d; using %d", name, static_cast<long long>(v), kMaxChannels, fallback);
  return fallback;
}

/// The most threads a host channel runs on (BRAID_HOST_THREADS_PER_CHANNEL).
constexpr int kMaxThreadsPerChannel = 64;

/// NCCL_MIN_NCHANNELS or NCCL_MAX_NCHANNELS: 1..kMaxChannels, or -2 (the default: automatic)
/// as 0. Above kMaxChannels it is kMaxChannels, any other value automatic (`automatic` says
/// what that is), each with a WARN once.
int channelCountKnob(params::Store& p, const char* name, const std::string& automatic) {
  const int64_t v = p.integer(name);
  if (v == -2) return 0;
  if (v >= 1 && v <= kMaxChannels) return static_cast<int>(v);
  const bool above = v > kMaxChannels;
  if (p.firstWarning(name)) {
    BRAID_WARN("%s=%lld must be 1..%d; using %s", name, static_cast<long long>(v), kMaxChannels,
               above ? std::to_string(kMaxChannels).c_str() : automatic.c_str());
  }
  return above ? kMaxChannels : 0;
}
}  // namespace

// NCCL's 128 KiB chunks up to 8 ranks and on a GPU. On the host above 8 ranks a rank's log-n
// algorithms reach up to 3 ceil(log2 n) partners (me +- 2^k for Binomial and Bruck, me xor 2^k
// for RecDoubling and HalvingDoubling), each a connection whose FIFO a large message fills:
// their Simple slots share NCCL_BUFFSIZE (one ring connection's), so that what a rank keeps
// after large messages does not grow with n (issue 26); at least 16 KiB a step.
uint32_t peerSimpleStepBytes(uint32_t ringStepBytes, int nRanks, bool onDevice) {
  if (onDevice || nRanks <= 8) return kP2pSimpleStepBytes;
  const uint64_t budget = uint64_t(ringStepBytes) * kernels::kSteps;
  const uint64_t step = budget / (uint64_t(kernels::kSteps) * logPeersBound(nRanks));
  return static_cast<uint32_t>(std::clamp<uint64_t>(step, 16 * 1024, kP2pSimpleStepBytes)) & ~63u;
}

// As NCCL: the sends and receives' channels are the collectives' (maxChannels) within
// NCCL_MIN/MAX_P2P_NCHANNELS, and a peer gets as many of them as its link carries. NCCL reads
// that from NVLink widths (up to 32 on Hopper's NVSwitch); Braid, measuring nothing yet on a
// GPU, gives a peer 4 there and 1 on the host (one CPU thread runs a group's sends and
// receives), at most NCCL_NCHANNELS_PER_NET_PEER (2) when a communicator spans hosts, fewer
// as more ranks share the channels (NCCL halves it while perPeer x ranks > 4 x total), and a
// power of two. BRAID_P2P_CHANNELS_PER_PEER sets the automatic value.
PeerChannels peerChannels(const DataPathSettings& s, int nRanks, bool spansHosts, bool onDevice) {
  PeerChannels c;
  c.total = std::clamp(s.limits.maxChannels, s.minP2pChannels, s.maxP2pChannels);
  c.total = std::clamp(c.total, 1, kMaxChannels);
  int want = s.peerChannels > 0 ? s.peerChannels : (onDevice ? 4 : 1);
  if (spansHosts) want = std::min(want, s.netPeerChannels);
  want = std::min(want, c.total);
  while (want > 1 && int64_t(want) * nRanks > 4 * int64_t(c.total)) want /= 2;
  int pow2 = 1;
  while (pow2 * 2 <= want) pow2 *= 2;
  c.perPeer = pow2;
  return c;
}

uint64_t peerPartBytes(uint64_t bytes, int perPeer) {
  const uint64_t parts = std::clamp<uint64_t>(bytes / kPeerPartMinBytes, 1, static_cast<uint64_t>(std::max(1, perPeer)));
  if (parts == 1) return bytes;
  const uint64_t each = (bytes + parts - 1) / parts;
  return (each + 511) & ~uint64_t{511};
}

DataPathSettings DataPathSettings::fromParams(const CommConfig& config, bool onDevice) {
  return fromParams(params::process(), config, onDevice);
}

DataPathSettings DataPathSettings::fromParams(params::Store& p, const CommConfig& config, bool onDevice) {
  DataPathSettings s;
  const int64_t buff = fifoBytes(p, "NCCL_BUFFSIZE", 64 * 1024, int64_t(1) << 30, 4 << 20, "64 KiB..1 GiB");
  const int64_t llBuff = fifoBytes(p, "NCCL_LL_BUFFSIZE", 8 * 1024, int64_t(1) << 28, 512 << 10, "8 KiB..256 MiB");
  const int64_t ll128Buff = fifoBytes(p, "NCCL_LL128_BUFFSIZE", 8 * 1024, int64_t(1) << 28, 4915200, "8 KiB..256 MiB");
  s.connector.ring.simpleStepBytes = static_cast<uint32_t>(buff / kernels::kSteps) & ~63u;
  s.connector.ring.llStepLines = static_cast<uint32_t>(llBuff / kernels::kSteps / sizeof(kernels::LLLine));
  s.connector.ring.ll128StepLines = static_cast<uint32_t>(ll128Buff / kernels::kSteps / sizeof(kernels::LL128Line));
  s.connector.p2p.simpleStepBytes = kP2pSimpleStepBytes;
  s.connector.p2p.llStepLines = kP2pLLStepLines;
  s.connector.p2p.ll128StepLines = kP2pLL128StepLines;
  s.connector.shmDisabled = p.integer("NCCL_SHM_DISABLE") == 1;
  s.connector.p2pDisabled = p.integer("NCCL_P2P_DISABLE") == 1;
  s.connector.net = p.string("NCCL_NET");
  s.connector.ibDisabled = p.integer("NCCL_IB_DISABLE") == 1;
  s.connector.ib = ibSettingsFromParams(p);
  s.connector.gpuDirect = gpuDirectFromParams(p);
  const int64_t threads = p.integer("NCCL_SOCKET_NTHREADS");
  const int64_t perThread = p.integer("NCCL_NSOCKS_PERTHREAD");
  if (threads < 1 || threads > 16 || perThread < 1 || threads * perThread > 64) {
    BRAID_WARN("NCCL_SOCKET_NTHREADS=%lld x NCCL_NSOCKS_PERTHREAD=%lld must be 1..16 x at least 1, at most 64 sockets; "
               "using 1 socket per connection", static_cast<long long>(threads), static_cast<long long>(perThread));
  } else {
    s.connector.nSockets = static_cast<int>(threads * perThread);
  }
  const int64_t hostThreads = p.integer("BRAID_HOST_THREADS_PER_CHANNEL");
  s.threadsPerChannel = static_cast<int>(std::clamp<int64_t>(hostThreads, 1, kMaxThreadsPerChannel));
  if (s.threadsPerChannel != hostThreads && p.firstWarning("BRAID_HOST_THREADS_PER_CHANNEL")) {
    BRAID_WARN("BRAID_HOST_THREADS_PER_CHANNEL=%lld must be 1..%d; using %d", static_cast<long long>(hostThreads),
               kMaxThreadsPerChannel, s.threadsPerChannel);
  }
  s.limits.shape.cpuThreadsPerChannel = s.threadsPerChannel;
  const int defaultMax = onDevice ? kDeviceDefaultMaxChannels : kHostDefaultMaxChannels;
  const int minEnv = channelCountKnob(p, "NCCL_MIN_NCHANNELS", "1 (automatic)");
  const int maxEnv = channelCountKnob(p, "NCCL_MAX_NCHANNELS", std::to_string(defaultMax) + " (automatic)");
  s.limits.maxChannels = std::min<int>(config.maxCTAs, maxEnv > 0 ? maxEnv : defaultMax);
  if (onDevice) s.limits.table = &topo::kGpuCostTable;
  s.limits.minChannels = std::max<int>(config.minCTAs, minEnv > 0 ? minEnv : 1);
  s.limits.maxChannels = std::clamp(s.limits.maxChannels, 1, kMaxChannels);
  s.limits.minChannels = std::clamp(s.limits.minChannels, 1, kMaxChannels);
  if (s.limits.minChannels > s.limits.maxChannels) s.limits.maxChannels = s.limits.minChannels;
  s.limits.mask = plan::parseAlgoProto(p.string("NCCL_ALGO"), p.string("NCCL_PROTO"));
  const int64_t peerLL = p.integer("NCCL_P2P_LL_THRESHOLD");
  if (peerLL >= 0) s.limits.shape.peerLLMaxBytes = peerLL;
  const int64_t nThreads = p.integer("NCCL_NTHREADS");
  if (nThreads != -2 && (nThreads < 64 || nThreads > 512 || nThreads % 64 != 0)) {
    BRAID_WARN("NCCL_NTHREADS=%lld must be a multiple of 64 in 64..512; using 512", static_cast<long long>(nThreads));
  } else if (nThreads > 0) {
    s.limits.shape.threads = static_cast<int>(nThreads);
  }
  s.checkMismatch = p.integer("BRAID_CHECK_MISMATCH") != 0;
  s.peerDirect = p.integer("NCCL_P2P_DIRECT_DISABLE") != 1;
  const int64_t perNode = p.integer("BRAID_RANKS_PER_NODE");
  if (perNode < 0 || perNode > 65536) {
    BRAID_WARN("BRAID_RANKS_PER_NODE=%lld must be 0 (nodes are hosts) or a rank count; using 0", static_cast<long long>(perNode));
  } else {
    s.ranksPerNode = static_cast<int>(perNode);
  }
  const int64_t perPeer = p.integer("BRAID_P2P_CHANNELS_PER_PEER");
  if (perPeer < 0 || perPeer > kMaxChannels) {
    BRAID_WARN("BRAID_P2P_CHANNELS_PER_PEER=%lld must be 0 (automatic) or 1..%d; using 0", static_cast<long long>(perPeer),
               kMaxChannels);
  } else {
    s.peerChannels = static_cast<int>(perPeer);
  }
  s.minP2pChannels = channelKnob(p, "NCCL_MIN_P2P_NCHANNELS", 1);
  s.maxP2pChannels = channelKnob(p, "NCCL_MAX_P2P_NCHANNELS", kMaxChannels);
  s.netPeerChannels = channelKnob(p, "NCCL_NCHANNELS_PER_NET_PEER", 2);
  s.graphRegister = p.integer("NCCL_GRAPH_REGISTER") != 0;
  s.watchdog = WatchdogSettings::fromParams();
  s.commName = config.commName;
  return s;
}

}  // namespace braid::datapath
