// The profiler plugin's events of one group of one communicator, as its data path runs it
// (DataPath::execute), in NCCL 2.28's order:
//
//   Group start                                   (no parent)
//     per collective, as it runs:
//       Coll start        (parent: its Coll API event; parentGroup: the Group event)
//       Kernel launch start/stop around the run   (parent: the Group API event)
//       KernelCh per channel: start (pTimer: the channel began), KernelChStop (pTimer: it
//         ended), stop                            (parent: the Coll event)
//       Coll stop
//     the sends and receives, run together:
//       P2P start for each (parent: its P2P API event), Kernel launch around the run,
//       KernelCh on channel 0 for each, P2P stops
//   Group stop
//
// With ProxyOp or ProxyStep in the mask, the network ends a collective's channels (or a send's
// or receive's connection, on channel 0) use are watched while it runs (watch): the proxy
// thread reports their ProxyOp and ProxyStep events (proxy/op_trace.h), children of its Coll
// or P2P event, which ends once they have.
//
// On the host backend the kernel is the host executor's run, so KernelCh timestamps are CPU
// times (plugin::profilerClock) and the launch ends when the work does; with a device, Coll
// and P2P events end when the work is enqueued, without KernelCh events (sends and receives
// keep a kernel launch around their enqueue), unless the launch's network ends are watched:
// then they end once the launch has run and its ends' ProxyOps have (DeviceWatch), and the
// Group event once they all have. A collective of count 0
// moves nothing and has no events below its API event (NCCL queues no task for it).
//
// Built only when the communicator has a profiler plugin; whatever an error leaves open is
// stopped by the destructor, innermost first.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "comm/config.h"
#include "plan/planner.h"
#include "plan/task.h"
#include "proxy/op_trace.h"

namespace braid::plugin {
class ProfilerSession;
struct ProfileEvent;
}

namespace braid::datapath {

/// The profiler plugin's context for a communicator (NCCL_PROFILER_PLUGIN), or null when there
/// is no plugin or its init failed. nodeOf: each rank's node.
std::unique_ptr<plugin::ProfilerSession> openProfiler(uint64_t commHash, const std::string& commName, int rank,
                                                      const std::vector<int>& nodeOf);

/// What an event says of a task (function, type, count, buffers, root or peer), by NCCL's
/// names and, for version 1, indices. The caller sets the type and parents.
plugin::ProfileEvent describeTask(const plan::Task& task);

/// With a device, the network ends one launch uses, watched while it runs on the GPU: arm()
/// and finish() run on the runtime's thread in stream order around the launch
/// (Device::hostFunction), so each end's steps are exactly the launch's. finish() disarms the
/// ends, then stops the launch's Coll or P2P events, and the group's Group event once no
/// launch of the group holds it any more.
class DeviceWatch {
 public:
  /// Before the launch runs: each end's steps from its counter on are the launch's.
  void arm();
  /// After it ran: each end's events end (proxy/op_trace.h, disarm), then the launch's.
  void finish();

 private:
  friend class GroupProfile;
  struct End {
    proxy::OpTrace* trace;
    proxy::OpTrace::Op op;
    const uint64_t* stepWord;
    const uint64_t* tail;  ///< a receiver's (the steps landed before the launch ran)
  };
  /// KernelCh events of the launch, from the times its blocks wrote (ChannelStatus).
  void kernelChannels();
  plugin::ProfilerSession* session_ = nullptr;
  const kernels::ChannelStatus* statuses_ = nullptr;  // (null: no KernelCh events)
  int nChannels_ = 0;
  bool perChannel_ = false;  // a collective's: one a channel; else one on channel 0 for each event
  const uint32_t* abortFlag_ = nullptr;
  std::vector<End> ends_;
  std::vector<proxy::OpTrace*> armed_;  // (an end another launch's watch holds is left to it)
  std::vector<void*> events_;
  std::shared_ptr<void> group_;
};

class GroupProfile {
 public:
  /// Starts the Group event (when the plugin's mask wants it). groupApi: the Group API event of
  /// this group (parent of kernel launches); nWarps: what Coll events report; onHost: the work
  /// runs here (with a device there are no KernelCh times to give).
  GroupProfile(plugin::ProfilerSession& session, void* groupApi, int nWarps, bool onHost);
  ~GroupProfile();
  GroupProfile(const GroupProfile&) = delete;
  GroupProfile& operator=(const GroupProfile&) = delete;

  /// A collective was planned and is about to run: its Coll event (closing one left open).
  void collStart(const plan::Task& task, const plan::CollPlan& plan);
  /// Right before the run: the kernel launch starts. Returns where the run writes each
  /// channel's start and end times ([2c], [2c + 1]), or nullptr when no KernelCh is wanted.
  uint64_t* beforeRun();
  /// After the run of nChannels channels: launch stop, KernelCh events, Coll stop.
  void afterRun(int nChannels);

  /// Whether ProxyOp, ProxyStep or NetPlugin events are wanted: then the run's network ends
  /// are watched.
  bool wantsProxy() const;
  /// Before the run: network end `trace` (this rank's end h, a sender's if isSend) carries
  /// the running collective's channel `channel` in protocol `proto`, or (op >= 0) the send or
  /// receive ops[op] of peersStart. Its events end at afterRun or peersDone.
  void watch(proxy::OpTrace* trace, const kernels::ConnHandle& h, bool isSend, int channel, kernels::Proto proto,
             const uint32_t* abortFlag, int op = -1);

  /// With a device: the ends watch() was given since the last call, and the Coll or P2P events
  /// now open, as a watch for the launch about to be enqueued (which then owns those events);
  /// null when no end was given (the events end at enqueue, as without ProxyOp events).
  /// `statuses`: the device's, where the launch's nChannels blocks write their times
  /// (KernelCh events, when the mask has them: then a watch is made without ends too);
  /// collective: one KernelCh a channel under the Coll event, else one under each P2P event.
  std::shared_ptr<DeviceWatch> takeDeviceWatch(const kernels::ChannelStatus* statuses, int nChannels, bool collective);
  /// Whether the next launch (with a device) is to be watched: watch() was given ends for it,
  /// or KernelCh events are wanted.
  bool watchesNextLaunch() const;

  /// The group's sends and receives are about to run together.
  void peersStart(const std::vector<const plan::Task*>& ops);
  /// They ran.
  void peersDone();

 private:
  void closeOpen();
  void unwatch();  // the watched ends' events end

  struct Watched {
    proxy::OpTrace* trace;
    const uint64_t* stepWord;
    const uint32_t* abortFlag;
  };

  plugin::ProfilerSession& session_;
  void* groupApi_;
  int nWarps_;
  bool onHost_;
  void* group_ = nullptr;
  std::shared_ptr<void> groupHeld_;  // stops group_ when the last of this and the device watches goes
  std::vector<DeviceWatch::End> deviceEnds_;  // with a device: what watch() was given for the next launch
  const uint32_t* watchedAbort_ = nullptr;
  void* coll_ = nullptr;    // the collective running now
  void* launch_ = nullptr;  // its kernel launch
  std::vector<void*> peers_;  // the P2P events of the sends and receives running now
  std::vector<Watched> watched_;  // network ends whose proxy reports ProxyOp events now
  bool wantKernelCh_ = false;
  std::array<uint64_t, 2 * kMaxChannels> times_{};
};

}  // namespace braid::datapath
