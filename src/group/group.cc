#include "group/group.h"

#include <algorithm>
#include <map>
#include <tuple>
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

namespace {

/// Leaves the outermost group level: hands back what it collected. False while still nested.
bool leave(const char* call, std::vector<Deferred>* creations,
           std::vector<std::pair<Communicator*, std::vector<plan::Task>>>* operations) {
  if (tls.depth == 0) fail(ncclInvalidUsage, "%s was called without a matching ncclGroupStart", call);
  if (--tls.depth > 0) return false;
  creations->swap(tls.creations);
  operations->swap(tls.operations);
  return true;
}

/// Runs deferred creations, each on its own job thread (they rendezvous with each other).
/// ncclInProgress when one is nonblocking; throws the first failure.
ncclResult_t runCreations(std::vector<Deferred>& creations) {
  ncclResult_t result = ncclSuccess;
  if (creations.empty()) return result;
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
  return result;
}

}  // namespace

/// Ranks of one communicator whose work goes to one stream of one device would wait for each
/// other forever (the stream runs one rank's kernel after the other's): refused, naming them.
void checkSharedStreams(const std::vector<std::pair<Communicator*, std::vector<plan::Task>>>& operations) {
  std::map<std::tuple<uint64_t, int, void*>, int> seen;  // (communicator, device, stream) -> rank
  for (const auto& [comm, tasks] : operations) {
    if (!comm->hasBootstrap() || !comm->dataPath().onDevice()) continue;
    const int device = comm->dataPath().deviceOrdinal();
    for (const plan::Task& t : tasks) {
      auto [it, added] = seen.emplace(std::make_tuple(comm->identity().commHash, device, t.stream), comm->identity().rank);
      if (!added && it->second != comm->identity().rank) {
        fail(ncclInvalidUsage, "%s: ranks %d and %d of one communicator enqueue on the same stream %p of CUDA device %d "
                               "in one group: the stream would run one rank's kernel only after the other's, and each "
                               "waits for the other. Give each rank a stream of its own", t.name, it->second,
             comm->identity().rank, t.stream, device);
      }
    }
  }
}

ncclResult_t end() {
  std::vector<Deferred> creations;
  std::vector<std::pair<Communicator*, std::vector<plan::Task>>> operations;
  if (!leave("ncclGroupEnd", &creations, &operations)) return ncclSuccess;
  if (runCreations(creations) == ncclInProgress) return ncclInProgress;
  checkSharedStreams(operations);
  for (auto& [comm, tasks] : operations) {
    if (comm->hasBootstrap()) comm->dataPath().checkOnDevice(tasks);
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

ncclResult_t simulateEnd(float* estimatedUs) {
  std::vector<Deferred> creations;
  std::vector<std::pair<Communicator*, std::vector<plan::Task>>> operations;
  if (!leave("ncclGroupSimulateEnd", &creations, &operations)) return ncclSuccess;
  const ncclResult_t created = runCreations(creations);
  if (created == ncclInProgress && !operations.empty()) {
    fail(ncclInvalidUsage, "ncclGroupSimulateEnd: the group creates a nonblocking communicator and also holds "
                           "operations; simulate them once the communicator is ready");
  }
  double longest = 0;  // communicators run concurrently; each one's operations one after another
  for (auto& [comm, tasks] : operations) {
    CallGuard inUse(*comm);
    longest = std::max(longest, comm->dataPath().predict(tasks));
  }
  *estimatedUs = static_cast<float>(longest);
  return created;
}

}  // namespace braid::group
