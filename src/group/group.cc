#include "group/group.h"

#include <algorithm>
#include <functional>
#include <map>
#include <tuple>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "plugin/profiler_plugin.h"
#include "datapath/data_path.h"
#include "datapath/profile_events.h"

namespace braid::group {

namespace {

struct Deferred {
  Communicator* comm;
  std::function<void()> job;
};

using ApiEvents = std::vector<std::pair<Communicator*, void*>>;
using AfterOperations = std::map<Communicator*, std::vector<std::function<void()>>>;

struct State {
  int depth = 0;
  std::vector<Deferred> creations;
  std::vector<std::pair<Communicator*, std::vector<plan::Task>>> operations;  // in order of first use
  ApiEvents groupApi;  // with a profiler plugin: each communicator's Group API event in this group
  AfterOperations afterOperations;  // one-sided calls, run after their communicator's operations
  bool implicit = false;  // the outermost level is Braid's own group around one call
};

thread_local State tls;

/// The Group API events of a group that ended, each stopped when its communicator's work is
/// done (handed to that job by take), or here when the group ends before.
class PendingApiEvents {
 public:
  explicit PendingApiEvents(ApiEvents events) : events_(std::move(events)) {}
  ~PendingApiEvents() {
    for (auto& [comm, handle] : events_) stopApiEvent(comm, handle);
  }
  /// comm's event (null: none); its job stops it.
  void* take(Communicator* comm) {
    for (auto& [c, handle] : events_) {
      if (c == comm) return std::exchange(handle, nullptr);
    }
    return nullptr;
  }
  /// ncclGroupEnd was called: each event records it.
  void recordEnd() {
    for (auto& [comm, handle] : events_) {
      if (comm->profiler() != nullptr) comm->profiler()->record(handle, plugin::profile::kGroupEndApiStart);
    }
  }
  static void stopApiEvent(Communicator* comm, void* handle) {
    if (handle != nullptr && comm->profiler() != nullptr) comm->profiler()->stop(handle);
  }

 private:
  ApiEvents events_;
};

/// Adds a task to comm's operations of this group. A communicator with operations in the
/// group counts as in use (handles::enter) until the group has run them, so a destroy from
/// another thread waits for the group instead of freeing what it holds.
std::vector<plan::Task>& join(Communicator* comm, const char* call) {
  for (auto& [c, tasks] : tls.operations) {
    if (c == comm) return tasks;
  }
  if (!handles::enter(comm)) {
    fail(ncclInvalidUsage, "%s: communicator %p is being destroyed (ncclCommDestroy or ncclCommAbort began)", call,
         static_cast<void*>(comm));
  }
  try {
    tls.operations.push_back({comm, {}});
  } catch (...) {
    handles::leave(comm);
    throw;
  }
  return tls.operations.back().second;
}

void add(Communicator* comm, const plan::Task& task) { join(comm, task.name).push_back(task); }

/// The communicators of a group's operations, each let go (handles::leave) when this ends.
class HeldComms {
 public:
  explicit HeldComms(const std::vector<std::pair<Communicator*, std::vector<plan::Task>>>& operations) {
    for (const auto& op : operations) comms_.push_back(op.first);
  }
  ~HeldComms() {
    for (Communicator* c : comms_) handles::leave(c);
  }
  HeldComms(const HeldComms&) = delete;
  HeldComms& operator=(const HeldComms&) = delete;

 private:
  std::vector<Communicator*> comms_;
};

/// enqueue with a profiler plugin: the Group API event of comm in this group (started by its
/// first operation, as NCCL does, with NCCL's depth: 1 for a lone call, the user's nesting + 1
/// inside ncclGroupStart), then the
/// operation's Coll API or P2P API event, started and stopped; it parents the operation's
/// events when the group runs.
void addProfiled(Communicator* comm, plugin::ProfilerSession& profiler, const plan::Task& task) {
  namespace profile = plugin::profile;
  void* groupApi = nullptr;
  bool found = false;
  const bool captured = comm->dataPath().capturing(task.stream);
  for (auto& [c, handle] : tls.groupApi) {
    if (c == comm) groupApi = handle, found = true;
  }
  if (!found) {
    if (profiler.wants(profile::kStartsGroupApi)) {
      plugin::ProfileEvent e;
      e.type = profile::kGroupApi;
      e.groupDepth = tls.implicit ? tls.depth : tls.depth + 1;  // (NCCL's: 1 only for an implicit group)
      e.graphCaptured = captured;  // (its first operation's stream)
      groupApi = profiler.start(e);
      profiler.record(groupApi, profile::kGroupStartApiStop);
    }
    tls.groupApi.push_back({comm, groupApi});
  }
  plan::Task t = task;
  const bool peer = task.func == kernels::Func::kSendRecv;
  if (profiler.wants(peer ? profile::kStartsP2pApi : profile::kStartsCollApi)) {
    plugin::ProfileEvent e = datapath::describeTask(task);
    e.type = peer ? profile::kP2pApi : profile::kCollApi;
    e.parent = groupApi;
    e.graphCaptured = captured;
    t.apiEvent = profiler.start(e);
    profiler.stop(t.apiEvent);  // (the call is queued; the handle stays the parent of its events)
  }
  add(comm, t);
}

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
    // (a job thread's failure is its communicator's last error already; this one, run here,
    // becomes it too: ncclGroupEnd names no communicator, and another thread may ask this one)
    jobs[0].comm->setLastError(std::string("ncclGroupEnd: ") + e.what());
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

void start(bool implicit) {
  if (tls.depth++ == 0) tls.implicit = implicit;
}

void defer(Communicator* comm, std::function<void()> job) { tls.creations.push_back({comm, std::move(job)}); }

void enqueueAfter(Communicator* comm, const char* call, std::function<void()> job) {
  comm->refuseIfSuspended(call);
  join(comm, call);
  tls.afterOperations[comm].push_back(std::move(job));
}

void enqueue(Communicator* comm, const plan::Task& task) {
  comm->refuseIfSuspended(task.name);
  if (plugin::ProfilerSession* profiler = comm->profiler(); profiler != nullptr) {
    return addProfiled(comm, *profiler, task);
  }
  add(comm, task);
}

void forget(Communicator* comm) {
  tls.afterOperations.erase(comm);
  auto& jobs = tls.creations;
  for (auto it = jobs.begin(); it != jobs.end();) it = it->comm == comm ? jobs.erase(it) : it + 1;
  auto& ops = tls.operations;
  for (auto it = ops.begin(); it != ops.end();) {
    if (it->first != comm) {
      ++it;
      continue;
    }
    handles::leave(comm);  // (held since its first operation joined the group)
    it = ops.erase(it);
  }
  auto& events = tls.groupApi;
  for (auto it = events.begin(); it != events.end();) {
    if (it->first != comm) {
      ++it;
      continue;
    }
    PendingApiEvents::stopApiEvent(comm, it->second);
    it = events.erase(it);
  }
}

namespace {

/// Leaves the outermost group level: hands back what it collected. False while still nested.
bool leave(const char* call, std::vector<Deferred>* creations,
           std::vector<std::pair<Communicator*, std::vector<plan::Task>>>* operations, ApiEvents* apiEvents,
           AfterOperations* after) {
  if (tls.depth == 0) fail(ncclInvalidUsage, "%s was called without a matching ncclGroupStart", call);
  if (--tls.depth > 0) return false;
  creations->swap(tls.creations);
  operations->swap(tls.operations);
  apiEvents->swap(tls.groupApi);
  after->swap(tls.afterOperations);
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
  ApiEvents apiEvents;
  AfterOperations after;
  if (!leave("ncclGroupEnd", &creations, &operations, &apiEvents, &after)) return ncclSuccess;
  HeldComms held(operations);
  PendingApiEvents groupApi(std::move(apiEvents));
  groupApi.recordEnd();
  if (runCreations(creations) == ncclInProgress) return ncclInProgress;
  checkSharedStreams(operations);
  for (auto& [comm, tasks] : operations) {
    if (comm->hasBootstrap()) comm->dataPath().checkOnDevice(tasks);
  }
  std::vector<Deferred> jobs;
  for (auto& [comm, tasks] : operations) {
    Communicator* c = comm;
    void* api = groupApi.take(c);  // (null without a profiler plugin)
    jobs.push_back({c, [c, tasks = std::move(tasks), api, oneSided = std::move(after[c])] {
                      CallGuard inUse(*c);
                      struct StopApi {
                        Communicator* c;
                        void* api;
                        ~StopApi() { PendingApiEvents::stopApiEvent(c, api); }
                      } stopApi{c, api};
                      if (!tasks.empty()) c->dataPath().execute(tasks, api);
                      for (const auto& job : oneSided) job();
                    }});
  }
  return runTogether(jobs);
}

ncclResult_t simulateEnd(float* estimatedUs) {
  std::vector<Deferred> creations;
  std::vector<std::pair<Communicator*, std::vector<plan::Task>>> operations;
  ApiEvents apiEvents;
  AfterOperations after;  // (one-sided calls: not run, and not predicted)
  if (!leave("ncclGroupSimulateEnd", &creations, &operations, &apiEvents, &after)) return ncclSuccess;
  HeldComms held(operations);
  PendingApiEvents groupApi(std::move(apiEvents));  // (nothing runs: the events end with the call)
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
