// The watchdog of one communicator: a thread that turns hangs into errors.
//
// Every 50 ms it looks at what the communicator's channels are doing (kernels::ChannelStatus)
// and at the fault boxes its peers may have left in the connections' memory. It fails the
// communicator (records the error, leaves its own fault notice for the peers, raises the abort
// flag so every wait ends) when
//   - a kernel found that a peer called a different collective (ncclInvalidUsage),
//   - a peer left a fault notice: it failed, so this rank cannot progress (ncclRemoteError),
//   - a peer process on this host (of this pid namespace) has exited, or was killed and is a
//     zombie its parent has not reaped, while an operation runs (ncclRemoteError),
//   - NCCL_TIMEOUT is set and an operation made no progress for that long (ncclSystemError,
//     with a hang report).
// With a GPU, an operation is in flight while it is being enqueued and while a kernel of the
// rank runs (the device's busy(), from marks the kernels leave in their statuses; the clocks
// restart when a queued kernel starts), so a kernel waiting on a dead or stalled peer ends
// through the abort flag and the error is ncclCommGetAsyncError's.
// On the signal named by BRAID_DUMP_ON_SIGNAL it logs the same report without stopping anything.
#pragma once

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/process.h"
#include "kernels/work.h"
#include "transport/connector.h"

namespace braid::bootstrap {
class Bootstrap;
}

namespace braid::datapath {

struct WatchdogSettings {
  int timeoutSeconds = 0;  ///< NCCL_TIMEOUT (or BRAID_TIMEOUT); 0: no timeout
  int dumpSignal = 0;      ///< BRAID_DUMP_ON_SIGNAL as a signal number; 0: none
  int warnAfterSeconds = 30;  ///< BRAID_WAIT_WARN: a wait this long without progress is logged; 0: never

  static WatchdogSettings fromParams();
};

/// A peer's process, for liveness checks (only processes on this host other than ours).
struct PeerProcess {
  int rank;
  process::ProcessWatch watch;  ///< opened at init: notices a zombie, and a pid reused since
};

class Watchdog {
 public:
  /// deviceBusy (null on the host): whether kernels this rank enqueued are still queued or
  /// running; called from the watchdog thread.
  Watchdog(int rank, int nRanks, uint64_t commHash, std::vector<PeerProcess> watched, const transport::Connector& connector,
           kernels::ChannelStatus* statuses, int nStatuses, std::function<void(ncclResult_t)> onFailure, WatchdogSettings settings,
           std::function<bool()> deviceBusy = nullptr, bootstrap::Bootstrap* channel = nullptr);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  /// An operation starts on channels [0, nChannels) (their statuses reset) / ends; name is the
  /// API call ("ncclAllReduce", a string literal). Lock-free: these are on the latency path.
  void begin(const kernels::OpSignature& sig, const char* name, int nChannels);
  void end();
  /// begin() now, end() at scope exit (also when the operation throws).
  class Operation {
   public:
    Operation(Watchdog& w, const kernels::OpSignature& sig, const char* name, int nChannels) : w_(w) {
      w_.begin(sig, name, nChannels);
    }
    ~Operation() { w_.end(); }
    Operation(const Operation&) = delete;
    Operation& operator=(const Operation&) = delete;

   private:
    Watchdog& w_;
  };

  /// A point-to-point operation begins after `collectivesDone` collectives on this
  /// communicator: while it waits on the previous rank (ring channel 0) and that rank announces
  /// the next collective, which this rank has not called, the two wait for each other: a
  /// mismatch. (The calling thread, before begin.)
  void pointToPoint(uint64_t collectivesDone) { nextCollective_.store(collectivesDone + 1, std::memory_order_relaxed); }
  /// The previous rank's announcement of the collective it is in (ring channel 0): while an
  /// operation runs, the same sequence number with other words is a mismatch.
  void watchNeighbour(const kernels::OpSignature* fromPrev, int prevRank);

  /// Fails the communicator: the first failure is recorded; peers are told through the fault
  /// boxes; the abort flag is raised. Later calls do nothing.
  void fail(ncclResult_t code, const std::string& text);
  /// This rank leaves (its communicator is being destroyed or aborted): a notice of that in
  /// every connection's fault box, where no fault was raised, so a peer still waiting on this
  /// rank fails naming it (transport::kFaultLeft: a peer that finished its part is no failure).
  void depart(const std::string& text);
  /// The recorded failure, if any.
  bool failure(ncclResult_t* code, std::string* text) const;
  /// Checks the channels for a signature mismatch or a step of the wrong size now; true (and
  /// fails) when one was found.
  bool checkMismatch();

  /// What every channel is doing, as logged by the timeout and on the dump signal (watchdog
  /// thread only: it owns the timing fields).
  std::string report() const;

 private:
  void loop();
  void tick();
  struct OpView;
  // (each with the tick's one view of the operation in flight)
  void checkFaultBoxes(const OpView& op);
  void checkPeersAlive(const OpView& op);
  void checkTimeout(const OpView& op);
  /// BRAID_WAIT_WARN: one WARN after that long without progress, then at doubling intervals.
  void checkLongWait(const OpView& op);
  /// Who the operation waits for, in the user's words: a rank that has not called it yet
  /// (from the previous rank's announcement, or connection setup waiting on a rank), else the
  /// channels' waits.
  std::string waitingFor(const OpView& op) const;
  void checkNeighbour(const OpView& op);
  /// An operation waiting a while on a peer asks it what it is doing (over the bootstrap
  /// channel, which the watchdog also serves: it answers the peers that ask this rank), and
  /// follows the answers: a peer that waits on a third rank is followed to it, and so on.
  /// - A point-to-point call whose peer is in the next collective, which this rank has not
  ///   called, waits for a rank that waits for it: a mismatch, whatever the peer's place on the
  ///   ring, unless the peer answers that its sends to this rank are still on their way (they
  ///   completed on its side, so it moved on): then it is asked again later.
  /// - The last rank of the chain, when it does not answer, is the one that stopped (its
  ///   process stopped, or its host is unreachable): NCCL_TIMEOUT's report names it, wherever
  ///   it runs (blamedByInquiry). Collectives ask, and answers are followed, only under
  ///   NCCL_TIMEOUT.
  void checkWaitedPeers(const OpView& op);
  /// The operation in the user's words: "ncclAllReduce #3" (number: " #" or " op #"), or the
  /// bare name for point-to-point (its seq is 0).
  static std::string callName(const OpView& op, const char* number);
  /// The rank this one waits on now (connection setup, else a channel's wait), or -1.
  int waitedPeer() const;
  /// From checkWaitedPeers' chain: who stopped this operation, or "".
  std::string blamedByInquiry() const;
  /// The mismatch of a point-to-point call on `peer` with that peer's collective `theirs`.
  std::string pointToPointMismatch(const OpView& op, int peer, const kernels::OpSignature& theirs) const;
  /// Follows the channels' progress counters (lastProgress_, lastProgressAt_).
  void trackProgress();
  /// Whether the operation in flight depends on `peer`, which is gone: a channel or the
  /// connection setup waits on it, or nothing has moved for kGoneGrace (a wait nothing
  /// records). A peer that finished its part and exited, with its data delivered, is no
  /// failure of ours: in a group of sends and receives, or a copy down a tree, a rank may
  /// leave while the others still work, and they may stall a while (connection setup
  /// between processes on a loaded machine took more than a second once).
  bool stuckOn(int peer) const;
  /// The operation in flight, read consistently from the atomics below.
  struct OpView {
    bool inFlight = false;
    kernels::OpSignature sig{};
    const char* name = "";
    uint64_t token = 0;
  };
  OpView currentOp() const;
  /// Watchdog thread: notices a new operation and restarts the clocks.
  void observe(const OpView& op);

  /// The fault boxes a tick reads at most: a rank connected to every other of thousands has
  /// thousands of ends, and each rank's watchdog reading all of them every tick (an N²
  /// process-wide scan, a cache miss an end) had taken the CPUs from the ranks themselves. With
  /// more ends, successive ticks take the next ones (faultCursor_), round and round.
  static constexpr size_t kFaultBoxesPerTick = 64;

  const int rank_, nRanks_;
  const uint64_t commHash_;
  const std::vector<PeerProcess> watched_;
  const transport::Connector& connector_;
  kernels::ChannelStatus* statuses_;
  const int nStatuses_;
  const std::function<void(ncclResult_t)> onFailure_;  // sets the async error, raises the abort flag
  const WatchdogSettings settings_;
  const std::function<bool()> deviceBusy_;

  mutable std::mutex mutex_;  // guards the failure, the neighbour and stop_
  size_t faultCursor_ = 0;  // the first end the next tick's checkFaultBoxes reads (watchdog thread)
  bool failed_ = false;
  ncclResult_t failCode_ = ncclSuccess;
  std::string failText_;
  const kernels::OpSignature* fromPrev_ = nullptr;
  int prevRank_ = -1;

  // The operation in flight, written by the calling thread: token is odd while one runs and
  // changes on every begin and end (a sequence lock for the fields beside it).
  std::atomic<uint64_t> token_{0};
  std::atomic<uint64_t> opSeq_{0}, opWord0_{0}, opWord1_{0};
  std::atomic<const char*> opName_{""};
  std::atomic<uint64_t> nextCollective_{1};  // a point-to-point operation's (pointToPoint)

  // Watchdog thread only.
  uint64_t seenToken_ = 0;
  bool seenInFlight_ = false;
  std::chrono::steady_clock::time_point opStart_, lastProgressAt_;
  uint64_t lastProgress_ = 0;
  std::chrono::steady_clock::time_point lastLivenessCheck_;
  std::chrono::seconds nextWarnAfter_{0};  // the next BRAID_WAIT_WARN report, as a time without progress
  unsigned dumpsSeen_ = 0;
  bootstrap::Bootstrap* const channel_;  ///< for inquiries (checkWaitedPeers); null in tests without one
  // checkWaitedPeers' chain for the operation chainToken_: the peers waited on, each waiting
  // on the next; the last is asked every kInquireEvery since headSince_ (askedAt_), and
  // headAnswered_ says whether it answered.
  uint64_t chainToken_ = 0;
  std::vector<int> chain_;
  std::chrono::steady_clock::time_point askedAt_, headSince_;
  bool headAnswered_ = false;
  bool headIdle_ = false;  ///< its answer: it is in no call on this communicator
  /// This tick: the previous rank, which checkNeighbour saw in the collective a point-to-point
  /// call of this rank waits before (-1: none); checkWaitedPeers asks it whether it owes data.
  int neighbourSuspect_ = -1;

  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace braid::datapath
