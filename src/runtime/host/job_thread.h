// A thread that runs one job at a time, for as long as its owner lives. Waiting for a job it
// sleeps on a condition variable; waiting for a job to finish, the owner spins then backs off.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace braid::runtime::host {

class JobThread {
 public:
  JobThread();
  ~JobThread();
  JobThread(const JobThread&) = delete;
  JobThread& operator=(const JobThread&) = delete;

  /// Starts job (the previous one must have finished: see waitIdle()).
  void post(std::function<void()> job);
  /// Returns when the posted job has finished.
  void waitIdle() const;
  bool busy() const { return busy_.load(std::memory_order_acquire); }
  /// True when called from this job thread.
  bool isCurrent() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::function<void()> pending_;
  std::atomic<bool> busy_{false};
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace braid::runtime::host
