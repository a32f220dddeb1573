#include "proxy/proxy.h"

#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "core/log.h"
#include "kernels/platform.h"
#include "proxy/control_events.h"

namespace braid::proxy {

namespace {

struct State {
  std::mutex lifecycle;  // attach/detach of the first/last pump: start and join the thread
  std::mutex pumps;      // held by the thread for one pass over the pumps
  std::vector<Pump*> list;
  std::vector<Pump*> broken;  // progress threw: skipped until detached (guarded by pumps)
  uint64_t generation = 0;  // changes whenever list does (guarded by pumps)
  std::vector<int> cpus;    // preferCpus' hint (guarded by pumps)
  std::string cpusWhy;
  bool cpusApplied = true;
  std::thread* thread = nullptr;
  std::atomic<bool> stop{false};
  int doorbell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);  // kick() rings it
};

State& state() {
  static State* s = [] {
    auto* created = new State;  // never destroyed: pumps may detach during static destruction
    // A forked child has no proxy thread and no use for its parent's connections.
    pthread_atfork(nullptr, nullptr, [] {
      State& st = state();
      new (&st.lifecycle) std::mutex;
      new (&st.pumps) std::mutex;
      for (Pump* p : st.list) p->orphan();  // the parent's connections: hands off
      st.list.clear();
      st.broken.clear();
      ++st.generation;
      st.thread = nullptr;  // the parent's std::thread object is left behind on purpose
      st.stop.store(false);
      close(st.doorbell);  // the parent's: a kick here must not wake the parent's proxy
      st.doorbell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    });
    return created;
  }();
  return *s;
}

/// Binds the calling (proxy) thread to those of `cpus` the process may use.
void bindTo(const std::vector<int>& cpus, const std::string& why) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  cpu_set_t chosen;
  CPU_ZERO(&chosen);
  std::string list;
  for (int c : cpus) {
    if (c < CPU_SETSIZE && CPU_ISSET(c, &allowed)) {
      CPU_SET(c, &chosen);
      list += (list.empty() ? "" : ",") + std::to_string(c);
    }
  }
  if (list.empty()) {
    BRAID_INFO(log::kProxy, "proxy thread: none of the CPUs near %s is allowed to this process; not bound", why.c_str());
    return;
  }
  if (pthread_setaffinity_np(pthread_self(), sizeof chosen, &chosen) == 0) {
    BRAID_INFO(log::kProxy, "proxy thread bound to CPUs %s (near %s)", list.c_str(), why.c_str());
  }
}

/// How long an idle pass may wait in ppoll: short at first (a kernel may publish a step any
/// moment), longer the longer nothing happens.
long idleWaitNs(uint32_t idlePasses) {
  if (idlePasses < 2000) return 20000;
  if (idlePasses < 20000) return 200000;
  return 1000000;
}

bool isBroken(const State& s, Pump* p) {
  return std::find(s.broken.begin(), s.broken.end(), p) != s.broken.end();
}

/// One pump's progress; what it throws (it should not) breaks that connection, not the process.
bool progressOne(State& s, Pump* p, const pollfd* polled) {
  std::string why;
  try {
    return p->progress(polled);
  } catch (const std::exception& e) {
    why = e.what();
  } catch (...) {
    why = "an unknown exception";
  }
  BRAID_WARN("proxy: a network connection failed inside the progress thread: %s", why.c_str());
  s.broken.push_back(p);
  try {
    p->broke("failed in the proxy thread: " + why);
  } catch (...) {
  }
  return true;
}

void loop() {
  State& s = state();
  pthread_setname_np(pthread_self(), "braid-proxy");
  prctl(PR_SET_TIMERSLACK, 1000UL);  // this thread's waits end within a microsecond of their time
  constexpr uint32_t kBusyPasses = 4096;  // passes without waiting after the last movement (~10 ms)
  uint32_t idle = 0;
  std::vector<pollfd> fds;
  std::vector<size_t> first;  // per pump: its first entry in fds
  bool timed = true;          // a pump needs passes while its descriptors are quiet
  ControlReporter control;    // ProxyCtrl events, for the communicators that want them
  while (!s.stop.load(std::memory_order_acquire)) {
    uint64_t generation;
    {
      std::lock_guard<std::mutex> lock(s.pumps);
      if (!s.cpusApplied) {
        s.cpusApplied = true;
        bindTo(s.cpus, s.cpusWhy);
      }
      generation = s.generation;
      fds.clear();
      first.clear();
      fds.push_back({s.doorbell, POLLIN, 0});
      timed = false;
      for (Pump* p : s.list) {
        first.push_back(fds.size());
        if (isBroken(s, p)) continue;
        p->pollSet(&fds);
        timed |= p->needsPolling();
      }
    }
    // Not under the lock: attach and detach get it between passes (detach kicks the doorbell).
    const timespec wait = {0, idle < kBusyPasses ? 0 : idleWaitNs(idle)};
    const bool forever = idle >= kBusyPasses && !timed;  // (a descriptor or the doorbell wakes it)
    const int ready = ppoll(fds.data(), fds.size(), forever ? nullptr : &wait, nullptr);
    if (ready > 0 && (fds[0].revents & POLLIN)) {
      uint64_t rings = 0;
      if (read(s.doorbell, &rings, sizeof rings) > 0) {
        idle = 0;
        control.doorbell();
      }
    }
    bool moved = false;
    {
      std::lock_guard<std::mutex> lock(s.pumps);
      if (s.generation != generation) {
        moved = true;  // pumps came or went: the poll set is stale, build it again
      } else {
        for (size_t i = 0; i < s.list.size(); ++i) {
          if (!isBroken(s, s.list[i])) moved |= progressOne(s, s.list[i], fds.data() + first[i]);
        }
      }
    }
    idle = moved ? 0 : std::min<uint32_t>(idle + 1, 1u << 30);
    control.afterPass(moved, idle >= kBusyPasses);
    // Nothing moved: give the core to a rank thread that may be about to publish (or to
    // consume what just arrived) rather than spin through the rest of a time slice.
    if (!moved && idle < kBusyPasses) sched_yield();
  }
}

}  // namespace

void attach(Pump* pump) {
  State& s = state();
  std::lock_guard<std::mutex> life(s.lifecycle);
  {
    std::lock_guard<std::mutex> lock(s.pumps);
    s.list.push_back(pump);
    ++s.generation;
  }
  if (s.thread == nullptr) {
    s.stop.store(false);
    {
      std::lock_guard<std::mutex> lock(s.pumps);
      s.cpusApplied = s.cpus.empty();  // a new thread binds itself again
    }
    try {
      s.thread = new std::thread(loop);
    } catch (...) {  // no thread: the pump must not stay listed (its owner will free it)
      std::lock_guard<std::mutex> lock(s.pumps);
      s.list.pop_back();
      ++s.generation;
      throw;
    }
    BRAID_INFO(log::kProxy | log::kNet, "proxy progress thread started");
  }
  kick();
}

void detach(Pump* pump) {
  State& s = state();
  std::lock_guard<std::mutex> life(s.lifecycle);
  bool last = false;
  {
    std::lock_guard<std::mutex> lock(s.pumps);  // waits for the pass in progress
    s.list.erase(std::remove(s.list.begin(), s.list.end(), pump), s.list.end());
    s.broken.erase(std::remove(s.broken.begin(), s.broken.end(), pump), s.broken.end());
    ++s.generation;
    last = s.list.empty();
  }
  if (last && s.thread != nullptr) {
    s.stop.store(true, std::memory_order_release);
    kick();  // out of a long ppoll at once
    s.thread->join();
    delete s.thread;
    s.thread = nullptr;
    BRAID_INFO(log::kProxy | log::kNet, "proxy progress thread stopped");
  }
}

void preferCpus(const std::vector<int>& cpus, const std::string& why) {
  if (cpus.empty()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.pumps);
  if (!s.cpus.empty()) return;  // the first hint wins
  s.cpus = cpus;
  s.cpusWhy = why;
  s.cpusApplied = false;
}

void kick() {
  const uint64_t one = 1;
  if (write(state().doorbell, &one, sizeof one) < 0) {
  }  // full (it never is in practice) or closed: the proxy wakes on its timeout anyway
}

void waitForPass() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.pumps);  // (the thread holds it for one pass)
}

std::unique_lock<std::mutex> hold() { return std::unique_lock<std::mutex>(state().pumps); }

int attachedCount() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.pumps);
  return static_cast<int>(s.list.size());
}

}  // namespace braid::proxy
