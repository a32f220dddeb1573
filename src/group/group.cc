#include "group/group.h"

#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "runtime/host/data_path.h"

namespace braid::group {

namespace {

struct Deferred {
  Communicator* comm;
  std::function<void()> job;
};

struct State {
  int depth = 0;
  std::vector<Deferred> creations;
  std::vector<std::pair<Communicator*, std::vector<plan::Task>>> operations;  // in order of first use
};

thread_local State tls;

/// Runs jobs, one per communicator, concurrently: the first in the calling thread, the others
/// on their communicators' job threads. Throws the first failure (blocking communicators).
ncclResult_t runTogether(std::vector<Deferred>& jobs) {
  if (jobs.empty()) return ncclSuccess;
  bool anyNonblocking = false;
  for (auto& d : jobs) anyNonblocking = anyNonblocking || !d.comm->config().blocking;
  if (anyNonblocking) {
    for (auto& d : jobs) d.comm->run(d.job, /*background=*/true);
    return ncclInProgress;
  }
  for (size_t i = 1; i < jobs.size(); ++i) jobs[i].comm->run(jobs[i].job, /*background=*/true);
  ncclResult_t first = ncclSuccess;
  std::string text;
  try {
    jobs[0].comm->run(jobs[0].job, /*background=*/false);
  } catch (const Error& e) {
    first = e.code();
    text = e.what();
  }
  for (size_t i = 1; i < jobs.size(); ++i) {
    jobs[i].comm->waitForJob();
    if (jobs[i].comm->jobResult() != ncclSuccess && first == ncclSuccess) {
      first = jobs[i].comm->jobResult();
      text = "rank " + std::to_string(jobs[i].comm->identity().rank) + ": " + jobs[i].comm->lastError();
    }
  }
  if (first != ncclSuccess) throw Error(first, text);
  return ncclSuccess;
}

}  // namespace

bool active() { return tls.depth > 0; }

void start() { ++tls.depth; }

void defer(Communicator* comm, std::function<void()> job) { tls.creations.push_back({comm, std::move(job)}); }

void enqueue(Communicator* comm, const plan::Task& task) {
  for (auto& [c, tasks] : tls.operations) {
    if (c == comm) {
      tasks.push_back(task);
      return;
    }
  }
  tls.operations.push_back({comm, {task}});
}

void forget(Communicator* comm) {
  auto& jobs = tls.creations;
  for (auto it = jobs.begin(); it != jobs.end();) it = it->comm == comm ? jobs.erase(it) : it + 1;
  auto& ops = tls.operations;
  for (auto it = ops.begin(); it != ops.end();) it = it->first == comm ? ops.erase(it) : it + 1;
}

ncclResult_t end() {
  if (tls.depth == 0) fail(ncclInvalidUsage, "ncclGroupEnd was called without a matching ncclGroupStart");
  if (--tls.depth > 0) return ncclSuccess;
  std::vector<Deferred> creations;
  creations.swap(tls.creations);
  std::vector<std::pair<Communicator*, std::vector<plan::Task>>> operations;
  operations.swap(tls.operations);

  ncclResult_t result = ncclSuccess;
  if (!creations.empty()) {
    // Creation jobs rendezvous with each other: every one on its own job thread.
    bool anyNonblocking = false;
    for (auto& d : creations) {
      d.comm->run(d.job, /*background=*/true);
      anyNonblocking = anyNonblocking || !d.comm->config().blocking;
    }
    if (anyNonblocking) return ncclInProgress;
    std::string text;
    for (auto& d : creations) {
      d.comm->waitForJob();
      if (d.comm->jobResult() != ncclSuccess && result == ncclSuccess) {
        result = d.comm->jobResult();
        text = "rank " + std::to_string(d.comm->identity().rank) + ": " + d.comm->lastError();
      }
    }
    if (result != ncclSuccess) throw Error(result, text);
  }
  std::vector<Deferred> jobs;
  for (auto& [comm, tasks] : operations) {
    Communicator* c = comm;
    jobs.push_back({c, [c, tasks = std::move(tasks)] {
                      CallGuard inUse(*c);
                      c->dataPath().execute(tasks);
                    }});
  }
  return runTogether(jobs);
}

}  // namespace braid::group
