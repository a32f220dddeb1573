// The profiler plugin's ProxyOp and ProxyStep events of one network connection end: what the
// proxy thread sees of an operation's steps on it.
//
// NCCL's proxy is handed each operation with its step count; Braid's kernels cut their steps
// as they run and the proxy only sees FIFO steps come and go. So the data path arms the trace
// of every network end an operation may use before it runs (the event of its Coll or P2P, the
// channel, this end's step counter), and the proxy thread, when armed, reports each step it
// moves from there on:
//
//   sender:   ProxyStep start when it takes a step the kernel published, SendWait (with the
//             step's bytes) while the frame goes into the network, stop once it is there (the
//             socket transport: in the socket; a net plugin: landed, as the receiver says);
//   receiver: ProxyStep start when a step's header arrives, RecvWait while its payload does,
//             RecvGPUWait (its bytes) once it is in the FIFO for the kernel, stop once the
//             kernel freed the slot.
//
// The ProxyOp starts with the first step the operation moves on the end (an end it does not
// use gets none); its nSteps is 0, as the count is known only when the kernel is done. After
// the run the data path disarms the trace: a sender's remaining steps are waited for (at
// most a second: the peer reads them) and a receiver's are stopped (the kernel consumed
// them); then the ProxyOp stops. A receiver's step that landed before the trace was armed
// (its peer ran ahead) is reported from arming on, in RecvGPUWait, with the bytes the proxy
// wrote in the FIFO's step descriptions.
//
// A receiver's trace cannot tell the header of the next operation's first step (its peer ran
// ahead) from one of its own: such a step is reported under the operation armed when it
// came, and stopped at disarm in RecvWait (steps past the end that the kernel did not consume).
//
// A net plugin's NetPlugin events (plugin/net_profiling.h) are children of these ProxySteps:
// while armed, the transport passes netParent(step) as the phandle of each isend and irecv of
// a step (NULL otherwise), and the event the plugin starts with it gets the ProxyStep open in
// that step's slot. So a NetPlugin event in the mask arms the trace with its steps, as
// ProxyStep does.
//
// With no plugin, or the plugin's mask without ProxyOp, ProxyStep and NetPlugin, no trace is
// armed: the proxy's per-step cost is one relaxed load.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "kernels/work.h"
#include "nccl_profiler.h"
#include "plugin/net_profiling.h"

namespace braid::plugin {
class ProfilerSession;
}

namespace braid::proxy {

class OpTrace final : public plugin::NetEventParents {
 public:
  OpTrace() = default;
  ~OpTrace();  // (forgets its phandles, if it was ever armed)
  OpTrace(const OpTrace&) = delete;
  OpTrace& operator=(const OpTrace&) = delete;

  /// What the ProxyOp says of the operation on this end.
  struct Op {
    plugin::ProfilerSession* session = nullptr;
    void* parent = nullptr;  ///< the Coll or P2P event
    int channel = 0;
    int peer = 0;
    bool isSend = false;
    int chunkSize = 0;       ///< bytes of one step of the operation's protocol
    bool wantSteps = false;  ///< ProxyStep events too (else only the ProxyOp)
    /// A receiver's step descriptions (stepInfo), which its proxy writes as it lands each
    /// step: the bytes of a step that landed before arming; null: not known (reported as 0).
    const uint64_t* landedSizes = nullptr;
  };

  /// Data path, before the run: steps from `firstStep` (this end's step counter) are the
  /// operation's. A receiver passes its `tail` (the steps its proxy published so far): those
  /// from firstStep on are reported at once, waiting for the kernel.
  void arm(const Op& op, uint64_t firstStep, const uint64_t* tail);
  /// Data path, after the run (the kernel's steps end before endStep): see the file comment.
  /// abortFlag ends a sender's wait at once.
  void disarm(uint64_t endStep, const uint32_t* abortFlag);

  /// Proxy thread: whether an operation is watched (then the calls below report its steps).
  bool armed() const { return armed_.load(std::memory_order_relaxed); }
  /// Proxy thread: the sender took step s (bytes) / the receiver saw its header.
  void stepTaken(uint64_t s, uint64_t bytes);
  /// Proxy thread, receiver: step s (bytes) is in the FIFO for the kernel.
  void stepLanded(uint64_t s, uint64_t bytes);
  /// Proxy thread: the steps before `until` are done (the sender's are in the network; the
  /// receiver's freed by the kernel).
  void stepsDone(uint64_t until);

  /// The phandle of the net plugin calls that move step s (while armed): an address, valid
  /// while this trace lives.
  void* netParent(uint64_t s) { return &netSlots_[s % kernels::kSteps]; }
  /// A net plugin's callback (plugin/net_profiling.h): a NetPlugin event under the ProxyStep
  /// open in `slot`.
  void* startNetEvent(int slot, int64_t id, void* data, plugin::ProfilerSession** session) override;

 private:
  void startStep(uint64_t s, int state, uint64_t bytes);  // (and the steps before it not started yet)
  void openStep(uint64_t s, int state, uint64_t bytes);
  void stopStep(uint64_t s);
  void finish();  // (under mutex_) stops what is open

  std::atomic<bool> armed_{false};
  std::mutex mutex_;
  std::condition_variable idle_;
  Op op_;
  void* opEvent_ = nullptr;
  bool opStarted_ = false;
  uint64_t first_ = 0;
  uint64_t end_ = UINT64_MAX;                     ///< known once disarm begins
  uint64_t done_ = 0;                             ///< steps before it are done
  uint64_t next_ = 0;                             ///< steps before it have been started
  std::array<void*, kernels::kSteps> steps_{};    ///< per slot: the open step's event
  std::array<uint64_t, kernels::kSteps> open_{};  ///< per slot: its step + 1 (0: none)
  std::array<bool, kernels::kSteps> landedSeen_{};  ///< per slot: a receiver's step said RecvGPUWait
  std::array<char, kernels::kSteps> netSlots_{};  ///< the phandles (their addresses only)
  std::atomic<bool> registered_{false};           ///< netSlots_ are known to the callback
};

/// The NetPlugin events of Braid's own network transports, as NCCL's built-in IB and socket
/// transports (net plugins inside NCCL) start theirs: one per RDMA write (IB) or frame on a
/// socket (Socket) of a step, under that step's ProxyStep, through the callback a net plugin
/// gets (plugin/net_profiling.h), with NCCL's descriptors (nccl_profiler.h). A descriptor stays
/// here until its event stops. Proxy thread only; while the trace is not armed nothing starts.
class OwnNetEvents {
 public:
  /// Events one step may hold open at once (IB: its payload's write and its record's).
  static constexpr int kPerStep = 2;

  /// Event k of step s: a work request on queue pair qpNum of device `device`.
  void startIb(OpTrace& trace, uint64_t s, int k, int device, uint64_t wrId, int opcode, int qpNum, size_t length);
  /// Event k of step s: a frame of `length` payload bytes on socket `fd` (op 0: sent, 1: received).
  void startSocket(OpTrace& trace, uint64_t s, int k, int fd, int op, size_t length);
  /// Stops step s's open events.
  void stop(uint64_t s);

 private:
  struct Open {
    uint64_t step = 0;  ///< its step + 1 (0: none open)
    void* event = nullptr;
    union {
      ncclProfilerNetIbDescr_v1_t ib;
      ncclProfilerNetSockDescr_v1_t sock;
    };
    Open() : ib{} {}
  };
  Open& reuse(uint64_t s, int k);  ///< event k's place for step s, what it held stopped
  void start(OpTrace& trace, uint64_t s, Open& o, int64_t id, void* data);

  std::array<std::array<Open, kPerStep>, kernels::kSteps> open_{};
};

}  // namespace braid::proxy
