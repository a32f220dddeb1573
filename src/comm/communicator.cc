#include "comm/communicator.h"

#include "bootstrap/bootstrap.h"
#include "core/log.h"

namespace braid {

Communicator::Communicator(const RankIdentity& identity, CommConfig config)
    : identity_(identity), config_(std::move(config)) {}

Communicator::~Communicator() {
  waitForJob();
  magic_ = 0;
}

void Communicator::setAsyncError(ncclResult_t error) noexcept {
  ncclResult_t current = state_.load(std::memory_order_acquire);
  while ((current == ncclSuccess || current == ncclInProgress) &&
         !state_.compare_exchange_weak(current, error, std::memory_order_acq_rel)) {
  }
}

ncclResult_t Communicator::run(std::function<void()> job, bool background) {
  auto body = [this, job]() -> ncclResult_t {
    try {
      job();
      ncclResult_t expected = ncclInProgress;
      state_.compare_exchange_strong(expected, ncclSuccess, std::memory_order_acq_rel);
      return asyncError();
    } catch (const Error& e) {
      setLastError(e.what());
      setAsyncError(e.code());
      return e.code();
    } catch (const std::exception& e) {
      setLastError(e.what());
      setAsyncError(ncclInternalError);
      return ncclInternalError;
    }
  };
  waitForJob();
  if (!background && config_.blocking) {
    // Inline: the caller's exception fence reports the failure with its own name.
    state_.store(ncclInProgress, std::memory_order_release);
    try {
      job();
    } catch (const Error& e) {
      setAsyncError(e.code());
      throw;
    } catch (...) {
      setAsyncError(ncclInternalError);
      throw;
    }
    ncclResult_t expected = ncclInProgress;
    state_.compare_exchange_strong(expected, ncclSuccess, std::memory_order_acq_rel);
    return asyncError();
  }
  state_.store(ncclInProgress, std::memory_order_release);
  job_ = std::thread([body = std::move(body)]() mutable {
    const ncclResult_t r = body();
    if (r != ncclSuccess) BRAID_WARN("background communicator job failed: %s", ncclGetErrorString(r));
  });
  return ncclInProgress;
}

void Communicator::waitForJob() {
  if (job_.joinable() && job_.get_id() != std::this_thread::get_id()) job_.join();
}

bootstrap::Bootstrap& Communicator::bootstrap() {
  if (bootstrap_ == nullptr) {
    fail(ncclInvalidUsage, "the communicator (rank %d of %d) has not completed init", identity_.rank,
         identity_.nRanks);
  }
  return *bootstrap_;
}

void Communicator::completeInit(std::unique_ptr<bootstrap::Bootstrap> channel, const RankIdentity& identity) {
  bootstrap_ = std::move(channel);
  identity_ = identity;
}

std::string Communicator::lastError() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lastError_;
}

void Communicator::setLastError(const std::string& text) {
  std::lock_guard<std::mutex> lock(mutex_);
  lastError_ = text;
}

}  // namespace braid
