// What both ends of a net plugin connection share (see plugin_transport.h): the plugin's comm
// and memory registration, the requests in flight, the GPU slots, and how a failed call is
// reported. Internal to transport/net/plugin.
#pragma once

#include <nccl_net.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/log.h"
#include "core/status.h"
#include "plugin/net_plugin.h"
#include "proxy/proxy.h"
#include "transport/net/net_end.h"
#include "transport/net/plugin/plugin_transport.h"

namespace braid::transport::netplugin::detail {

using namespace netend;  // NOLINT: the shared end machinery is this folder's vocabulary

constexpr int kTag = 0x42524e44;  // every message of a comm carries it ("BRND")
constexpr int kMaxRequests = plugin::kNetMaxRequests;
constexpr size_t kHandleScratch = 4096;  // what listen and connect get to write a handle into

// FrameHeader::reserved of a record whose payload follows it in the same message.
constexpr uint64_t kInlinePayload = 1;

/// Each end's memory after its FIFO: kSteps envelopes of envelopeBytes, step s's at s % kSteps:
/// the step's record, then room for its payload (the largest of a Simple step and a staged LL
/// or LL128 one). Where the Simple slots are in host memory they are this room (the slots are
/// envelopeBytes apart, ConnHandle::simpleStride), so that a Simple step's record lies right in
/// front of its payload and both travel as one message from the slot the kernel wrote.
uint64_t envelopeBytes(const FifoSizes& sizes);

uint64_t extraBytes(const FifoSizes& sizes);

/// The device a connection uses: the topology's (s.port, "name:port") when the plugin has it,
/// else s.deviceHint modulo the devices; *planned says which.
int chooseDevice(const Settings& s, bool* planned = nullptr);

/// How an end on device `dev` registers its Simple slots: NCCL_PTR_DMABUF or NCCL_PTR_CUDA
/// (GPU memory), or 0 (host memory, *why says why unless the backend has no GPU); *flush: a
/// receiver's steps need iflush.
int gpuSlotsType(const Settings& s, int dev, bool receiving, bool* flush, std::string* why);

const char* typeName(int type);

/// One posted request: a step's record or its payload.
struct Request {
  void* handle = nullptr;
  uint64_t step = 0;
  bool payload = false;  ///< else the record
  bool last = false;     ///< sender: the step's last message (its slot is free once it left)
  size_t bytes = 0;      ///< what was posted
};

/// What both ends share: the plugin's comm and memory registration, the requests in flight,
/// and how a failed call is reported.
class PluginEnd : public EndPump {
 public:
  PluginEnd(const FifoSizes& sizes, bool isSend, const Settings& s, int peer)
      : EndPump(sizes, extraBytes(sizes), isSend, s.rank, peer, ""),
        session_(s.session),
        device_(chooseDevice(s, &planned_)),
        what_(s.what) {
    const plugin::NetDeviceProperties& p = session_->properties(device_);
    where_ = session_->name() + " device " + std::to_string(device_) + " (" + p.name + ":" + std::to_string(p.port) +
             (planned_ ? ", the topology's port; " : ", by number; ") + what_;
    tracesSteps_ = true;  // (profiler plugins: proxy/op_trace.h)
    useHostSlots();
    allocateGpuSlots(s);
  }
  ~PluginEnd() override {  // (an end that was never attached, or close() ran: see there)
    if (released_.load(std::memory_order_acquire) || orphaned_) return;
    auto held = proxy::hold();
    release();
  }

  /// On the destroying thread, before detach: asks the proxy thread to end the data path (the
  /// sender completes its sends and posts the end record; the receiver completes its receives
  /// up to that record, and asks for it) and to close the comms there once nothing is in
  /// flight. Waits for that, at most kFinishWait (kAbortWait when the end was not orderly).
  void finish(bool orderly) override {
    closing_.store(true, std::memory_order_release);
    proxy::kick();
    const auto until = std::chrono::steady_clock::now() + (orderly ? kFinishWait : kAbortWait);
    while (!released_.load(std::memory_order_acquire) && !broken_ && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  static constexpr std::chrono::milliseconds kFinishWait{2000};
  static constexpr std::chrono::milliseconds kAbortWait{500};

  /// After detach (the proxy no longer runs this end): closes what the proxy thread did not,
  /// with the proxy held (proxy::hold). A comm that still has requests the plugin did not
  /// fail is left open, and this end's memory with it, rather than closed under them: a plugin
  /// may then invalidate an endpoint that other comms share.
  void close() override {
    EndPump::close();
    if (released_.load(std::memory_order_acquire) || orphaned_) return;
    auto paused = proxy::hold();
    if (inFlight() > 0 && !failing_ && comm_ != nullptr) {
      BRAID_INFO(log::kNet, "NET/Plugin: rank %d %s rank %d (%s): %zu request(s) of net plugin %s still in flight at "
                 "close; its comm is left open", rank_, isSend_ ? "->" : "<-", peer_, what_.c_str(), inFlight(),
                 session_->name().c_str());
      comm_ = nullptr;
      mhandle_ = nullptr;
      gpuMhandle_ = nullptr;
      gpuSlots_ = nullptr;  // (left allocated: the plugin may still write there)
      memory_.abandon();
    }
    release();
  }

 protected:
  /// Step `step`'s envelope (envelopeBytes): its record, then its payload when that travels in
  /// the record's message; with host slots, the payload's room is the step's Simple slot.
  FrameHeader* envelope(uint64_t step) {
    return reinterpret_cast<FrameHeader*>(extra() + step % kernels::kSteps * envelopeBytes(sizes_));
  }

  /// Where a step's payload is (sender) or lands (receiver) when it travels in its record's
  /// message: right after the record.
  static char* inlinePayload(FrameHeader* record) { return reinterpret_cast<char*>(record + 1); }

  /// The Simple slots in host memory: each envelope's room, envelopeBytes apart.
  void useHostSlots() {
    slots_ = inlinePayload(envelope(0));
    slotStride_ = static_cast<uint32_t>(envelopeBytes(sizes_));
  }

  /// False when r is not ncclSuccess: the failure is reported once settled (see settle).
  bool ok(ncclResult_t r, const char* call) {
    if (r == ncclSuccess) return true;
    if (!failing_) {
      failing_ = true;
      failingWhy_ = std::string(call) + " returned " + plugin::NetSession::resultText(r);
      failingCode_ = r == ncclRemoteError ? ncclRemoteError : ncclSystemError;
      failingSince_ = std::chrono::steady_clock::now();
    }
    return false;
  }

  /// The control socket ended without a goodbye (a loss, not a protocol error): an aborting
  /// peer says no goodbye, and its last steps may still be in the plugin's pipe, which runs
  /// apart from the control socket. The loss stands once the plugin has moved nothing for
  /// kDrain, or fails; what it still delivers lands meanwhile.
  void lost(const std::string& why, bool protocolError, ncclResult_t code = ncclRemoteError) override {
    if (!protocolError && !broken_ && !byeReceived_ && !lossDeferred_ && (comm_ != nullptr || isSend_)) {
      lossDeferred_ = true;
      lossWhy_ = why;
      lastMove_ = std::chrono::steady_clock::now();
      return;
    }
    EndPump::lost(why, protocolError, code);
  }

  /// Each pass while a loss is deferred: whether it now stands.
  void drainLoss(bool moved) {
    if (!lossDeferred_ || broken_) return;
    const auto now = std::chrono::steady_clock::now();
    if (moved) {
      lastMove_ = now;
    } else if (now - lastMove_ >= kDrain) {
      EndPump::lost(lossWhy_, false);
    }
  }
  static constexpr std::chrono::milliseconds kDrain{300};

  /// After a plugin call failed: nothing more is posted or tested. A peer that closed its comm
  /// after saying goodbye (which travels on the control socket, and may arrive after the
  /// plugin noticed the close) ends the connection quietly; otherwise, once kSettle has passed,
  /// the failure breaks the connection. True while failing.
  bool settle() {
    if (!failing_) return false;
    if (byeReceived_) {
      broken_ = true;
    } else if (lossDeferred_) {
      EndPump::lost(lossWhy_, false);  // the peer is gone: that is the news, not the plugin's error
    } else if (std::chrono::steady_clock::now() - failingSince_ >= kSettle) {
      failed(failingWhy_, failingCode_);
    }
    return true;
  }
  static constexpr std::chrono::milliseconds kSettle{200};

  /// The plugin broke the connection (or the interface): the peer's fault box says why, now.
  void failed(const std::string& why, ncclResult_t code = ncclSystemError) {
    lost("failed in net plugin " + session_->name() + " (device " + std::to_string(device_) + ", " + what_ +
             "): " + why,
         true, code);
  }

  /// Registers this end's memory with `comm`; throws naming the plugin (setup) or reports
  /// (proxy) when it cannot.
  ncclResult_t registerMemory(void* comm) {
    return session_->regMr(comm, memory_.get(), memory_.bytes(), NCCL_PTR_HOST, &mhandle_);
  }

  /// Registers the GPU slots (when there are any) with `comm`, as gpuType_ says.
  ncclResult_t registerGpuSlots(void* comm) {
    if (gpuSlots_ == nullptr) return ncclSuccess;
    const ncclResult_t r = gpuType_ == NCCL_PTR_DMABUF
                               ? session_->regMrDmaBuf(comm, gpuSlots_, gpuBytes(), NCCL_PTR_CUDA, dmabufOffset_, dmabuf_,
                                                       &gpuMhandle_)
                               : session_->regMr(comm, gpuSlots_, gpuBytes(), NCCL_PTR_CUDA, &gpuMhandle_);
    closeDmabuf();
    return r;
  }

  /// The call registerGpuSlots made, for messages.
  const char* gpuCall() const { return gpuType_ == NCCL_PTR_DMABUF ? "regMrDmaBuf" : "regMr (NCCL_PTR_CUDA)"; }

  /// Gives the GPU slots back (after a failed registration, or at the end); the Simple slots
  /// are the host memory's again.
  void freeGpuSlots() {
    closeDmabuf();
    if (gpuSlots_ != nullptr) gpu_.allocator->freeData(gpuSlots_);
    gpuSlots_ = nullptr;
    useHostSlots();
    gpuType_ = 0;
    needsFlush_ = false;
  }

  uint64_t gpuBytes() const { return uint64_t(kernels::kSteps) * sizes_.simpleStepBytes; }
  FifoMemory::DeviceData gpuSlots() const override {
    if (gpuSlots_ == nullptr) return {};
    return {gpuSlots_, gpuBytes()};
  }

  /// The memory handle of what a step's payload moves through: a Simple slot or an envelope.
  /// (By where the slots are, not by the handle: a plugin may answer a registration with null.)
  void* payloadHandle(const FrameHeader& h) const {
    return (h.flags & kFrameFlagged) == 0 && gpuSlots_ != nullptr ? gpuMhandle_ : mhandle_;
  }

  /// Tests the oldest request; true (and *bytes) once it is done; false while it runs or after
  /// reporting a failure (broken_).
  bool oldestDone(size_t* bytes) {
    int done = 0;
    if (!ok(session_->test(requests_.front().handle, &done, bytes), "test")) return false;
    return done != 0;
  }

  void pop() {
    for (size_t i = 1; i < requests_.size(); ++i) requests_[i - 1] = requests_[i];
    requests_.pop_back();
  }

  void orphanMore() override {
    comm_ = nullptr;  // the parent's: hands off
    listenComm_ = nullptr;
    mhandle_ = nullptr;
    gpuMhandle_ = nullptr;
  }

  /// Requests posted and not yet done (the receiver adds its flushes).
  virtual size_t inFlight() const { return requests_.size(); }

  /// Each pass, last: once finish() asked and the data path has ended (`ended`, nothing in
  /// flight), closes the comms here, on the proxy thread.
  bool releaseWhenDone(bool ended) {
    if (!closing_.load(std::memory_order_acquire) || released_.load(std::memory_order_relaxed)) return false;
    if (!ended || inFlight() > 0) return false;
    release();
    return true;
  }

  /// Deregisters and closes the plugin's comms (once; never in a forked child).
  void release() {
    if (orphaned_ || released_.load(std::memory_order_relaxed)) return;
    if (mhandle_ != nullptr && comm_ != nullptr) session_->deregMr(comm_, mhandle_);
    mhandle_ = nullptr;
    if (gpuMhandle_ != nullptr && comm_ != nullptr) session_->deregMr(comm_, gpuMhandle_);
    gpuMhandle_ = nullptr;
    if (comm_ != nullptr) isSend_ ? session_->closeSend(comm_) : session_->closeRecv(comm_);
    comm_ = nullptr;
    if (listenComm_ != nullptr) session_->closeListen(listenComm_);
    listenComm_ = nullptr;
    freeGpuSlots();
    released_.store(true, std::memory_order_release);
  }

  /// Moves the Simple slots into GPU memory where gpuSlotsType says so (registered once the
  /// plugin's comm exists); a dma-buf the backend cannot export falls back to NCCL_PTR_CUDA
  /// where the device reports it.
  void allocateGpuSlots(const Settings& s) {
    gpu_ = s.gpuDirect;
    gpuType_ = gpuSlotsType(s, device_, !isSend_, &needsFlush_, &gpuWhy_);
    if (gpuType_ == 0) return;
    try {
      gpuSlots_ = static_cast<char*>(gpu_.allocator->allocateData(gpuBytes(), gpuType_ == NCCL_PTR_DMABUF));
      if (gpuType_ == NCCL_PTR_DMABUF) {
        dmabuf_ = gpu_.allocator->dmabufFd(gpuSlots_, gpuBytes(), &dmabufOffset_);
        if (dmabuf_ < 0 && (session_->properties(device_).ptrSupport & NCCL_PTR_CUDA) != 0) gpuType_ = NCCL_PTR_CUDA;
        if (dmabuf_ < 0 && gpuType_ == NCCL_PTR_DMABUF) fail(ncclSystemError, "the device cannot export its memory as dma-buf");
      }
    } catch (const std::exception& e) {  // (out of GPU memory, say: the host's slots serve)
      gpuWhy_ = e.what();
      freeGpuSlots();
      return;
    }
    slots_ = gpuSlots_;
    slotStride_ = 0;  // (back to back)
  }

  void closeDmabuf() {
    if (dmabuf_ >= 0) ::close(dmabuf_);
    dmabuf_ = -1;
  }

  /// For the connection's log line: where the Simple slots are.
  std::string slotsText() const {
    if (gpu_.allocator == nullptr) return "";
    if (gpuSlots_ == nullptr) return "; Simple steps stage in host memory: " + gpuWhy_;
    return std::string("; Simple steps in GPU memory (") + typeName(gpuType_) + (needsFlush_ ? ", flushed by iflush)" : ")");
  }

  std::shared_ptr<plugin::NetSession> session_;
  bool planned_ = false;  // device_ is the topology's port
  int device_;
  std::string what_;
  std::string where_;  // "loopback device 1 (loop1:1, the topology's port; ring0": for the log
  void* comm_ = nullptr;
  void* listenComm_ = nullptr;
  void* mhandle_ = nullptr;
  GpuDirectPolicy gpu_;            // (its allocator gave gpuSlots_)
  char* gpuSlots_ = nullptr;       // the Simple slots in GPU memory, or null (host memory's)
  int gpuType_ = 0;                // how they are registered: NCCL_PTR_DMABUF, NCCL_PTR_CUDA
  void* gpuMhandle_ = nullptr;
  int dmabuf_ = -1;                // the slots' dma-buf until registered
  uint64_t dmabufOffset_ = 0;
  bool needsFlush_ = false;        // receiver: iflush each Simple step before publishing tail
  std::string gpuWhy_;             // why the slots are in host memory (the log)
  std::vector<Request> requests_;  // oldest first; at most kMaxRequests
  bool lossDeferred_ = false;  // the control socket ended without goodbye (see lost)
  std::string lossWhy_;
  std::chrono::steady_clock::time_point lastMove_{};
  bool failing_ = false;  // a plugin call failed (see settle)
  std::string failingWhy_;
  ncclResult_t failingCode_ = ncclSystemError;
  std::chrono::steady_clock::time_point failingSince_{};
  std::atomic<bool> closing_{false};   // finish() asked the proxy to end the data path
  std::atomic<bool> released_{false};  // the comms are closed (or left open: close)
  bool ended_ = false;  // sender: the end record is posted; receiver: it arrived
};

}  // namespace braid::transport::netplugin::detail
