// Profiler plugins (NCCL's ncclProfiler_v1..v5, include/nccl_profiler.h): loading, one context
// per communicator, and the events in each version's descriptor layout.
//
// The library is found as the tuner's is (plugin::open: NCCL_PROFILER_PLUGIN, else
// libnccl-profiler.so, else the net plugin's library), shared by every communicator and closed
// when the last one using it ends. The newest symbol wins: v5, v4, v3, v2, v1. Braid describes
// each event once (ProfileEvent, the fields of NCCL's v5 descriptor) and the session writes it
// in the plugin's version: v4 and older get no API and kernel launch events and see the Group
// event as the parent of Coll and P2P; v3 gets the communicator's name and hash in them; v2
// and v1 get no KernelCh events; v1 gets NCCL's indices instead of names.
//
// Where the events come from: group/group.cc (Group API, Coll API, P2P API),
// datapath/profile_events.h (Group, Coll, P2P, Kernel launch, KernelCh),
// proxy/op_trace.h (ProxyOp, ProxyStep: every version has them, in the same layout),
// proxy/control_events.h (ProxyCtrl: every version) and plugin/net_profiling.h (NetPlugin,
// started by a net plugin through its profiler callback: v3 and later).
//
// With no plugin no session exists: callers test one pointer, and nothing else is done.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace braid::plugin {

/// NCCL's event types (ncclProfile* of nccl_profiler.h), the bits of the activation mask.
namespace profile {
constexpr uint32_t kGroup = 1u << 0;
constexpr uint32_t kColl = 1u << 1;
constexpr uint32_t kP2p = 1u << 2;
constexpr uint32_t kProxyOp = 1u << 3;
constexpr uint32_t kProxyStep = 1u << 4;
constexpr uint32_t kProxyCtrl = 1u << 5;
constexpr uint32_t kKernelCh = 1u << 6;
constexpr uint32_t kNetPlugin = 1u << 7;
constexpr uint32_t kGroupApi = 1u << 8;
constexpr uint32_t kCollApi = 1u << 9;
constexpr uint32_t kP2pApi = 1u << 10;
constexpr uint32_t kKernelLaunch = 1u << 11;
constexpr uint32_t kKnown = (1u << 12) - 1;

// As NCCL, an event is started when it or any event below it in the hierarchy is wanted, so
// that every event a plugin asked for has its parents.
constexpr uint32_t kBelowTask = kProxyOp | kProxyStep | kKernelCh | kNetPlugin;
constexpr uint32_t kStartsColl = kColl | kBelowTask;
constexpr uint32_t kStartsP2p = kP2p | kBelowTask;
constexpr uint32_t kStartsGroup = kGroup | kColl | kP2p | kBelowTask;
constexpr uint32_t kStartsCollApi = kCollApi | kStartsColl;
constexpr uint32_t kStartsP2pApi = kP2pApi | kStartsP2p;
constexpr uint32_t kStartsGroupApi = kGroupApi | kCollApi | kP2pApi | kKernelLaunch | kStartsGroup;

/// recordEventState's states that Braid emits (ncclProfilerEventState_t's values).
constexpr int kProxyStepSendWait = 9;
constexpr int kProxyStepRecvWait = 10;
constexpr int kProxyStepRecvGPUWait = 12;
constexpr int kProxyCtrlIdle = 13;
constexpr int kProxyCtrlActive = 14;
constexpr int kProxyCtrlSleep = 15;
constexpr int kProxyCtrlWakeup = 16;
constexpr int kProxyCtrlAppend = 17;
constexpr int kProxyCtrlAppendEnd = 18;
constexpr int kNetPluginUpdate = 21;
constexpr int kKernelChStop = 22;
constexpr int kGroupStartApiStop = 23;
constexpr int kGroupEndApiStart = 24;
}  // namespace profile

/// One event as Braid describes it: the fields of NCCL's v5 descriptor, plus NCCL's indices
/// for v1. Unused fields stay as they are.
struct ProfileEvent {
  uint32_t type = 0;             ///< one profile::k* bit
  void* parent = nullptr;        ///< the parent event's handle
  void* parentGroup = nullptr;   ///< Coll and P2P: the Group event's handle
  const char* func = nullptr;    ///< "AllReduce", "Send", ...
  const char* datatype = nullptr;  ///< "ncclFloat32", ...
  size_t count = 0;
  int root = 0;                  ///< Coll: the root; P2P: the peer
  uint64_t seqNumber = 0;
  const void* sendBuff = nullptr;
  void* recvBuff = nullptr;
  int nChannels = 0;
  int nWarps = 0;
  const char* algo = nullptr;    ///< "RING", "TREE", ...
  const char* proto = nullptr;   ///< "LL", "LL128", "SIMPLE"
  int groupDepth = 0;            ///< Group API
  void* stream = nullptr;        ///< API and kernel launch events
  bool graphCaptured = false;    ///< API events: the stream is being captured into a CUDA graph
  int channelId = 0;             ///< KernelCh, ProxyOp
  uint64_t pTimer = 0;           ///< KernelCh: when the channel's work started (ns)
  int pid = 0;                   ///< ProxyOp: the process
  int peer = 0;                  ///< ProxyOp: the rank at the connection's other end
  int nSteps = 0;                ///< ProxyOp
  int chunkSize = 0;             ///< ProxyOp: bytes of a step
  bool isSend = false;           ///< ProxyOp
  int step = 0;                  ///< ProxyStep: its number within the ProxyOp
  int64_t netId = 0;             ///< NetPlugin: the net plugin's event id (NCCL_PROFILER_NET_*)
  void* netData = nullptr;       ///< NetPlugin: the net plugin's own data
  // v1: NCCL's indices (ncclFunc_t, ncclDataType_t, NCCL_ALGO_*, NCCL_PROTO_*); 255: none.
  uint8_t funcId = 255, datatypeId = 255, algoId = 255, protoId = 255;
};

/// What a communicator tells its profiler plugin at init.
struct ProfilerCommInfo {
  uint64_t commHash = 0;
  std::string commName;  ///< the config's commName (empty: none, passed as NULL)
  int nNodes = 1;
  int nRanks = 1;
  int rank = 0;
};

struct LoadedProfiler;

/// One communicator's context in the profiler plugin: init when opened, finalize when
/// destroyed (at ncclCommDestroy and ncclCommAbort). Thread-safe: events of one communicator
/// may come from its user thread, its job thread and the proxy thread (never at once for one
/// event).
class ProfilerSession {
 public:
  /// The plugin's session for this communicator, loading the library first if no live
  /// communicator holds it; nullptr when there is no plugin, or it cannot be used (said at
  /// INFO when absent, WARN when it exists but fails). Never throws.
  static std::unique_ptr<ProfilerSession> open(const ProfilerCommInfo& info);
  ~ProfilerSession();
  ProfilerSession(const ProfilerSession&) = delete;
  ProfilerSession& operator=(const ProfilerSession&) = delete;

  const std::string& name() const;
  int version() const;

  /// The event types the plugin wants now (it may change the mask it was given at init at any
  /// time), less those its version does not know.
  uint32_t mask() const { return static_cast<uint32_t>(mask_.load(std::memory_order_relaxed)) & versionMask_; }
  bool wants(uint32_t types) const { return (mask() & types) != 0; }

  /// Starts an event; its handle, or nullptr when the plugin's version has no such event, the
  /// plugin returned none, or it failed (a WARN, once).
  void* start(const ProfileEvent& event);
  /// Stops a started event (nullptr: nothing).
  void stop(void* handle);
  /// Records a state of a started event (nullptr: nothing): the Group API states,
  /// KernelChStop with its timestamp (value), a ProxyStep state with the step's bytes
  /// (value), a ProxyCtrl state with the operations appended (value: AppendEnd's), or
  /// NetPluginUpdate with the net plugin's data. Versions without the state get no call.
  void record(void* handle, int state, uint64_t value = 0, void* data = nullptr);

  /// The next sequence number of collective function `func` on this communicator (0 first).
  uint64_t nextSeq(int func) { return seq_[func & 15]++; }

 private:
  ProfilerSession(std::shared_ptr<LoadedProfiler> profiler, void* context, const ProfilerCommInfo& info);
  void warnOnce(int what, const char* call, int result);

  std::shared_ptr<LoadedProfiler> profiler_;
  void* context_ = nullptr;
  std::atomic<int> mask_{0};  ///< the plugin's eActivationMask (it keeps the address)
  uint32_t versionMask_;
  ProfilerCommInfo info_;
  uint64_t seq_[16] = {};
  std::atomic<uint32_t> warned_{0};
};

/// The clock of KernelCh timestamps on the host backend: CLOCK_REALTIME in ns (a GPU's
/// globaltimer counts the same way).
uint64_t profilerClock();

}  // namespace braid::plugin
