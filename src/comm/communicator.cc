#include "comm/communicator.h"

#include <algorithm>

#include "bootstrap/bootstrap.h"
#include "core/log.h"
#include "core/params.h"
#include "kernels/platform.h"
#include "datapath/data_path.h"
#include "runtime/host/job_thread.h"
#include "transport/net/one_sided_links.h"

namespace braid {

Communicator::Communicator(const RankIdentity& identity, CommConfig config)
    : identity_(identity),
      config_(std::move(config)),
      oneSidedOverNetwork_(params::process().integer("BRAID_ONE_SIDED_NET") != 0) {}

Communicator::~Communicator() {
  handles::beginClose(this);  // (already begun by ncclCommDestroy or ncclCommAbort)
  handles::waitIdle(this);
  waitForJob();
  job_.reset();
  profiler_ = nullptr;
  dataPath_.reset();  // (an abort meanwhile still reaches the kernels through the mirror)
  // The one-sided carrier next, while the rest of this object lives: the CUDA backend's relay
  // sends what the device's host functions queued before the device went, and reports a
  // failure into this communicator (datapath/one_sided_relay.h).
  oneSidedLinks_.store(nullptr, std::memory_order_release);
  oneSidedLinksOwned_.reset();
  abortMirror_.store(nullptr, std::memory_order_release);
}

CallGuard::CallGuard(Communicator& c) : c_(c) {
  if (!handles::enter(&c)) {
    // (not read: the object may be gone)
    fail(ncclInvalidUsage, "communicator %p is %s; no call is taken once ncclCommDestroy or ncclCommAbort has "
         "begun", static_cast<void*>(&c), handles::closing(&c) ? "being destroyed" : "destroyed");
  }
}

Communicator& communicatorFrom(ncclComm_t handle, const char* argument) {
  if (handle == nullptr) fail(ncclInvalidArgument, "%s is NULL", argument);
  if (handles::live(handle)) return *handle;
  if (handles::closing(handle)) {
    fail(ncclInvalidUsage, "%s %p is being destroyed (ncclCommDestroy or ncclCommAbort began on it)", argument,
         static_cast<void*>(handle));
  }
  fail(ncclInvalidArgument, "%s %p is not a live communicator (destroyed, or never one)", argument,
       static_cast<void*>(handle));
}

void Communicator::setAsyncError(ncclResult_t error) noexcept {
  ncclResult_t current = state_.load(std::memory_order_acquire);
  while ((current == ncclSuccess || current == ncclInProgress) &&
         !state_.compare_exchange_weak(current, error, std::memory_order_acq_rel)) {
  }
}

void Communicator::requestAbort() {
  abort_.store(true, std::memory_order_release);
  kernels::storeRelease(&abortWord_, 1u);
  if (uint32_t* mirror = abortMirror_.load(std::memory_order_acquire)) kernels::storeRelease(mirror, 1u);
  std::lock_guard<std::mutex> lock(followerMutex_);
  if (abortFollower_ != nullptr) abortFollower_->requestAbort();
}

void Communicator::setAbortFollower(Communicator* follower) {
  std::lock_guard<std::mutex> lock(followerMutex_);
  abortFollower_ = follower;
  if (follower != nullptr && abort_.load(std::memory_order_acquire)) follower->requestAbort();
}

void Communicator::mirrorAbortTo(uint32_t* word) {
  kernels::storeRelease(word, kernels::loadAcquire(&abortWord_));
  abortMirror_.store(word, std::memory_order_release);
}

void Communicator::refuseIfSuspended(const char* call) const {
  if (!suspended()) return;  // (its FIFOs and scratch are given back: NCCL's comm "cannot be used")
  const std::string failure = resumeFailure();
  if (!failure.empty()) {
    fail(ncclInvalidUsage, "%s: communicator %p (rank %d of %d) is unusable: its ncclCommResume failed (%s); "
         "ncclCommDestroy or ncclCommAbort it", call, static_cast<const void*>(this), identity_.rank, identity_.nRanks,
         failure.c_str());
  }
  fail(ncclInvalidUsage, "%s: communicator %p (rank %d of %d) is suspended (ncclCommSuspend); call ncclCommResume "
       "before using it", call, static_cast<const void*>(this), identity_.rank, identity_.nRanks);
}

std::string Communicator::resumeFailure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return resumeFailure_;
}

void Communicator::setResumeFailure(const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  resumeFailure_ = why;
}

ncclResult_t Communicator::run(std::function<void()> job, bool background) {
  waitForJob();
  // Only a nonblocking communicator shows ncclInProgress while its job runs.
  const bool showProgress = !config_.blocking;
  if (showProgress) state_.store(ncclInProgress, std::memory_order_release);
  auto finish = [this, showProgress] {
    ncclResult_t expected = ncclInProgress;
    if (showProgress) state_.compare_exchange_strong(expected, ncclSuccess, std::memory_order_acq_rel);
  };
  if (!background && config_.blocking) {
    // Inline: the caller's exception fence reports the failure with its own name.
    try {
      job();
    } catch (const Error& e) {
      setAsyncError(e.code());
      throw;
    } catch (...) {
      setAsyncError(ncclInternalError);
      throw;
    }
    return asyncError();
  }
  if (job_ == nullptr) job_ = std::make_unique<runtime::host::JobThread>();
  jobResult_.store(ncclSuccess, std::memory_order_release);
  job_->post([this, job = std::move(job), finish] {
    try {
      job();
      finish();
    } catch (const Error& e) {
      jobResult_.store(e.code(), std::memory_order_release);
      setLastError(e.what());
      setAsyncError(e.code());
      BRAID_WARN("rank %d: %s", identity_.rank, e.what());
    } catch (const std::exception& e) {
      jobResult_.store(ncclInternalError, std::memory_order_release);
      setLastError(e.what());
      setAsyncError(ncclInternalError);
      BRAID_WARN("rank %d: %s", identity_.rank, e.what());
    }
  });
  return showProgress ? ncclInProgress : ncclSuccess;
}

void Communicator::waitForJob() {
  if (job_ != nullptr && !job_->isCurrent()) job_->waitIdle();
}

bootstrap::Bootstrap& Communicator::bootstrap() {
  if (bootstrap_ == nullptr) {
    fail(ncclInvalidUsage, "the communicator (rank %d of %d) has not completed init", identity_.rank,
         identity_.nRanks);
  }
  return *bootstrap_;
}

datapath::DataPath& Communicator::dataPath() {
  if (dataPath_ == nullptr) {
    fail(ncclInvalidUsage, "the communicator (rank %d of %d) has not completed init", identity_.rank,
         identity_.nRanks);
  }
  return *dataPath_;
}

void Communicator::completeInit(std::unique_ptr<bootstrap::Bootstrap> channel, const RankIdentity& identity,
                                std::unique_ptr<datapath::DataPath> dataPath) {
  bootstrap_ = std::move(channel);
  identity_ = identity;
  dataPath_ = std::move(dataPath);
  if (dataPath_ != nullptr) dataPath_->setRegistrations(&registrations_);
  profiler_ = dataPath_ != nullptr ? dataPath_->profiler() : nullptr;
}

comm::SignalBoard& Communicator::signals() {
  if (comm::SignalBoard* made = signalsMade_.load(std::memory_order_acquire)) return *made;
  std::lock_guard<std::mutex> lock(mutex_);
  if (signals_ == nullptr) {
    signals_ = std::make_unique<comm::SignalBoard>(identity_.rank, identity_.nRanks, std::max(1, config_.numRmaCtx));
    signalsMade_.store(signals_.get(), std::memory_order_release);
  }
  return *signals_;
}

void Communicator::adoptOneSidedLinks(std::unique_ptr<transport::onesided::Carrier> links) {
  std::lock_guard<std::mutex> lock(mutex_);
  oneSidedLinksOwned_ = std::move(links);
  oneSidedLinks_.store(oneSidedLinksOwned_.get(), std::memory_order_release);
}

comm::SignalBoard* Communicator::signalsIfMade() { return signalsMade_.load(std::memory_order_acquire); }

std::string Communicator::lastError() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lastError_;
}

void Communicator::setLastError(const std::string& text) {
  std::lock_guard<std::mutex> lock(mutex_);
  lastError_ = text;
}

}  // namespace braid
