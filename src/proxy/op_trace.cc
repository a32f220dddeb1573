#include "proxy/op_trace.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "kernels/platform.h"
#include "plugin/profiler_plugin.h"

namespace braid::proxy {

namespace profile = plugin::profile;

OpTrace::~OpTrace() {
  if (registered_.load(std::memory_order_relaxed)) plugin::forgetNetParents(this);
}

void OpTrace::arm(const Op& op, uint64_t firstStep, const uint64_t* tail) {
  // (before mutex_: a callback holds the registry's lock, then takes mutex_)
  if (!registered_.exchange(true)) plugin::registerNetParents(this, netSlots_.data(), kernels::kSteps);
  std::lock_guard<std::mutex> lock(mutex_);
  // (read under the lock: a step the proxy published before is reported here, one it
  // publishes after by its stepLanded, which takes the lock after publishing)
  const uint64_t landed = tail != nullptr ? kernels::loadAcquire(const_cast<uint64_t*>(tail)) : 0;
  op_ = op;
  opEvent_ = nullptr;
  opStarted_ = false;
  first_ = firstStep;
  end_ = UINT64_MAX;
  done_ = firstStep;
  next_ = firstStep;
  open_.fill(0);
  steps_.fill(nullptr);
  armed_.store(true, std::memory_order_seq_cst);
  // (a step the proxy lands from here on is reported by it; before, by these)
  for (uint64_t s = firstStep; s < landed && s < firstStep + kernels::kSteps; ++s) {
    const uint64_t bytes =
        op.landedSizes != nullptr
            ? kernels::loadRelaxed(const_cast<uint64_t*>(op.landedSizes) + s % kernels::kSteps) & 0xffffffffu
            : 0;
    startStep(s, profile::kProxyStepRecvGPUWait, bytes);
  }
}

void OpTrace::startStep(uint64_t s, int state, uint64_t bytes) {
  if (s < first_ || s >= end_ || s < done_) return;
  const size_t slot = s % kernels::kSteps;
  if (open_[slot] == s + 1) return;  // (already reported: arming saw it landed)
  // Steps start in order: a receiver's step whose header came before arming, and which has
  // not landed yet, is in RecvWait (its bytes unknown here) when a later one shows up.
  for (uint64_t t = std::max(next_, done_); t < s; ++t) {
    const int waiting = op_.isSend ? profile::kProxyStepSendWait : profile::kProxyStepRecvWait;
    if (open_[t % kernels::kSteps] != t + 1) openStep(t, waiting, 0);
  }
  openStep(s, state, bytes);
}

void OpTrace::openStep(uint64_t s, int state, uint64_t bytes) {
  const size_t slot = s % kernels::kSteps;
  next_ = std::max(next_, s + 1);
  if (!opStarted_) {
    opStarted_ = true;
    plugin::ProfileEvent e;
    e.type = profile::kProxyOp;
    e.parent = op_.parent;
    e.pid = getpid();
    e.channelId = op_.channel;
    e.peer = op_.peer;
    e.nSteps = 0;
    e.chunkSize = op_.chunkSize;
    e.isSend = op_.isSend;
    opEvent_ = op_.session->start(e);
  }
  if (!op_.wantSteps) return;
  // A step kSteps before still open in this slot (its report of being done has not come yet:
  // the slot was freed and refilled first) stops now; overwritten, its event would never stop.
  if (open_[slot] != 0 && open_[slot] != s + 1) stopStep(open_[slot] - 1);
  plugin::ProfileEvent e;
  e.type = profile::kProxyStep;
  e.parent = opEvent_;
  e.step = static_cast<int>(s - first_);
  void* h = op_.session->start(e);
  op_.session->record(h, state, bytes);
  steps_[slot] = h;
  open_[slot] = s + 1;
  landedSeen_[slot] = state == profile::kProxyStepRecvGPUWait;
}

void OpTrace::stopStep(uint64_t s) {
  const size_t slot = s % kernels::kSteps;
  if (open_[slot] != s + 1) return;
  if (!op_.isSend && !landedSeen_[slot] && s < end_ && end_ != UINT64_MAX) {
    // Disarmed between the proxy publishing the step (which the kernel then consumed) and its
    // report of it: the step landed, with the size the proxy wrote.
    const uint64_t* sizes = op_.landedSizes;
    const uint64_t bytes = sizes != nullptr ? kernels::loadRelaxed(const_cast<uint64_t*>(sizes) + slot) & 0xffffffffu : 0;
    op_.session->record(steps_[slot], profile::kProxyStepRecvGPUWait, bytes);
  }
  op_.session->stop(steps_[slot]);
  steps_[slot] = nullptr;
  open_[slot] = 0;
}

void OpTrace::stepTaken(uint64_t s, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_.load(std::memory_order_relaxed)) return;
  startStep(s, op_.isSend ? profile::kProxyStepSendWait : profile::kProxyStepRecvWait, bytes);
}

void OpTrace::stepLanded(uint64_t s, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_.load(std::memory_order_relaxed)) return;
  const size_t slot = s % kernels::kSteps;
  if (open_[slot] == s + 1) {
    if (landedSeen_[slot]) return;  // (arming saw it landed)
    op_.session->record(steps_[slot], profile::kProxyStepRecvGPUWait, bytes);
    landedSeen_[slot] = true;
  } else {  // (its header came before the trace was armed)
    startStep(s, profile::kProxyStepRecvGPUWait, bytes);
  }
}

void OpTrace::stepsDone(uint64_t until) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_.load(std::memory_order_relaxed)) return;
  for (; done_ < until && done_ < end_; ++done_) stopStep(done_);
  if (done_ >= end_) idle_.notify_all();
}

void OpTrace::finish() {
  for (uint64_t s = done_; s < end_ && s < done_ + kernels::kSteps; ++s) stopStep(s);
  for (size_t slot = 0; slot < open_.size(); ++slot) {  // (steps past the end: none are started)
    if (open_[slot] != 0) stopStep(open_[slot] - 1);
  }
  op_.session->stop(opEvent_);
  opEvent_ = nullptr;
  armed_.store(false, std::memory_order_relaxed);
}

void* OpTrace::startNetEvent(int slot, int64_t id, void* data, plugin::ProfilerSession** session) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_.load(std::memory_order_relaxed) || slot < 0 || slot >= static_cast<int>(kernels::kSteps)) {
    return nullptr;
  }
  const size_t at = static_cast<size_t>(slot);
  if (open_[at] == 0 || steps_[at] == nullptr || !op_.session->wants(profile::kNetPlugin)) return nullptr;
  plugin::ProfileEvent e;
  e.type = profile::kNetPlugin;
  e.parent = steps_[at];
  e.netId = id;
  e.netData = data;
  void* handle = op_.session->start(e);
  if (handle != nullptr) *session = op_.session;
  return handle;
}

void OpTrace::disarm(uint64_t endStep, const uint32_t* abortFlag) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!armed_.load(std::memory_order_relaxed)) return;
  end_ = endStep;
  if (op_.isSend) {  // its last frames may still be on their way into the network
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (done_ < end_ && std::chrono::steady_clock::now() < deadline &&
           (abortFlag == nullptr || kernels::loadRelaxed(const_cast<uint32_t*>(abortFlag)) == 0)) {
      idle_.wait_for(lock, std::chrono::milliseconds(5));
    }
  }
  finish();
}

void OwnNetEvents::start(OpTrace& trace, uint64_t s, Open& o, int64_t id, void* data) {
  o.step = s + 1;
  o.event = nullptr;
  plugin::netProfilerCallback(&o.event, ncclProfilerNetEventStart, trace.netParent(s), id, data);
}

OwnNetEvents::Open& OwnNetEvents::reuse(uint64_t s, int k) {
  Open& o = open_[s % kernels::kSteps][static_cast<size_t>(k)];
  if (o.event != nullptr) plugin::netProfilerCallback(&o.event, ncclProfilerNetEventStop, nullptr, 0, nullptr);
  o.step = 0;
  o.event = nullptr;
  return o;
}

void OwnNetEvents::startIb(OpTrace& trace, uint64_t s, int k, int device, uint64_t wrId, int opcode, int qpNum,
                           size_t length) {
  if (!trace.armed() || k < 0 || k >= kPerStep) return;
  Open& o = reuse(s, k);  // (an event a step before left open in this slot stops first)
  o.ib = ncclProfilerNetIbDescr_v1_t{};
  o.ib.type = ncclProfileQp;
  o.ib.qp.device = device;
  o.ib.qp.wr_id = wrId;
  o.ib.qp.opcode = opcode;
  o.ib.qp.qpNum = qpNum;
  o.ib.qp.length = length;
  start(trace, s, o, NCCL_PROFILER_NET_TYPE_IB | NCCL_PROFILER_NET_IB_VER, &o.ib);
}

void OwnNetEvents::startSocket(OpTrace& trace, uint64_t s, int k, int fd, int op, size_t length) {
  if (!trace.armed() || k < 0 || k >= kPerStep) return;
  Open& o = reuse(s, k);
  o.sock = ncclProfilerNetSockDescr_v1_t{};
  o.sock.type = ncclProfileSocket;
  o.sock.sock.fd = fd;
  o.sock.sock.op = op;
  o.sock.sock.length = length;
  start(trace, s, o, NCCL_PROFILER_NET_TYPE_SOCK | NCCL_PROFILER_NET_SOCKET_VER, &o.sock);
}

void OwnNetEvents::stop(uint64_t s) {
  for (Open& o : open_[s % kernels::kSteps]) {
    if (o.step != s + 1) continue;
    if (o.event != nullptr) plugin::netProfilerCallback(&o.event, ncclProfilerNetEventStop, nullptr, 0, nullptr);
    o.step = 0;
    o.event = nullptr;
  }
}

}  // namespace braid::proxy
