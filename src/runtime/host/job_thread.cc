#include "runtime/host/job_thread.h"

#include "kernels/platform.h"

namespace braid::runtime::host {

JobThread::JobThread() : thread_([this] { loop(); }) {}

JobThread::~JobThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void JobThread::post(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_ = std::move(job);
    busy_.store(true, std::memory_order_release);
  }
  wake_.notify_all();
}

void JobThread::waitIdle() const {
  for (uint32_t spins = 0; busy_.load(std::memory_order_acquire); ++spins) kernels::backOff(spins);
}

void JobThread::loop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stop_ || pending_ != nullptr; });
      if (pending_ == nullptr) return;
      job = std::move(pending_);
      pending_ = nullptr;
    }
    job();
    busy_.store(false, std::memory_order_release);
  }
}

}  // namespace braid::runtime::host
