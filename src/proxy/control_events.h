// The profiler plugin's ProxyCtrl events: what the proxy thread itself does, as NCCL 2.28
// reports its progress thread. Each is a short event of its own (no parent), started, given
// its states and stopped:
//
//   Active            the proxy moved something after it had gone idle;
//   Idle              it has moved nothing for a while and stops spinning (proxy.h: it then
//                     waits in ppoll between passes);
//   Sleep, Wakeup     spans that wait: from Idle until a pass moves again or an operation is
//                     posted (the timeouts that look for steps a kernel published end no sleep);
//   Append, AppendEnd the proxy took operations the data path posted (post()) since it last
//                     looked; AppendEnd's appendedProxyOps says how many.
//
// So for a communicator they come in the order Active, (Idle, Sleep..Wakeup, [Append], Active)...
// with Append events wherever operations are posted. NCCL's proxy thread is a communicator's;
// Braid's is the process's (proxy.h), so every communicator of the process whose plugin asks
// for ProxyCtrl gets the events of the one thread, while it holds a ControlWatch.
//
// With no communicator watching, the proxy thread's cost is one relaxed load per pass, and
// post()'s one relaxed load per operation.
#pragma once

#include <cstdint>

namespace braid::plugin {
class ProfilerSession;
}

namespace braid::proxy {

/// A communicator's ProxyCtrl events, from construction to destruction: the proxy thread sends
/// them to `session` whenever its mask has ProxyCtrl. A null session watches nothing (and
/// allocates nothing). Destroy it before the session: it closes a Sleep left open.
class ControlWatch {
 public:
  explicit ControlWatch(plugin::ProfilerSession* session);
  ~ControlWatch();
  ControlWatch(const ControlWatch&) = delete;
  ControlWatch& operator=(const ControlWatch&) = delete;

 private:
  plugin::ProfilerSession* session_;
};

/// The data path: an operation over the network is about to run. Wakes the proxy (kick) and,
/// while a communicator watches, counts it for the next Append.
void post();

/// The proxy thread's side (proxy.cc), one per thread.
class ControlReporter {
 public:
  ControlReporter() = default;
  ~ControlReporter();  // (the thread ends: a Sleep still open wakes)
  ControlReporter(const ControlReporter&) = delete;
  ControlReporter& operator=(const ControlReporter&) = delete;

  /// The doorbell rang: a Sleep ends, and the operations posted since the last look are
  /// appended.
  void doorbell();
  /// A pass ended: `moved` anything; `waiting`: the next ppoll waits (the proxy is idle).
  void afterPass(bool moved, bool waiting);

 private:
  bool active_ = false;    // Active reported last (else Idle, or nothing yet)
  bool sleeping_ = false;  // a Sleep is open
};

}  // namespace braid::proxy
