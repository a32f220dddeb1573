#include "runtime/host/executor.h"

namespace braid::runtime::host {

void Executor::runOnWorkers(int nChannels, const std::function<void(int, HostGroup&)>& task) {
  const int per = threadsPerChannel_;
  std::vector<std::unique_ptr<ChannelShared>> shared;
  for (int c = 0; c < nChannels; ++c) shared.push_back(std::make_unique<ChannelShared>(per));
  const size_t helpers = static_cast<size_t>(nChannels * per - 1);
  while (workers_.size() < helpers) workers_.push_back(std::make_unique<JobThread>());
  for (int c = 0; c < nChannels; ++c) {
    for (int t = 0; t < per; ++t) {
      if (c == 0 && t == 0) continue;  // the caller's part
      ChannelShared* s = shared[c].get();
      workers_[c * per + t - 1]->post([&task, c, t, per, s] {
        HostGroup g(t, per, s);
        task(c, g);
      });
    }
  }
  HostGroup mine(0, per, shared[0].get());
  task(0, mine);
  for (size_t i = 0; i < helpers; ++i) workers_[i]->waitIdle();
}

}  // namespace braid::runtime::host
