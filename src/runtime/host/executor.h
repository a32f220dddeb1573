// The host executor of one communicator: the threads that run its channels.
//
// The thread that calls into Braid runs channel 0 itself (no hand-off for small messages);
// channels 1.. and any extra threads per channel (BRAID_HOST_THREADS_PER_CHANNEL) run on
// worker threads created on first use.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "runtime/host/host_group.h"
#include "runtime/host/job_thread.h"

namespace braid::runtime::host {

class Executor {
 public:
  explicit Executor(int threadsPerChannel) : threadsPerChannel_(threadsPerChannel < 1 ? 1 : threadsPerChannel) {}

  /// Runs task(channel, group) for every channel with threadsPerChannel threads each. The
  /// calling thread is thread 0 of channel 0. Returns when all are done.
  template <typename Task>
  void runChannels(int nChannels, const Task& task) {
    if (nChannels == 1 && threadsPerChannel_ == 1) {  // the latency path: no hand-off at all
      ChannelShared shared(1);
      HostGroup g(0, 1, &shared);
      task(0, g);
      return;
    }
    runOnWorkers(nChannels, task);
  }

 private:
  void runOnWorkers(int nChannels, const std::function<void(int channel, HostGroup& group)>& task);

  int threadsPerChannel_;
  std::vector<std::unique_ptr<JobThread>> workers_;
};

}  // namespace braid::runtime::host
