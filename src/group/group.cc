#include "group/group.h"

#include <string>
#include <vector>

#include "comm/communicator.h"

namespace braid::group {

namespace {

struct Deferred {
  Communicator* comm;
  std::function<void()> job;
};

struct State {
  int depth = 0;
  std::vector<Deferred> jobs;
};

thread_local State tls;

}  // namespace

bool active() { return tls.depth > 0; }

void start() { ++tls.depth; }

void defer(Communicator* comm, std::function<void()> job) { tls.jobs.push_back({comm, std::move(job)}); }

void forget(Communicator* comm) {
  auto& jobs = tls.jobs;
  for (auto it = jobs.begin(); it != jobs.end();) it = it->comm == comm ? jobs.erase(it) : it + 1;
}

ncclResult_t end() {
  if (tls.depth == 0) fail(ncclInvalidUsage, "ncclGroupEnd was called without a matching ncclGroupStart");
  if (--tls.depth > 0) return ncclSuccess;
  std::vector<Deferred> jobs;
  jobs.swap(tls.jobs);
  if (jobs.empty()) return ncclSuccess;

  // Every job runs on its communicator's background thread, so that jobs which rendezvous
  // with each other progress together.
  bool anyNonblocking = false;
  for (auto& d : jobs) {
    d.comm->run(d.job, /*background=*/true);
    anyNonblocking = anyNonblocking || !d.comm->config().blocking;
  }
  if (anyNonblocking) return ncclInProgress;
  ncclResult_t first = ncclSuccess;
  std::string text;
  for (auto& d : jobs) {
    d.comm->waitForJob();
    const ncclResult_t r = d.comm->asyncError();
    if (r != ncclSuccess && first == ncclSuccess) {
      first = r;
      text = "rank " + std::to_string(d.comm->identity().rank) + ": " + d.comm->lastError();
    }
  }
  if (first != ncclSuccess) throw Error(first, text);
  return ncclSuccess;
}

}  // namespace braid::group
