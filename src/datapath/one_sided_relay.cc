#include "datapath/one_sided_relay.h"

#include <utility>

#include "core/log.h"
#include "core/status.h"
#include "kernels/platform.h"

namespace braid::datapath {

namespace {

/// Staging comes in powers of two from 64 KiB, so that puts of similar sizes reuse it.
uint64_t stagingSize(uint64_t bytes) {
  uint64_t size = 64 << 10;
  while (size < bytes) size <<= 1;
  return size;
}

}  // namespace

OneSidedRelay::OneSidedRelay(std::unique_ptr<transport::onesided::Carrier> inner, runtime::Device& device,
                             const uint32_t* abortWord, Failed failed)
    : device_(device),
      abortWord_(abortWord),
      failed_(std::move(failed)),
      copier_(device.hostCopier()),
      inner_(std::move(inner)) {
  sender_ = std::thread([this] { sendLoop(); });
}

OneSidedRelay::~OneSidedRelay() {
  {
    std::lock_guard<std::mutex> lock(queueMutex_);
    stop_ = true;
  }
  queued_.notify_all();
  sender_.join();  // (after sending what was queued: each put is bounded by the carrier's timeouts and the abort word)
}

void OneSidedRelay::enqueue(Operation op, const void* source, void* stream, const char* call) {
  if (device_.captureId(stream) != 0) {
    fail(ncclInvalidUsage, "the stream is being captured into a CUDA graph; one-sided calls in a graph are not "
                           "supported (a replay would put and signal rank %d again)", op.peer);
  }
  const uint64_t bytes = op.bytes;
  if (bytes > 0) {
    op.staging = takeStaging(bytes);
    device_.copy(op.staging.get(), source, bytes, stream);  // (device to pinned host, after the stream's earlier work)
  }
  // The host function only queues: it runs on CUDA's callback thread, which must not call CUDA
  // nor wait for a network.
  if (!device_.hostFunction(stream, [this, op = std::move(op)]() mutable { post(std::move(op)); })) {
    fail(ncclInvalidUsage, "%s: the stream is being captured into a CUDA graph", call);
  }
}

std::shared_ptr<char> OneSidedRelay::takeStaging(uint64_t bytes) {
  const uint64_t size = stagingSize(bytes);
  {
    std::lock_guard<std::mutex> lock(poolMutex_);
    auto it = pool_.find(size);
    if (it != pool_.end()) {
      std::shared_ptr<char> staging = std::move(it->second);
      pool_.erase(it);
      return staging;
    }
  }
  return device_.allocatePinned(size);
}

void OneSidedRelay::giveBackStaging(std::shared_ptr<char> staging, uint64_t bytes) {
  // (kept until the relay goes: freeing pinned memory may wait for the device, which may be
  // running a wait for a signal that this very thread is to send)
  std::lock_guard<std::mutex> lock(poolMutex_);
  pool_.emplace(stagingSize(bytes), std::move(staging));
}

void OneSidedRelay::post(Operation op) {
  {
    std::lock_guard<std::mutex> lock(queueMutex_);
    queue_.push_back(std::move(op));
  }
  queued_.notify_one();
}

void OneSidedRelay::sendLoop() {
  std::unique_lock<std::mutex> lock(queueMutex_);
  for (;;) {
    queued_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // (stopping, and everything queued was sent)
    Operation op = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    carry(op);
    if (op.staging != nullptr) giveBackStaging(std::move(op.staging), op.bytes);
    lock.lock();
  }
}

void OneSidedRelay::carry(const Operation& op) {
  try {
    if (op.isPut) {
      inner_->put(op.peer, op.window, op.offset, op.staging.get(), op.bytes, op.ctx);
    } else {
      inner_->signal(op.peer, op.ctx);
    }
  } catch (const Error& e) {
    if (kernels::loadAcquire(const_cast<uint32_t*>(abortWord_)) != 0) return;  // (aborted: what was queued goes unsent, as expected)
    char why[512];
    std::snprintf(why, sizeof why, "%s to rank %d enqueued on a stream failed: %s",
                  op.isPut ? "ncclPutSignal" : "ncclSignal", op.peer, e.what());
    BRAID_WARN("one-sided: %s", why);
    if (failed_) failed_(e.code(), why);
  }
}

void OneSidedRelay::publishWindow(uint64_t id, void* buffer, uint64_t size, transport::onesided::Settle) {
  std::shared_ptr<char> mirror = device_.allocatePinned(size);
  {
    std::lock_guard<std::mutex> lock(mirrorsMutex_);
    mirrors_[id] = mirror;
  }
  char* window = static_cast<char*>(buffer);
  char* host = mirror.get();
  runtime::Device::HostCopier* copier = copier_.get();
  try {
    inner_->publishWindow(id, host, size, [window, host, copier](uint64_t offset, uint64_t bytes) {
      copier->copy(window + offset, host + offset, bytes);
    });
  } catch (...) {
    std::lock_guard<std::mutex> lock(mirrorsMutex_);
    mirrors_.erase(id);
    throw;
  }
}

void OneSidedRelay::withdrawWindow(uint64_t id) {
  inner_->withdrawWindow(id);  // (on return nothing lands in the mirror any more)
  std::lock_guard<std::mutex> lock(mirrorsMutex_);
  mirrors_.erase(id);
}

}  // namespace braid::datapath
