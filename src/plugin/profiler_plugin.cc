#include "plugin/profiler_plugin.h"

#include <nccl_profiler.h>
#include <time.h>
#include <unistd.h>

#include <mutex>
#include <sstream>
#include <type_traits>
#include <vector>

#include "core/log.h"
#include "core/params.h"
#include "core/plugin_library.h"
#include "plugin/net_profiling.h"
#include "plugin/plugin_log.h"

namespace braid::plugin {

static_assert(profile::kGroup == ncclProfileGroup && profile::kKernelCh == ncclProfileKernelCh &&
              profile::kNetPlugin == ncclProfileNetPlugin && profile::kGroupApi == ncclProfileGroupApi &&
              profile::kKernelLaunch == ncclProfileKernelLaunch);
static_assert(profile::kProxyOp == ncclProfileProxyOp && profile::kProxyStep == ncclProfileProxyStep);
static_assert(profile::kProxyStepSendWait == ncclProfilerProxyStepSendWait &&
              profile::kProxyStepRecvWait == ncclProfilerProxyStepRecvWait &&
              profile::kProxyStepRecvGPUWait == ncclProfilerProxyStepRecvGPUWait);
static_assert(profile::kProxyCtrl == ncclProfileProxyCtrl && profile::kProxyCtrlIdle == ncclProfilerProxyCtrlIdle &&
              profile::kProxyCtrlActive == ncclProfilerProxyCtrlActive &&
              profile::kProxyCtrlSleep == ncclProfilerProxyCtrlSleep &&
              profile::kProxyCtrlWakeup == ncclProfilerProxyCtrlWakeup &&
              profile::kProxyCtrlAppend == ncclProfilerProxyCtrlAppend &&
              profile::kProxyCtrlAppendEnd == ncclProfilerProxyCtrlAppendEnd &&
              profile::kNetPluginUpdate == ncclProfilerNetPluginUpdate);
static_assert(profile::kKernelChStop == ncclProfilerKernelChStop &&
              profile::kGroupStartApiStop == ncclProfilerGroupStartApiStop &&
              profile::kGroupEndApiStart == ncclProfilerGroupEndApiStart);
static_assert(sizeof(std::atomic<int>) == sizeof(int) && std::atomic<int>::is_always_lock_free);

/// The library and the symbol found in it, shared by the communicators using it.
struct LoadedProfiler {
  Library library;
  int version = 0;               ///< 5..1
  const void* symbol = nullptr;  ///< the ncclProfiler_vN_t
  std::string name;
};

namespace {

const std::vector<std::string> kSymbols = {"ncclProfiler_v5", "ncclProfiler_v4", "ncclProfiler_v3", "ncclProfiler_v2",
                                           "ncclProfiler_v1"};

/// Every version's table has the same members in the same order; only their types differ.
struct AnyTable {
  const char* name;
  void* init;
  void* startEvent;
  ncclResult_t (*stopEvent)(void* handle);
  void* recordEventState;
  ncclResult_t (*finalize)(void* context);
};
static_assert(sizeof(AnyTable) == sizeof(ncclProfiler_v5_t) && sizeof(AnyTable) == sizeof(ncclProfiler_v1_t));

/// The event types a version knows.
uint32_t typesOf(int version) {
  using namespace profile;
  const uint32_t v1 = kGroup | kColl | kP2p | kProxyOp | kProxyStep | kProxyCtrl;
  switch (version) {
    case 5: return kKnown;
    case 4:
    case 3: return v1 | kKernelCh | kNetPlugin;
    default: return v1;
  }
}

/// Finds and opens the library; nullptr when there is none to use (said in the log).
std::shared_ptr<LoadedProfiler> load(const std::string& value, const std::string& netValue) {
  Opened o = openBesideNet("profiler", "PROFILER", value, netValue, kSymbols, log::kProfile);
  if (o.symbol == nullptr) return nullptr;
  Library library = std::move(o.library);
  const void* symbol = o.symbol;
  const int index = o.index;
  auto loaded = std::make_shared<LoadedProfiler>();
  loaded->version = 5 - index;
  loaded->symbol = symbol;
  const auto* table = static_cast<const AnyTable*>(symbol);
  loaded->name = table->name != nullptr ? table->name : "(unnamed)";
  const char* missing = table->init == nullptr               ? "init"
                        : table->startEvent == nullptr       ? "startEvent"
                        : table->stopEvent == nullptr        ? "stopEvent"
                        : table->recordEventState == nullptr ? "recordEventState"
                        : table->finalize == nullptr         ? "finalize"
                                                             : nullptr;
  if (missing != nullptr) {
    BRAID_WARN("PROFILER/Plugin: %s: %s (%s) has no %s function; going on without a profiler plugin",
               library.path().c_str(), loaded->name.c_str(), kSymbols[index].c_str(), missing);
    return nullptr;
  }
  BRAID_INFO(log::kInit | log::kProfile, "PROFILER/Plugin: Loaded profiler plugin %s (v%d) from %s",
             loaded->name.c_str(), loaded->version, library.path().c_str());
  loaded->library = std::move(library);
  return loaded;
}

struct Registry {
  std::mutex mutex;
  std::weak_ptr<LoadedProfiler> current;  ///< alive while a communicator uses it
  std::string failedFor;                  ///< the variables' values that found no usable plugin
  bool failed = false;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: communicators may end during exit
  return *r;
}

/// The library in use, or a new one (nullptr: none).
std::shared_ptr<LoadedProfiler> acquire() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (auto live = r.current.lock()) return live;
  params::Store& p = params::process();
  const std::string value = p.lookup("NCCL_PROFILER_PLUGIN").text;
  const std::string netValue = p.lookup("NCCL_NET_PLUGIN").text;
  const std::string key = value + '\n' + netValue;
  if (r.failed && r.failedFor == key) return nullptr;
  std::shared_ptr<LoadedProfiler> loaded;
  if (disabled(value)) {
    BRAID_INFO(log::kInit | log::kProfile, "PROFILER/Plugin: disabled by NCCL_PROFILER_PLUGIN=%s", value.c_str());
  } else {
    loaded = load(value, netValue);
  }
  r.failed = loaded == nullptr;
  r.failedFor = key;
  r.current = loaded;
  return loaded;
}

// ---- the descriptors of each version ----------------------------------------------------------

/// ProxyOp and ProxyStep: the same fields in every version (false: another type).
template <typename Descr>
bool fillProxy(const ProfileEvent& e, Descr* d) {
  if (e.type == profile::kProxyOp) {
    d->proxyOp.pid = static_cast<pid_t>(e.pid);
    d->proxyOp.channelId = static_cast<uint8_t>(e.channelId);
    d->proxyOp.peer = e.peer;
    d->proxyOp.nSteps = e.nSteps;
    d->proxyOp.chunkSize = e.chunkSize;
    d->proxyOp.isSend = e.isSend ? 1 : 0;
    return true;
  }
  if (e.type == profile::kProxyStep) {
    d->proxyStep.step = e.step;
    return true;
  }
  return false;
}

void fill(const ProfileEvent& e, int rank, ncclProfilerEventDescr_v5_t* d) {
  d->type = e.type;
  d->parentObj = e.parent;
  d->rank = rank;
  if (fillProxy(e, d)) return;
  switch (e.type) {
    case profile::kGroupApi: d->groupApi.graphCaptured = e.graphCaptured, d->groupApi.groupDepth = e.groupDepth; break;
    case profile::kCollApi:
      d->collApi.func = e.func;
      d->collApi.count = e.count;
      d->collApi.datatype = e.datatype;
      d->collApi.root = e.root;
      d->collApi.stream = e.stream;
      d->collApi.graphCaptured = e.graphCaptured;
      break;
    case profile::kP2pApi:
      d->p2pApi.func = e.func;
      d->p2pApi.count = e.count;
      d->p2pApi.datatype = e.datatype;
      d->p2pApi.stream = e.stream;
      d->p2pApi.graphCaptured = e.graphCaptured;
      break;
    case profile::kKernelLaunch: d->kernelLaunch.stream = e.stream; break;
    case profile::kColl:
      d->coll.seqNumber = e.seqNumber;
      d->coll.func = e.func;
      d->coll.sendBuff = e.sendBuff;
      d->coll.recvBuff = e.recvBuff;
      d->coll.count = e.count;
      d->coll.root = e.root;
      d->coll.datatype = e.datatype;
      d->coll.nChannels = static_cast<uint8_t>(e.nChannels);
      d->coll.nWarps = static_cast<uint8_t>(e.nWarps);
      d->coll.algo = e.algo;
      d->coll.proto = e.proto;
      d->coll.parentGroup = e.parentGroup;
      break;
    case profile::kP2p:
      d->p2p.func = e.func;
      d->p2p.buff = e.recvBuff != nullptr ? e.recvBuff : const_cast<void*>(e.sendBuff);
      d->p2p.datatype = e.datatype;
      d->p2p.count = e.count;
      d->p2p.peer = e.root;
      d->p2p.nChannels = static_cast<uint8_t>(e.nChannels);
      d->p2p.parentGroup = e.parentGroup;
      break;
    case profile::kKernelCh:
      d->kernelCh.channelId = static_cast<uint8_t>(e.channelId);
      d->kernelCh.pTimer = e.pTimer;
      break;
    case profile::kNetPlugin: d->netPlugin.id = e.netId, d->netPlugin.data = e.netData; break;
    default: break;
  }
}

/// v4: no API or kernel launch events; the Group event is the parent of Coll and P2P.
void fill(const ProfileEvent& e, int rank, ncclProfilerEventDescr_v4_t* d) {
  d->type = static_cast<uint8_t>(e.type);
  d->parentObj = e.parent;
  d->rank = rank;
  if (fillProxy(e, d)) return;
  switch (e.type) {
    case profile::kColl:
      d->parentObj = e.parentGroup;
      d->coll.seqNumber = e.seqNumber;
      d->coll.func = e.func;
      d->coll.sendBuff = e.sendBuff;
      d->coll.recvBuff = e.recvBuff;
      d->coll.count = e.count;
      d->coll.root = e.root;
      d->coll.datatype = e.datatype;
      d->coll.nChannels = static_cast<uint8_t>(e.nChannels);
      d->coll.nWarps = static_cast<uint8_t>(e.nWarps);
      d->coll.algo = e.algo;
      d->coll.proto = e.proto;
      break;
    case profile::kP2p:
      d->parentObj = e.parentGroup;
      d->p2p.func = e.func;
      d->p2p.buff = e.recvBuff != nullptr ? e.recvBuff : const_cast<void*>(e.sendBuff);
      d->p2p.datatype = e.datatype;
      d->p2p.count = e.count;
      d->p2p.peer = e.root;
      d->p2p.nChannels = static_cast<uint8_t>(e.nChannels);
      break;
    case profile::kKernelCh:
      d->kernelCh.channelId = static_cast<uint8_t>(e.channelId);
      d->kernelCh.pTimer = e.pTimer;
      break;
    case profile::kNetPlugin: d->netPlugin.id = e.netId, d->netPlugin.data = e.netData; break;
    default: break;
  }
}

/// A name (v2 and v3) or NCCL's index of it (v1): whichever the descriptor's field holds.
template <typename Field, typename Index>
Field nameOrIndex(const char* name, Index index) {
  if constexpr (std::is_pointer_v<Field>) {
    return name;
  } else {
    return static_cast<Field>(index);
  }
}

/// v3, v2 (whose Coll and P2P share the v3 fields, plus v2's trafficBytes) and v1 (NCCL's
/// indices instead of names).
template <typename Descr>
void fillOlder(const ProfileEvent& e, int rank, const ProfilerCommInfo& comm, Descr* d) {
  d->type = static_cast<uint8_t>(e.type);
  d->parentObj = e.parent;
  d->rank = rank;
  if (fillProxy(e, d)) return;
  const char* name = comm.commName.empty() ? nullptr : comm.commName.c_str();
  switch (e.type) {
    case profile::kColl: {
      auto& c = d->coll;
      d->parentObj = e.parentGroup;
      c.name = name;
      c.commHash = comm.commHash;
      c.seqNumber = e.seqNumber;
      c.func = nameOrIndex<decltype(c.func)>(e.func, e.funcId);
      c.sendBuff = e.sendBuff;
      c.recvBuff = e.recvBuff;
      c.count = e.count;
      c.root = e.root;
      c.datatype = nameOrIndex<decltype(c.datatype)>(e.datatype, e.datatypeId);
      c.nMaxChannels = static_cast<uint8_t>(e.nChannels);
      c.nWarps = static_cast<uint8_t>(e.nWarps);
      c.algo = nameOrIndex<decltype(c.algo)>(e.algo, e.algoId);
      c.proto = nameOrIndex<decltype(c.proto)>(e.proto, e.protoId);
      break;
    }
    case profile::kP2p: {
      auto& p = d->p2p;
      d->parentObj = e.parentGroup;
      p.name = name;
      p.commHash = comm.commHash;
      p.func = nameOrIndex<decltype(p.func)>(e.func, e.funcId);
      p.buff = e.recvBuff != nullptr ? e.recvBuff : const_cast<void*>(e.sendBuff);
      p.datatype = nameOrIndex<decltype(p.datatype)>(e.datatype, e.datatypeId);
      p.count = e.count;
      p.peer = e.root;
      break;
    }
    default: break;
  }
}

}  // namespace

std::unique_ptr<ProfilerSession> ProfilerSession::open(const ProfilerCommInfo& info) {
  std::shared_ptr<LoadedProfiler> loaded;
  try {
    loaded = acquire();
  } catch (const std::exception& e) {
    BRAID_WARN("PROFILER/Plugin: %s; going on without a profiler plugin", e.what());
  }
  if (loaded == nullptr) return nullptr;
  std::unique_ptr<ProfilerSession> session(new ProfilerSession(loaded, nullptr, info));
  int* mask = reinterpret_cast<int*>(&session->mask_);  // (the plugin may write it later too)
  const char* commName = info.commName.empty() ? nullptr : info.commName.c_str();
  void* context = nullptr;
  ncclResult_t r = ncclSuccess;
  switch (loaded->version) {
    case 5:
      r = static_cast<const ncclProfiler_v5_t*>(loaded->symbol)
              ->init(&context, info.commHash, mask, commName, info.nNodes, info.nRanks, info.rank, pluginLog);
      break;
    case 4:
      r = static_cast<const ncclProfiler_v4_t*>(loaded->symbol)
              ->init(&context, mask, commName, info.commHash, info.nNodes, info.nRanks, info.rank, pluginLog);
      break;
    case 3: r = static_cast<const ncclProfiler_v3_t*>(loaded->symbol)->init(&context, mask); break;
    case 2: r = static_cast<const ncclProfiler_v2_t*>(loaded->symbol)->init(&context, mask); break;
    default: r = static_cast<const ncclProfiler_v1_t*>(loaded->symbol)->init(&context, mask); break;
  }
  if (r != ncclSuccess) {
    BRAID_WARN("PROFILER/Plugin: %s: profiler plugin %s (v%d) init failed with %d on rank %d of communicator %#llx; "
               "going on without a profiler plugin", loaded->library.path().c_str(), loaded->name.c_str(),
               loaded->version, static_cast<int>(r), info.rank, static_cast<unsigned long long>(info.commHash));
    session->profiler_ = nullptr;  // no finalize for a context that init refused
    return nullptr;
  }
  session->context_ = context;
  const int given = session->mask_.load();
  BRAID_INFO(log::kInit | log::kProfile, "PROFILER/Plugin: rank %d: %s (v%d) initialised for communicator %#llx: "
             "event mask %#x (used: %#x)", info.rank, loaded->name.c_str(), loaded->version,
             static_cast<unsigned long long>(info.commHash), static_cast<unsigned>(given), session->mask());
  return session;
}

ProfilerSession::ProfilerSession(std::shared_ptr<LoadedProfiler> profiler, void* context, const ProfilerCommInfo& info)
    : profiler_(std::move(profiler)), context_(context), versionMask_(typesOf(profiler_->version)), info_(info) {}

ProfilerSession::~ProfilerSession() {
  if (profiler_ == nullptr) return;
  forgetNetEvents(this);  // (a net plugin's event left open: a later stop of it is refused)
  const ncclResult_t r = static_cast<const AnyTable*>(profiler_->symbol)->finalize(context_);
  if (r != ncclSuccess) {
    BRAID_WARN("PROFILER/Plugin: rank %d: profiler plugin %s (v%d) finalize returned %d", info_.rank,
               profiler_->name.c_str(), profiler_->version, static_cast<int>(r));
  }
  // (the library closes when the last session lets profiler_ go)
}

const std::string& ProfilerSession::name() const { return profiler_->name; }
int ProfilerSession::version() const { return profiler_->version; }

void* ProfilerSession::start(const ProfileEvent& event) {
  if ((event.type & versionMask_) == 0) return nullptr;
  void* handle = nullptr;
  ncclResult_t r = ncclSuccess;
  switch (profiler_->version) {
    case 5: {
      ncclProfilerEventDescr_v5_t d{};
      fill(event, info_.rank, &d);
      r = static_cast<const ncclProfiler_v5_t*>(profiler_->symbol)->startEvent(context_, &handle, &d);
      break;
    }
    case 4: {
      ncclProfilerEventDescr_v4_t d{};
      fill(event, info_.rank, &d);
      r = static_cast<const ncclProfiler_v4_t*>(profiler_->symbol)->startEvent(context_, &handle, &d);
      break;
    }
    case 3: {
      ncclProfilerEventDescr_v3_t d{};
      fillOlder(event, info_.rank, info_, &d);
      if (event.type == profile::kKernelCh) d.kernelCh.channelId = static_cast<uint8_t>(event.channelId);
      if (event.type == profile::kNetPlugin) d.netPlugin.id = event.netId, d.netPlugin.data = event.netData;
      r = static_cast<const ncclProfiler_v3_t*>(profiler_->symbol)->startEvent(context_, &handle, &d);
      break;
    }
    case 2: {
      ncclProfilerEventDescr_v2_t d{};
      fillOlder(event, info_.rank, info_, &d);
      r = static_cast<const ncclProfiler_v2_t*>(profiler_->symbol)->startEvent(context_, &handle, &d);
      break;
    }
    default: {
      ncclProfilerEventDescr_v1_t d{};
      fillOlder(event, info_.rank, info_, &d);
      r = static_cast<const ncclProfiler_v1_t*>(profiler_->symbol)->startEvent(context_, &handle, &d);
      break;
    }
  }
  if (r != ncclSuccess) {
    warnOnce(0, "startEvent", static_cast<int>(r));
    return nullptr;  // (a failed start is not stopped)
  }
  return handle;
}

void ProfilerSession::stop(void* handle) {
  if (handle == nullptr) return;
  const ncclResult_t r = static_cast<const AnyTable*>(profiler_->symbol)->stopEvent(handle);
  if (r != ncclSuccess) warnOnce(1, "stopEvent", static_cast<int>(r));
}

void ProfilerSession::record(void* handle, int state, uint64_t value, void* data) {
  if (handle == nullptr) return;
  ncclResult_t r = ncclSuccess;
  const auto eState = static_cast<ncclProfilerEventState_t>(state);
  const bool step = state >= profile::kProxyStepSendWait && state <= profile::kProxyStepRecvGPUWait;
  const bool control = state >= profile::kProxyCtrlIdle && state <= profile::kProxyCtrlAppendEnd;
  const bool net = state == profile::kNetPluginUpdate;
  switch (profiler_->version) {
    case 5:
    case 4: {
      if (profiler_->version == 4 && state != profile::kKernelChStop && !step && !control && !net) {
        return;  // (v4 has no API events)
      }
      // (the two versions' state arguments have the same layout; only v5 adds states)
      static_assert(sizeof(ncclProfilerEventStateArgs_v5_t) == sizeof(ncclProfilerEventStateArgs_v4_t));
      ncclProfilerEventStateArgs_v5_t args{};
      if (state == profile::kKernelChStop) args.kernelCh.pTimer = value;
      if (step) args.proxyStep.transSize = static_cast<size_t>(value);
      if (control) args.proxyCtrl.appendedProxyOps = static_cast<int>(value);
      if (net) args.netPlugin.data = data;
      const bool withArgs = state == profile::kKernelChStop || step || control || net;
      if (profiler_->version == 5) {
        r = static_cast<const ncclProfiler_v5_t*>(profiler_->symbol)->recordEventState(handle, eState, withArgs ? &args : nullptr);
      } else {
        r = static_cast<const ncclProfiler_v4_t*>(profiler_->symbol)
                ->recordEventState(handle, eState, reinterpret_cast<ncclProfilerEventStateArgs_v4_t*>(&args));
      }
      break;
    }
    default: {  // v1-v3 know only the proxy's states; their arguments have the bytes as a ProxyOp's
      if (!step && !control) return;  // (nor a place for a NetPluginUpdate's data: NCCL gives v3 none)
      ncclProfilerEventStateArgs_v3_t args{};
      if (step) args.proxyOp.transSize = static_cast<size_t>(value);
      if (control) args.proxyCtrl.appendedProxyOps = static_cast<int>(value);
      static_assert(sizeof(ncclProfilerEventStateArgs_v3_t) == sizeof(ncclProfilerEventStateArgs_v1_t) &&
                    sizeof(ncclProfilerEventStateArgs_v3_t) == sizeof(ncclProfilerEventStateArgs_v2_t));
      // (the three versions' recordEventState differ only in the names of the same types)
      r = static_cast<const ncclProfiler_v3_t*>(profiler_->symbol)->recordEventState(handle, eState, &args);
      break;
    }
  }
  if (r != ncclSuccess) warnOnce(2, "recordEventState", static_cast<int>(r));
}

void ProfilerSession::warnOnce(int what, const char* call, int result) {
  const uint32_t bit = 1u << what;
  if ((warned_.fetch_or(bit) & bit) != 0) return;
  BRAID_WARN("PROFILER/Plugin: rank %d: profiler plugin %s (v%d) %s returned %d; its answer is ignored (said once)",
             info_.rank, profiler_->name.c_str(), profiler_->version, call, result);
}

uint64_t profilerClock() {
  timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec);
}

}  // namespace braid::plugin
