// The communicator object behind ncclComm_t.
//
// State is split by concern: who the rank is (RankIdentity), how it was configured
// (CommConfig), its out-of-band channel (Bootstrap), and its lifecycle (the asynchronous
// state and the background job that nonblocking calls run on). Channels and transports
// join as separate objects with the data path.
#pragma once

#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/config.h"
#include "comm/grow_ids.h"
#include "comm/handles.h"
#include "comm/peer_info.h"
#include "comm/red_ops.h"
#include "comm/registrations.h"
#include "comm/signals.h"
#include "core/status.h"

namespace braid {

namespace bootstrap {
class Bootstrap;
}
namespace datapath {
class DataPath;
}
namespace runtime::host {
class JobThread;
}
namespace plugin {
class ProfilerSession;
}
namespace transport::onesided {
class Carrier;
}

/// Who a communicator's rank is. rank and nRanks are known at creation; the rest once
/// init has exchanged peer information.
struct RankIdentity {
  int rank = 0;
  int nRanks = 1;
  int cudaDevice = -1;  ///< -1 on the host backend
  int localRank = 0;    ///< index among the ranks that share this rank's host (NCCL's "LSA" team)
  int localRanks = 1;   ///< ranks on this host
  Backend backend = Backend::kHost;
  uint64_t commHash = 0;  ///< the same on every rank: identifies the communicator in logs
};

class Communicator {
 public:
  explicit Communicator(const RankIdentity& identity, CommConfig config = {});
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  /// Closes the handle to new calls (handles::beginClose, when destroy has not), waits for the
  /// calls in progress and any background job (which watches the abort flag), then releases
  /// everything.
  ~Communicator();
  /// The process that created it; another one (a forked child) holds a copy whose threads do
  /// not exist there and whose connections belong to the parent.
  pid_t creatorPid() const noexcept { return creatorPid_; }
  bool inheritedByFork() const noexcept { return getpid() != creatorPid_; }
  /// In a forked child: makes the handle dead without running any destructor (which would join
  /// threads that do not exist here, and shut down sockets and unlink segments the parent still
  /// uses). Everything it holds is left to the end of this process, deliberately.
  void abandonInChild() noexcept { handles::abandon(this); }
  const RankIdentity& identity() const noexcept { return identity_; }
  const CommConfig& config() const noexcept { return config_; }

  /// ncclSuccess while healthy, ncclInProgress while a nonblocking job runs, else the error.
  ncclResult_t asyncError() const noexcept { return state_.load(std::memory_order_acquire); }
  /// Records an asynchronous error; the first error sticks.
  void setAsyncError(ncclResult_t error) noexcept;

  /// Runs job now (blocking communicators) or on the background thread (nonblocking ones, or
  /// `background`), recording its outcome as the async state. Returns the outcome, or
  /// ncclInProgress when the job runs in the background.
  ncclResult_t run(std::function<void()> job, bool background);
  /// Waits for the background job, if any.
  void waitForJob();
  /// Outcome of the last background job (after waitForJob()).
  ncclResult_t jobResult() const { return jobResult_.load(std::memory_order_acquire); }

  /// The out-of-band channel; throws ncclInvalidUsage while init has not completed.
  bootstrap::Bootstrap& bootstrap();
  bool hasBootstrap() const { return bootstrap_ != nullptr; }
  /// Completes init: the channel, the identity learnt through it, the data path.
  void completeInit(std::unique_ptr<bootstrap::Bootstrap> channel, const RankIdentity& identity,
                    std::unique_ptr<datapath::DataPath> dataPath);
  /// The data path; throws ncclInvalidUsage unless init has completed.
  datapath::DataPath& dataPath();
  bool hasDataPath() const { return dataPath_ != nullptr; }
  /// The profiler plugin's context, owned by the data path; null when there is none (the one
  /// test the API layer makes per call for it).
  plugin::ProfilerSession* profiler() const noexcept { return profiler_; }
  RedOpTable& redOps() { return redOps_; }
  RegistrationTable& registrations() { return registrations_; }
  WindowTable& windows() { return windows_; }
  /// The counters of one-sided operations (comm/signals.h), made at the first call (the first
  /// window registration, once init has fixed the ranks).
  comm::SignalBoard& signals();
  /// The same, or null while no window was registered.
  comm::SignalBoard* signalsIfMade();
  /// What carries one-sided operations to ranks this rank cannot address (other hosts): a
  /// transport::onesided::Carrier (TCP links, the net plugin's or the verbs one, wrapped by
  /// datapath/one_sided_relay.h on the CUDA backend), once a window registration made it; else null.
  transport::onesided::Carrier* oneSidedLinks() const { return oneSidedLinks_.load(std::memory_order_acquire); }
  /// Keeps `links` (made by a window registration) until the communicator ends.
  void adoptOneSidedLinks(std::unique_ptr<transport::onesided::Carrier> links);
  /// BRAID_ONE_SIDED_NET for this communicator: one-sided operations to every other rank go
  /// over links. Read at each window registration (every rank's claim says it); tests set it.
  bool oneSidedOverNetwork() const { return oneSidedOverNetwork_; }
  void setOneSidedOverNetwork(bool on) { oneSidedOverNetwork_ = on; }

  /// Fixes rank and size of a communicator made by split or shrink, before its init runs.
  void setPosition(int rank, int nRanks) {
    identity_.rank = rank;
    identity_.nRanks = nRanks;
  }

  /// Set by ncclCommAbort; every wait of this communicator watches it.
  std::atomic<bool>& abortFlag() { return abort_; }
  /// The same flag as a word kernels can poll (host or device memory visible to them).
  const uint32_t* abortWord() const { return &abortWord_; }
  /// Raises both flags: waits in bootstrap, transports and kernels end within one poll slice.
  void requestAbort();
  /// Also raises `word` on abort (the copy a GPU's kernels poll); it must live as long as the
  /// data path (the device that owns it belongs to it).
  void mirrorAbortTo(uint32_t* word);
  /// While a grow of this communicator creates `follower`, aborting this one aborts it too
  /// (a blocking grow's new handle is not the caller's yet: the parent's abort must end it).
  /// nullptr ends the link; the follower must outlive it.
  void setAbortFollower(Communicator* follower);
  /// The grow id this communicator handed out (ncclCommGetUniqueId), if any.
  comm::GrowIds& growIds() { return growIds_; }

  bool finalized() const { return finalized_.load(); }
  void markFinalized() { finalized_.store(true); }
  bool revoked() const { return revoked_.load(); }
  void markRevoked() { revoked_.store(true); }
  /// Between ncclCommSuspend and ncclCommResume: its memory is given back and operations are
  /// refused (refuseIfSuspended).
  bool suspended() const { return suspended_.load(); }
  void setSuspended(bool suspended) { suspended_.store(suspended); }
  /// Throws ncclInvalidUsage naming `call` while suspended (saying why it is unusable after a
  /// failed resume).
  void refuseIfSuspended(const char* call) const;
  /// Why its last ncclCommResume failed ("": none did): it then stays suspended for good, part
  /// of its memory given back and its peers' state unknown, as NCCL's comm after a failed
  /// resume; destroy or abort is all that is left.
  std::string resumeFailure() const;
  void setResumeFailure(const std::string& why);
  /// Sequence number of split/shrink calls: the same on every rank, used as a message tag.
  uint32_t nextSplitSequence() { return splitSequence_++; }

  /// Text of the last failure on this communicator.
  std::string lastError() const;
  void setLastError(const std::string& text);

 private:
  const pid_t creatorPid_ = getpid();
  RankIdentity identity_;
  CommConfig config_;
  std::unique_ptr<bootstrap::Bootstrap> bootstrap_;
  std::unique_ptr<datapath::DataPath> dataPath_;  // after bootstrap_: destroyed first
  plugin::ProfilerSession* profiler_ = nullptr;        // dataPath_'s
  RedOpTable redOps_;
  RegistrationTable registrations_;
  WindowTable windows_;
  std::unique_ptr<comm::SignalBoard> signals_;  // guarded by mutex_ while made; lives to the end (peers address it)
  std::atomic<comm::SignalBoard*> signalsMade_{nullptr};
  // After signals_: ends first (its proxy side adds to the board's counters).
  std::unique_ptr<transport::onesided::Carrier> oneSidedLinksOwned_;
  std::atomic<transport::onesided::Carrier*> oneSidedLinks_{nullptr};
  bool oneSidedOverNetwork_ = false;  // set from BRAID_ONE_SIDED_NET at init
  std::atomic<ncclResult_t> state_{ncclSuccess};
  std::atomic<bool> abort_{false};
  uint32_t abortWord_ = 0;
  std::atomic<uint32_t*> abortMirror_{nullptr};
  std::mutex followerMutex_;
  Communicator* abortFollower_ = nullptr;
  comm::GrowIds growIds_;
  std::atomic<ncclResult_t> jobResult_{ncclSuccess};
  std::atomic<bool> finalized_{false};
  std::atomic<bool> revoked_{false};
  std::atomic<bool> suspended_{false};
  uint32_t splitSequence_ = 0;
  std::unique_ptr<runtime::host::JobThread> job_;
  mutable std::mutex mutex_;
  std::string lastError_;
  std::string resumeFailure_;  // under mutex_
};

/// An operation in progress on a communicator, for as long as the guard lives (counted in the
/// handle registry, so destroy and abort wait for it); throws ncclInvalidUsage when the
/// communicator's destroy or abort has begun.
class CallGuard {
 public:
  explicit CallGuard(Communicator& c);
  ~CallGuard() { handles::leave(&c_); }
  CallGuard(const CallGuard&) = delete;
  CallGuard& operator=(const CallGuard&) = delete;

 private:
  Communicator& c_;
};

}  // namespace braid

/// The handle type of the C ABI is the communicator under NCCL's name. Its storage comes from
/// the handle registry (addresses not reused), and it is live from construction on.
struct ncclComm final : braid::Communicator {
  explicit ncclComm(const braid::RankIdentity& identity, braid::CommConfig config = {})
      : Communicator(identity, std::move(config)) {
    braid::handles::publish(this);
  }
  static void* operator new(size_t bytes) { return braid::handles::allocate(bytes); }
  static void operator delete(void* storage) noexcept { braid::handles::release(storage); }
};

namespace braid {

/// The communicator behind a handle, checked in the handle registry (never by reading the
/// object); throws ncclInvalidArgument naming `argument` when the handle is NULL or not a live
/// communicator, and ncclInvalidUsage when its destroy or abort has begun.
Communicator& communicatorFrom(ncclComm_t handle, const char* argument = "comm");

}  // namespace braid
