// The data path of one communicator: its connections, its executor threads, and the loop that
// turns a group's tasks into kernel runs. On the host backend the kernels run here, on the
// calling thread and the executor's; with a runtime::Device (the CUDA backend) the same plans
// are enqueued as kernels on the user's stream instead, and a call returns at once.
#pragma once

#include <array>
#include <atomic>
#include <deque>
#include <map>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/params.h"
#include "comm/config.h"
#include "datapath/launch_batch.h"
#include "comm/peer_info.h"
#include "plan/planner.h"
#include "runtime/device.h"
#include "runtime/host/executor.h"
#include "datapath/offered_buffers.h"
#include "runtime/host/scratch.h"
#include "runtime/host/slot_prefault.h"
#include "datapath/watchdog.h"
#include "transport/connector.h"
#include "transport/suspend.h"

namespace braid {
class RegistrationTable;
}
namespace braid::bootstrap {
class Bootstrap;
}
namespace braid::plugin {
class TunerSession;
class ProfilerSession;
}
namespace braid::proxy {
class OpTrace;
class ControlWatch;
}

namespace braid::datapath {

// The data path drives the CPU executor (the host backend's kernels; the CUDA backend's
// host-side steps) and its memory: names from the runtime it uses as its own.
using runtime::Device;
using runtime::RelaxedCapture;
using runtime::host::Executor;
using runtime::host::HostGroup;
using runtime::host::Scratch;
using runtime::host::SlotPrefault;

struct DataPathSettings {
  /// FIFO sizes and transport knobs; the communicator's own fields (hash, abort flag)
  /// are filled in by DataPath.
  transport::ConnectorOptions connector;
  int threadsPerChannel = 1;
  plan::PlanLimits limits;
  bool checkMismatch = true;  ///< BRAID_CHECK_MISMATCH
  bool peerDirect = true;     ///< not NCCL_P2P_DIRECT_DISABLE: sends to ranks of this process write into the receiver's buffer
  int ranksPerNode = 0;       ///< BRAID_RANKS_PER_NODE: 0 nodes are hosts, k: each k consecutive ranks
  int peerChannels = 0;       ///< BRAID_P2P_CHANNELS_PER_PEER: connections one send or receive splits over (0: automatic)
  int minP2pChannels = 1;     ///< NCCL_MIN_P2P_NCHANNELS: fewest blocks (channels) for a group's sends and receives
  int maxP2pChannels = kMaxChannels;  ///< NCCL_MAX_P2P_NCHANNELS: most of them
  int netPeerChannels = 2;    ///< NCCL_NCHANNELS_PER_NET_PEER: most connections a peer on another host splits over
  bool graphRegister = true;  ///< NCCL_GRAPH_REGISTER: a captured collective's buffers count as registered (regBuff)
  WatchdogSettings watchdog;
  std::string commName;  ///< the config's commName (for a profiler plugin)

  /// From the parameter registry and the communicator's config (minCTAs/maxCTAs bound channels);
  /// onDevice: the kernels run on a GPU (its cost table and channel default).
  /// A knob out of range is replaced, with one WARN a store (so once a process) naming the
  /// variable, the value given and the value used.
  static DataPathSettings fromParams(const CommConfig& config, bool onDevice = false);
  static DataPathSettings fromParams(params::Store& store, const CommConfig& config, bool onDevice);
};

/// The Simple step of the send/recv and peer-set connections (set c serves channel c of the
/// peer algorithms and, for c = 0, the user's sends and receives) on nRanks ranks; every rank
/// computes the same (a connection's two ends must agree). data_path_settings.cc says how.
uint32_t peerSimpleStepBytes(uint32_t ringStepBytes, int nRanks, bool onDevice);

/// The channels of a communicator's sends and receives, as NCCL's p2pnChannels and
/// p2pnChannelsPerPeer: `total` blocks at most run a group's sends and receives, and one send
/// or receive of a large message splits over `perPeer` connection sets (0..perPeer-1) to its
/// peer, each its own block. Every rank computes the same from the same inputs (both ends of
/// a send must split it alike): `maxChannels` as agreed (capChannels), whether any two ranks
/// are on different hosts, the rank count. data_path_settings.cc says how.
struct PeerChannels {
  int total = 1;
  int perPeer = 1;
};
PeerChannels peerChannels(const DataPathSettings& settings, int nRanks, bool spansHosts, bool onDevice);

/// The smallest part of a message split over several connections (one Simple step of theirs).
constexpr uint64_t kPeerPartMinBytes = 128 * 1024;
/// The bytes of each part a message of `bytes` splits into over `perPeer` connections: every
/// part but the last this size, a multiple of 512 bytes (the copy loops' vector path), at
/// least kPeerPartMinBytes; `bytes` itself (one part) when it is too small to split.
uint64_t peerPartBytes(uint64_t bytes, int perPeer);

class GroupProfile;

class DataPath {
 public:
  /// onFailure records the communicator's async error and raises its abort flag (the
  /// watchdog's way to end every wait).
  /// device: where the kernels run (null: on the host).
  DataPath(bootstrap::Bootstrap& channel, int rank, const std::vector<PeerInfo>& peers,
           const DataPathSettings& settings, const uint32_t* abortWord,
           uint64_t commHash, std::function<void(ncclResult_t)> onFailure,
           std::unique_ptr<runtime::Device> device = nullptr);
  ~DataPath();

  /// Runs one group's tasks of this communicator: collectives in order, then every send and
  /// receive together. Returns when all are complete (with a device: when all are enqueued);
  /// throws on abort or failure. groupApiEvent: the group's Group API event in the profiler
  /// plugin (profile_events.h), if any.
  void execute(const std::vector<plan::Task>& tasks, void* groupApiEvent = nullptr);
  /// The communicator's profiler plugin context (NCCL_PROFILER_PLUGIN); null when there is none.
  plugin::ProfilerSession* profiler() const { return profiler_.get(); }
  /// Waits until every operation this rank enqueued on a device has finished (nothing to wait
  /// for on the host, where calls return complete).
  void synchronize() {
    if (device_ != nullptr) device_->synchronize();
  }
  /// With a device: throws what enqueueing `tasks` would throw for their streams and buffers
  /// (and a mismatch an earlier kernel found), so that a group checks every rank before any
  /// rank's kernel is launched (a launched kernel would wait for a refused rank forever).
  void checkOnDevice(const std::vector<plan::Task>& tasks);
  /// With a device: throws ncclInvalidArgument naming `name` and `call` when the device cannot
  /// reach `p` (runtime::Device::checkBuffer); on the host nothing to check.
  void checkBuffer(const void* p, const char* name, const char* call) {
    if (device_ != nullptr) device_->checkBuffer(p, name, call);
  }
  /// The failure the watchdog recorded (a dead or stalled peer, a mismatch), the first time
  /// it is asked after one (false before, and after).
  bool takeFailure(ncclResult_t* code, std::string* text) {
    if (failureTaken_.load(std::memory_order_acquire) || !watchdog_->failure(code, text)) return false;
    return !failureTaken_.exchange(true);
  }
  /// ncclWaitSignal on the host: polls `arrived` (signals from `peer`) until it holds, as an
  /// operation the watchdog watches, waiting on that peer (its process gone, NCCL_TIMEOUT);
  /// throws the watchdog's reason, or that the communicator was aborted, when the abort flag
  /// ends the wait (data_path_one_sided.cc).
  void waitOneSided(const char* call, int peer, const std::function<bool()>& arrived);
  /// The device of a one-sided call on the CUDA backend (onDevice()), once `stream` is checked
  /// as a launch's is (Device::checkStream; data_path_one_sided.cc).
  runtime::Device& oneSidedDevice(void* stream, const char* call);
  /// The device, for a window's memory (export, import); onDevice() only.
  runtime::Device& device() { return *device_; }
  /// The host of `rank` (its hostHash): ranks alike share one.
  uint64_t hostOf(int rank) const { return hostOf_[rank]; }
  /// Whether the kernels run on a device (enqueued on the user's stream).
  bool onDevice() const { return device_ != nullptr; }
  /// Whether `stream` is being captured into a CUDA graph (the profiler's graphCaptured); false
  /// on the host backend, and for a stream the runtime cannot tell about.
  bool capturing(void* stream) const;
  /// The device's ordinal (-1 on the host).
  int deviceOrdinal() const { return device_ != nullptr ? device_->ordinal() : -1; }
  /// The tuner's predicted time (µs) of running `tasks` with execute(); nothing runs.
  double predict(const std::vector<plan::Task>& tasks) const;
  /// One task alone (the common case of a call outside a group): the same, without the group.
  void run(const plan::Task& task);

  /// The planner's bounds (channels, protocols); tests narrow them to force a choice.
  plan::PlanLimits& limits() {
    forgetChoices();
    return settings_.limits;
  }
  /// The connector's options; tests change them before the first collective (networkOnly).
  transport::ConnectorOptions& connectorOptions() { return connector_.options(); }
  /// The connections (tests look at their ends and where their words are: credit_line_test.cc).
  const transport::Connector& connector() const { return connector_; }
  /// The net plugin that carries this communicator's network, or null (transport::Connector).
  std::shared_ptr<plugin::NetSession> netPlugin() { return connector_.netPlugin(); }
  /// The plugin device for one-sided operations with `peer` (Connector::oneSidedPluginDevice).
  int oneSidedPluginDevice(int peer) const { return connector_.oneSidedPluginDevice(peer); }
  /// The communicator's network transport and its verbs settings (Connector::interHostKind):
  /// what carries one-sided operations between hosts.
  transport::Kind interHostKind() { return connector_.interHostKind(); }
  transport::ib::Settings oneSidedIbSettings() const { return connector_.oneSidedIbSettings(); }
  /// Connection ends this rank holds now (sends and receives, every set): what its FIFO memory
  /// grows with (tests of scale).
  int connectionEnds() const {
    int n = 0;
    connector_.forEachEnd([&n](const transport::Connector::End&) { ++n; });
    return n;
  }
  /// This rank's communicator is going away: once its operations have ended (at destruction,
  /// after a device's kernels), peers still waiting on it learn `text` from their connections
  /// (Watchdog::depart).
  void departWith(std::string text) { departure_ = std::move(text); }
  /// Fails this rank as its watchdog does when it finds a fault (its peers learn it from the
  /// fault boxes of their connections to it); tests of that path.
  void failRank(ncclResult_t code, const std::string& text) { watchdog_->fail(code, text); }
  /// NCCL_P2P_LL_THRESHOLD for this communicator (-1: the backend's); tests set it, every rank
  /// alike, to run sends and receives of a given size with LL or Simple.
  void setPeerLLThreshold(int64_t bytes) {
    settings_.limits.shape.peerLLMaxBytes = bytes;
    forgetChoices();  // (AlltoAll's Direct is modelled with its sends' protocol)
  }
  /// NCCL_P2P_DIRECT_DISABLE's opposite for this communicator; tests set it, every rank
  /// alike, to run sends and receives between threads through the FIFO or directly.
  void setPeerDirect(bool direct) { settings_.peerDirect = direct; }
  /// The sends and receives' channels (peerChannels()); tests set the connections a peer's
  /// messages split over, every rank alike, before the first send.
  const PeerChannels& peerChannels() const { return peerChannels_; }
  void setPeerChannelsPerPeer(int k) {
    peerChannels_.perPeer = k;
    peerChannels_.total = std::max(peerChannels_.total, k);
  }
  /// BRAID_RANKS_PER_NODE for this communicator (0: nodes are hosts); tests set it before the
  /// first collective. Every rank must set the same.
  void setRanksPerNode(int k);
  /// The communicator's registrations (ncclCommRegister), which outlive this data path: with a
  /// device, receives into them are offered to senders in other processes (offered_buffers.h).
  void setRegistrations(const RegistrationTable* table) { registrations_ = table; }
  /// The registration of [buffer, buffer + bytes) ended (ncclCommDeregister, already removed
  /// from the table): the keys of allocations no registration overlaps any more are withdrawn.
  void registrationEnded(const void* buffer, size_t bytes);
  /// Other processes' registered buffers this rank maps for its sends, retired ones not yet
  /// unmapped included (tests).
  size_t mappedBuffers() const { return offered_ != nullptr ? offered_->mappedNow() : 0; }

  /// Memory this rank's data path allocated (host memory on the host backend; on a device,
  /// the device memory of its scratch and FIFOs): what a suspend gives back, and what stays
  /// (data_path_suspend.cc).
  struct MemoryUse {
    uint64_t releasable = 0;
    uint64_t persistent = 0;
  };
  MemoryUse memoryUse() const;
  /// ncclCommSuspend's work, once every rank has finished its operations (the caller's barrier):
  /// gives back the FIFO slots and the scratch memory; returns the bytes. On the host backend
  /// nothing is to be undone at resume (the mappings stay, the next operation's first touch
  /// brings pages back); on a device, restoreMemory maps the FIFOs' memory again.
  uint64_t releaseMemory();
  /// ncclCommResume's work, before it meets the other ranks: the device memory releaseMemory
  /// gave back of the FIFOs and scratch, at the same addresses, and the peers' slots this rank
  /// maps, through the new handles they send over `channel` (transport::restoreSlots,
  /// Device::restoreScratch); the host backend's scratch comes back with the next operation.
  /// Collective among the ranks that share FIFOs in GPU memory; abortFlag ends its waits.
  void restoreMemory(bootstrap::Bootstrap& channel, const std::atomic<bool>* abortFlag);

 private:
  /// The CUDA backend, every rank at init: caps the channels (blocks) of every rank at the
  /// least share any GPU of the communicator gives each of its ranks of the blocks it keeps
  /// resident (Device::residentBlocks split between the ranks on it), so that every rank's
  /// blocks run together and every rank plans the same channels.
  void capChannels(bootstrap::Bootstrap& channel, const std::vector<PeerInfo>& peers, int rank);

  void runCollective(const plan::Task& task);
  /// What the tuner plugin is told beside a collective's function and size (plan::PluginInputs).
  plan::PluginInputs pluginInputs(const plan::Task& task) const;
  /// After an operation ended early: throws the watchdog's (or a kernel's) reason.
  [[noreturn]] void failAborted(const char* what);
  /// In a handler of a connection wait's error: throws the watchdog's reason when it ended the
  /// wait (a peer failed); when the wait on a peer's message timed out, what that means for the
  /// user's `call` (#seq, 0 for a point-to-point call): the peer has not called it; else the
  /// error itself.
  [[noreturn]] void rethrowWithReason(const char* call, uint64_t seq);
  /// Fills the tuner's shape from what every rank knows (nodes, ranks and CPUs per node, links)
  /// and logs the tuner's table at INFO/TUNING on rank 0.
  void describeShape();
  /// The tuner plugin's context for this communicator (NCCL_TUNER_PLUGIN), when there is one:
  /// the planner asks it about every collective; finalized when the data path ends.
  void openTunerPlugin(uint64_t commHash);
  void runPeers(const std::vector<const plan::Task*>& ops);
  /// runPeers' work, on ops.front()->stream with a device.
  void runPeersOn(const std::vector<const plan::Task*>& ops);
  /// Whether the profiler plugin wants this rank's network ends watched for work on `stream`
  /// (ProxyOp, ProxyStep or NetPlugin events, a network end, and no graph capture).
  bool watchesNetwork(void* stream) const;
  /// With a device: enqueue() enqueues one launch of nChannels blocks (a collective's, or the
  /// sends and receives'); when the profiler watches it (network ends, KernelCh events:
  /// GroupProfile::takeDeviceWatch), the watch is armed right before it in stream order and
  /// finished right after.
  void enqueueWatched(void* stream, int nChannels, bool collective, const std::function<void()>& enqueue);
  /// The blocks of a launch of a group's sends and receives over nQueues connections.
  int peerBlocks(int nQueues) const;
  /// With a tuner plugin: the group's collectives the plugin is asked about together, as NCCL
  /// asks (data_path.cc says how), by task, with the choice each runs; those it decided only.
  std::map<const plan::Task*, topo::Choice> askTunerTogether(const std::vector<plan::Task>& tasks);
  /// The traces of this rank's network ends (proxy/op_trace.h) by their step counters.
  std::map<const uint64_t*, proxy::OpTrace*> netTraces() const;
  /// With a profiler plugin that wants ProxyOp events: this rank's end h, when one of
  /// `traces`, is watched for the running operation (profile_events.h).
  void watchProxy(const std::map<const uint64_t*, proxy::OpTrace*>& traces, const kernels::ConnHandle& h,
                  bool isSend, int channel, kernels::Proto proto, int op = -1);
  /// With a device, before anything of a task moves (run() for a lone call, checkOnDevice for a
  /// group): a mismatch an earlier kernel found, what the backend does not support yet, the
  /// stream and the buffers.
  void checkDeviceTask(const plan::Task& task);
  /// With a device, the end of runCollective: enqueues the planned kernel, or, inside a group
  /// (batching_), keeps it in pending_ to share one launch with the collectives after it.
  void enqueueCollective(const plan::Task& task, plan::CollPlan& plan, const kernels::RingHandle* ring,
                         const kernels::OpSignature& sig);
  /// A connection's queue of sends or receives: peer rank, whether they are sends, connection set.
  using PeerQueueKey = std::tuple<int, bool, int>;
  /// With a device, the end of runPeers: the group's sends and receives (queues by peer,
  /// direction and connection set, each in posted order) as one kernel on `stream`.
  void enqueuePeers(const std::map<PeerQueueKey, std::deque<kernels::PeerOp>>& queues, void* stream, const char* call);
  /// Launches what pending_ holds (nothing when empty).
  void flushLaunch();
  /// AlltoAll's Direct: a send to and a receive from every rank, all at once (runPeers).
  void runAllToAllDirect(const plan::Task& task);
  /// The ring handles of channels [0, n), connecting them on first use.
  const kernels::RingHandle* rings(int n);
  /// Connections by rank (this rank's own entries unused) of one channel of one algorithm.
  struct PeerSet {
    std::vector<kernels::ConnHandle> send, recv;
  };
  /// Connects connection set `set` (transport::peerSet and its kin) to those ranks and
  /// returns its handles.
  PeerSet connectSet(const std::vector<int>& sendTo, const std::vector<int>& recvFrom, int set);
  /// The algorithms over point-to-point connections: connects channels [0, n) to the ranks
  /// `algo` exchanges with (algorithm_peers.h) on first use and fills those works' connections.
  void preparePeers(kernels::Algo algo, int n, kernels::CollWork* works);
  /// The first call of a size class on the host: maps the FIFO pages of `bytes` on every
  /// connection the plan's channels use (slot_prefault.h).
  void prefaultSlots(const plan::CollPlan& plan, const kernels::RingHandle* ring, uint64_t bytes);
  /// Before `what` first connects every rank to every other on `channels` channels (send/recv
  /// connections, or collective ones), on more than kEveryPeerWarnPeers + 1 ranks: a WARN
  /// (rank 0, once) with the connection ends and FIFO memory it will take, since only
  /// NCCL_ALGO chooses it there.
  void warnEveryPeer(const char* what, int channels, bool sendRecv);
  /// Tree: connects channels [0, n) to their tree neighbours (channel c: tree c mod 2) on
  /// first use and fills those works' tree links and connections.
  void prepareTrees(int n, kernels::CollWork* works);
  /// Hier2D: connects channels [0, n) to this rank's row and column neighbours on first use
  /// and fills those works' grid and connections.
  void prepareGrid(int n, kernels::CollWork* works);

  std::unique_ptr<runtime::Device> device_;  // first: outlives everything that uses its memory
  std::unique_ptr<OfferedBuffers> offered_;   // with a device
  const RegistrationTable* registrations_ = nullptr;
  LaunchBatch pending_;    // with a device: collectives waiting to share one launch
  bool batching_ = false;  // inside execute() with a device: collectives wait in pending_
  const char* pendingName_ = "";  // the call of pending_'s last collective (for errors)
  std::atomic<bool> failureTaken_{false};  // takeFailure has given out the watchdog's failure

  int rank_;
  int nRanks_;
  int localDeviceRanks_ = 1;  // ranks of this process on this rank's device (with device_)
  DataPathSettings settings_;
  std::unique_ptr<plugin::TunerSession> tunerPlugin_;  // settings_.limits.tunerPlugin (null: none)
  // settings_.limits.table where a v5 tuner plugin changed its constants (null: the constant table)
  std::unique_ptr<topo::CostTable> pluginTable_;
  int groupPipeOps_ = 1;  // inside execute(): the tuner plugin's numPipeOps for the group's collectives
  std::map<const plan::Task*, topo::Choice> aggregated_;  // inside execute(): askTunerTogether's
  std::unique_ptr<plugin::ProfilerSession> profiler_;  // null: no profiler plugin; finalized at destroy/abort
  std::unique_ptr<proxy::ControlWatch> proxyControl_;  // with profiler_: its ProxyCtrl events (ends before it)
  GroupProfile* profile_ = nullptr;  // the events of the group running now (with profiler_)
  const uint32_t* abort_;  // the communicator's (host) abort word (a device's kernels poll its own copy)
  transport::Connector connector_;
  std::array<kernels::ChannelStatus, kMaxChannels> hostStatuses_{};
  kernels::ChannelStatus* statuses_;  // hostStatuses_, or the device's (kernels write them)
  uint64_t opSeq_ = 0;  // collectives called on this communicator so far
  bool neighbourWatched_ = false;
  std::unique_ptr<Watchdog> watchdog_;  // after connector_ and statuses_: stopped before them
  std::string departure_;               // the notice the destructor leaves for peers ("": none)
  Scratch scratch_;  ///< the host kernels' scratch memory (CollPlan::scratchBytes)
  std::vector<transport::SuspendedSlots> suspendedFifos_;  ///< device FIFO memory a suspend let go of (restoreMemory)
  Executor executor_;
  std::vector<kernels::RingHandle> rings_;  // cached handles of the connected ring channels
  std::vector<PeerSet> peerSets_;  // by channel: every point-to-point connection made so far
  PeerChannels peerChannels_;      // the sends and receives' channels (peerChannels())
  std::array<int, static_cast<size_t>(kernels::Algo::kCount)> peersReady_{};  // channels connected for each algorithm's peers
  // The tuner's choices by collective and bytes (a pure function of them and the limits, which
  // clear it): a call looks its size up instead of predicting every candidate, which had cost
  // an 8-byte AllReduce on 2 ranks about as much as the operation. Not with a tuner plugin,
  // which is asked about every collective.
  std::unordered_map<uint64_t, topo::Choice> choices_;
  uint64_t lastChoiceKey_ = 0;                // the key of the last choice looked up or made,
  const topo::Choice* lastChoice_ = nullptr;  // and that choice in choices_ (null: none)
  void forgetChoices() {
    choices_.clear();
    lastChoice_ = nullptr;
  }
  // What each algorithm's connections have cost so far and the time it would have saved: an
  // algorithm whose connections are not made runs once that time pays for them (setup_ledger.h).
  plan::SetupLedger ledger_;
  // The FIFO pages each size class's calls reach, mapped by its first call (slot_prefault.h).
  SlotPrefault prefault_;
  // Above this many peers, a first connection to every rank is said at WARN (warnEveryPeer).
  static constexpr int kEveryPeerWarnPeers = 64;
  bool everyPeerWarned_ = false;
  std::vector<uint64_t> hostOf_;  // each rank's host
  std::vector<int> deviceOf_;     // each rank's CUDA device (its process's ordinal; -1 on the host)
  std::vector<int> nodeOf_;       // each rank's node (hosts, or BRAID_RANKS_PER_NODE groups)
  struct TreeChannel {
    kernels::TreeHandle links;
    PeerSet conns;
  };
  std::vector<TreeChannel> trees_;  // by channel, once connected
  kernels::GridHandle grid_{};      // valid once gridSets_ is not empty
  std::vector<PeerSet> gridSets_;   // by channel, once connected
};

}  // namespace braid::datapath
