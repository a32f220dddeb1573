#include "datapath/profile_events.h"

#include <algorithm>

#include "kernels/platform.h"
#include "plugin/profiler_plugin.h"
#include "proxy/op_trace.h"

namespace braid::datapath {

namespace {

using plugin::ProfileEvent;
namespace profile = plugin::profile;

/// NCCL's names of the data types (ncclDatatypeToString).
const char* typeName(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return "ncclInt8";
    case ncclUint8: return "ncclUint8";
    case ncclInt32: return "ncclInt32";
    case ncclUint32: return "ncclUint32";
    case ncclInt64: return "ncclInt64";
    case ncclUint64: return "ncclUint64";
    case ncclFloat16: return "ncclFloat16";
    case ncclFloat32: return "ncclFloat32";
    case ncclFloat64: return "ncclFloat64";
    case ncclBfloat16: return "ncclBfloat16";
    case ncclFloat8e4m3: return "ncclFloat8e4m3";
    case ncclFloat8e5m2: return "ncclFloat8e5m2";
    default: return "Unknown";
  }
}

/// NCCL's names of the collective functions (ncclFuncToString) and v1's indices (ncclFunc_t;
/// Braid's order is NCCL's up to AllReduce).
const char* funcName(const plan::Task& t, uint8_t* id) {
  static const char* const names[] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce", "AlltoAll"};
  if (t.func == kernels::Func::kSendRecv) {
    *id = t.isSend ? 6 : 7;  // ncclFuncSend, ncclFuncRecv
    return t.isSend ? "Send" : "Recv";
  }
  const int f = static_cast<int>(t.func);
  *id = f <= static_cast<int>(kernels::Func::kAllReduce) ? static_cast<uint8_t>(f) : 255;  // (no AlltoAll in v1)
  return f >= 0 && f < 6 ? names[f] : "Invalid";
}

/// NCCL's names of the algorithms (ncclAlgoToString) for Tree and Ring, Braid's own in the
/// same style; v1's index (255 for an algorithm NCCL does not have).
const char* algoName(kernels::Algo a, uint8_t* id) {
  static const char* const names[] = {"TREE",     "RING",   "DIRECT",   "REC_DOUBLING", "HALVING_DOUBLING",
                                      "BINOMIAL", "HIER2D", "PAIRWISE", "BRUCK"};
  const int i = static_cast<int>(a);
  *id = i <= 1 ? static_cast<uint8_t>(i) : 255;
  return i >= 0 && i < static_cast<int>(kernels::Algo::kCount) ? names[i] : "UNKNOWN";
}

const char* protoName(kernels::Proto p) {
  static const char* const names[] = {"LL", "LL128", "SIMPLE"};
  const int i = static_cast<int>(p);
  return i >= 0 && i < 3 ? names[i] : "UNKNOWN";
}

}  // namespace

std::unique_ptr<plugin::ProfilerSession> openProfiler(uint64_t commHash, const std::string& commName, int rank,
                                                      const std::vector<int>& nodeOf) {
  plugin::ProfilerCommInfo info;
  info.commHash = commHash;
  info.commName = commName;
  info.rank = rank;
  info.nRanks = static_cast<int>(nodeOf.size());
  info.nNodes = std::max<int>(1, static_cast<int>(std::set<int>(nodeOf.begin(), nodeOf.end()).size()));
  return plugin::ProfilerSession::open(info);
}

ProfileEvent describeTask(const plan::Task& task) {
  ProfileEvent e;
  e.func = funcName(task, &e.funcId);
  e.datatype = typeName(task.dtype);
  e.datatypeId = static_cast<uint8_t>(task.dtype);
  e.count = task.count;
  e.stream = task.stream;
  if (task.func == kernels::Func::kSendRecv) {
    e.root = task.peer;
    if (task.isSend) {
      e.sendBuff = task.sendbuff;
    } else {
      e.recvBuff = task.recvbuff;
    }
  } else {
    e.root = task.root;
    e.sendBuff = task.sendbuff;
    e.recvBuff = task.recvbuff;
  }
  return e;
}

void DeviceWatch::arm() {
  for (const End& e : ends_) {
    if (e.trace->armed()) continue;
    e.trace->arm(e.op, kernels::loadRelaxed(const_cast<uint64_t*>(e.stepWord)), e.op.isSend ? nullptr : e.tail);
    armed_.push_back(e.trace);
  }
}

void DeviceWatch::kernelChannels() {
  if (statuses_ == nullptr || events_.empty()) return;
  auto emit = [&](void* parent, int channel, uint64_t start, uint64_t end) {
    ProfileEvent e;
    e.type = profile::kKernelCh;
    e.parent = parent;
    e.channelId = channel;
    e.pTimer = start;
    void* h = session_->start(e);
    session_->record(h, profile::kKernelChStop, end);
    session_->stop(h);
  };
  const int n = std::clamp(nChannels_, 1, kMaxChannels);
  if (perChannel_) {
    for (int c = 0; c < n; ++c) {
      emit(events_.front(), c, kernels::loadRelaxed(&statuses_[c].startTime),
           kernels::loadRelaxed(&statuses_[c].doneTime));
    }
    return;
  }
  uint64_t start = UINT64_MAX, end = 0;  // (the sends and receives' blocks together)
  for (int c = 0; c < n; ++c) {
    start = std::min(start, kernels::loadRelaxed(&statuses_[c].startTime));
    end = std::max(end, kernels::loadRelaxed(&statuses_[c].doneTime));
  }
  for (void* p : events_) emit(p, 0, start, end);
}

void DeviceWatch::finish() {
  kernelChannels();
  for (proxy::OpTrace* t : armed_) {
    for (const End& e : ends_) {
      if (e.trace == t) t->disarm(kernels::loadRelaxed(const_cast<uint64_t*>(e.stepWord)), abortFlag_);
    }
  }
  armed_.clear();
  for (void* e : events_) session_->stop(e);
  events_.clear();
  group_.reset();
}

GroupProfile::GroupProfile(plugin::ProfilerSession& session, void* groupApi, int nWarps, bool onHost)
    : session_(session), groupApi_(groupApi), nWarps_(nWarps), onHost_(onHost) {
  if (session_.wants(profile::kStartsGroup)) {
    ProfileEvent e;
    e.type = profile::kGroup;
    group_ = session_.start(e);
  }
  groupHeld_ = std::shared_ptr<void>(nullptr, [s = &session_, g = group_](void*) { s->stop(g); });
}

GroupProfile::~GroupProfile() {
  closeOpen();
  groupHeld_.reset();
}

bool GroupProfile::watchesNextLaunch() const {
  return !onHost_ && (!deviceEnds_.empty() || session_.wants(profile::kKernelCh));
}

std::shared_ptr<DeviceWatch> GroupProfile::takeDeviceWatch(const kernels::ChannelStatus* statuses, int nChannels,
                                                           bool collective) {
  if (!watchesNextLaunch()) return nullptr;
  auto w = std::make_shared<DeviceWatch>();
  w->session_ = &session_;
  if (session_.wants(profile::kKernelCh)) w->statuses_ = statuses;
  w->nChannels_ = nChannels;
  w->perChannel_ = collective;
  w->abortFlag_ = watchedAbort_;
  w->ends_ = std::move(deviceEnds_);
  deviceEnds_.clear();
  if (coll_ != nullptr) w->events_.push_back(coll_);
  coll_ = nullptr;
  for (void* p : peers_) w->events_.push_back(p);
  peers_.clear();
  w->group_ = groupHeld_;
  return w;
}

void GroupProfile::closeOpen() {
  unwatch();
  session_.stop(launch_);
  launch_ = nullptr;
  session_.stop(coll_);
  coll_ = nullptr;
  for (void* p : peers_) session_.stop(p);
  peers_.clear();
}

bool GroupProfile::wantsProxy() const {
  return session_.wants(profile::kProxyOp | profile::kProxyStep | profile::kNetPlugin);
}

void GroupProfile::watch(proxy::OpTrace* trace, const kernels::ConnHandle& h, bool isSend, int channel,
                         kernels::Proto proto, const uint32_t* abortFlag, int op) {
  void* parent = op < 0 ? coll_ : op < static_cast<int>(peers_.size()) ? peers_[op] : nullptr;
  if (trace == nullptr || parent == nullptr || !wantsProxy()) return;
  for (const Watched& w : watched_) {
    if (w.trace == trace) return;  // (several operations on one connection: the first has its steps)
  }
  if (!onHost_) {  // (armed in stream order around the launch: takeDeviceWatch)
    for (const DeviceWatch::End& e : deviceEnds_) {
      if (e.trace == trace) return;
    }
  }
  proxy::OpTrace::Op o;
  o.session = &session_;
  o.parent = parent;
  o.channel = channel;
  o.peer = h.peer;
  o.isSend = isSend;
  o.chunkSize = static_cast<int>(kernels::stepElements(proto, h, 1));
  o.wantSteps = session_.wants(profile::kProxyStep | profile::kNetPlugin);  // (a NetPlugin's parent is its step)
  if (!isSend) o.landedSizes = h.sizes;
  if (!onHost_) {
    deviceEnds_.push_back(DeviceWatch::End{trace, o, h.step, h.tail});
    watchedAbort_ = abortFlag;
    return;
  }
  const uint64_t first = kernels::loadRelaxed(h.step);
  trace->arm(o, first, isSend ? nullptr : h.tail);
  watched_.push_back(Watched{trace, h.step, abortFlag});
}

void GroupProfile::unwatch() {
  for (const Watched& w : watched_) {
    w.trace->disarm(kernels::loadRelaxed(const_cast<uint64_t*>(w.stepWord)), w.abortFlag);
  }
  watched_.clear();
}

void GroupProfile::collStart(const plan::Task& task, const plan::CollPlan& plan) {
  closeOpen();
  if (!session_.wants(profile::kStartsColl)) return;
  ProfileEvent e = describeTask(task);
  e.type = profile::kColl;
  e.parent = task.apiEvent;
  e.parentGroup = group_;
  e.seqNumber = session_.nextSeq(static_cast<int>(task.func));
  e.nChannels = plan.nChannels;
  e.nWarps = nWarps_;
  e.algo = algoName(plan.choice.algo, &e.algoId);
  e.proto = protoName(plan.proto);
  e.protoId = static_cast<uint8_t>(plan.proto);
  coll_ = session_.start(e);
}

uint64_t* GroupProfile::beforeRun() {
  if (session_.wants(profile::kKernelLaunch)) {
    ProfileEvent e;
    e.type = profile::kKernelLaunch;
    e.parent = groupApi_;
    launch_ = session_.start(e);
  }
  wantKernelCh_ = onHost_ && (coll_ != nullptr || !peers_.empty()) && session_.wants(profile::kKernelCh);
  return wantKernelCh_ ? times_.data() : nullptr;
}

void GroupProfile::afterRun(int nChannels) {
  unwatch();
  session_.stop(launch_);
  launch_ = nullptr;
  if (wantKernelCh_ && coll_ != nullptr) {
    for (int c = 0; c < nChannels && c < kMaxChannels; ++c) {
      ProfileEvent e;
      e.type = profile::kKernelCh;
      e.parent = coll_;
      e.channelId = c;
      e.pTimer = times_[2 * c];
      void* h = session_.start(e);
      session_.record(h, profile::kKernelChStop, times_[2 * c + 1]);
      session_.stop(h);
    }
  }
  wantKernelCh_ = false;
  session_.stop(coll_);
  coll_ = nullptr;
}

void GroupProfile::peersStart(const std::vector<const plan::Task*>& ops) {
  closeOpen();
  if (session_.wants(profile::kStartsP2p)) {
    for (const plan::Task* t : ops) {
      ProfileEvent e = describeTask(*t);
      e.type = profile::kP2p;
      e.parent = t->apiEvent;
      e.parentGroup = group_;
      e.nChannels = 1;
      peers_.push_back(session_.start(e));
    }
  }
  uint64_t* times = beforeRun();
  if (times != nullptr) times[0] = plugin::profilerClock();
}

void GroupProfile::peersDone() {
  const uint64_t end = plugin::profilerClock();
  unwatch();
  session_.stop(launch_);
  launch_ = nullptr;
  if (wantKernelCh_) {
    for (void* p : peers_) {
      if (p == nullptr) continue;
      ProfileEvent e;
      e.type = profile::kKernelCh;
      e.parent = p;
      e.channelId = 0;
      e.pTimer = times_[0];
      void* h = session_.start(e);
      session_.record(h, profile::kKernelChStop, end);
      session_.stop(h);
    }
  }
  wantKernelCh_ = false;
  for (void* p : peers_) session_.stop(p);
  peers_.clear();
}

}  // namespace braid::datapath
