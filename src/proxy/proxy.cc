#include "proxy/proxy.h"

#include <pthread.h>
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "core/log.h"
#include "kernels/platform.h"

namespace braid::proxy {

namespace {

struct State {
  std::mutex lifecycle;  // attach/detach of the first/last pump: start and join the thread
  std::mutex pumps;      // held by the thread for one pass over the pumps
  std::vector<Pump*> list;
  std::thread* thread = nullptr;
  std::atomic<bool> stop{false};
};

State& state() {
  static State* s = [] {
    auto* created = new State;  // never destroyed: pumps may detach during static destruction
    // A forked child has no proxy thread and no use for its parent's connections.
    pthread_atfork(nullptr, nullptr, [] {
      State& st = state();
      new (&st.lifecycle) std::mutex;
      new (&st.pumps) std::mutex;
      st.list.clear();
      st.thread = nullptr;  // the parent's std::thread object is left behind on purpose
      st.stop.store(false);
    });
    return created;
  }();
  return *s;
}

/// How long an idle pass may wait in ppoll: short at first (a kernel may publish a step any
/// moment), longer the longer nothing happens.
long idleWaitNs(uint32_t idlePasses) {
  if (idlePasses < 2000) return 20000;
  if (idlePasses < 20000) return 200000;
  return 1000000;
}

void loop() {
  State& s = state();
  pthread_setname_np(pthread_self(), "braid-proxy");
  prctl(PR_SET_TIMERSLACK, 1000UL);  // this thread's waits end within a microsecond of their time
  uint32_t idle = 0;
  std::vector<pollfd> fds;
  while (!s.stop.load(std::memory_order_acquire)) {
    bool moved = false;
    fds.clear();
    {
      std::lock_guard<std::mutex> lock(s.pumps);
      for (Pump* p : s.list) moved |= p->progress();
      if (!moved) {
        for (Pump* p : s.list) p->pollSet(&fds);
      }
    }
    if (moved) {
      idle = 0;
      continue;
    }
    idle = std::min<uint32_t>(idle + 1, 1u << 30);
    if (idle < 16) {
      kernels::backOff(0);  // a few quick passes first: the next step is often right behind
      continue;
    }
    const long ns = idleWaitNs(idle);
    const timespec wait = {0, ns};
    ppoll(fds.data(), fds.size(), &wait, nullptr);  // woken early by data; errors: just pass again
  }
}

}  // namespace

void attach(Pump* pump) {
  State& s = state();
  std::lock_guard<std::mutex> life(s.lifecycle);
  {
    std::lock_guard<std::mutex> lock(s.pumps);
    s.list.push_back(pump);
  }
  if (s.thread == nullptr) {
    s.stop.store(false);
    s.thread = new std::thread(loop);
    BRAID_INFO(log::kProxy | log::kNet, "proxy progress thread started");
  }
}

void detach(Pump* pump) {
  State& s = state();
  std::lock_guard<std::mutex> life(s.lifecycle);
  bool last = false;
  {
    std::lock_guard<std::mutex> lock(s.pumps);  // waits for the pass in progress
    s.list.erase(std::remove(s.list.begin(), s.list.end(), pump), s.list.end());
    last = s.list.empty();
  }
  if (last && s.thread != nullptr) {
    s.stop.store(true, std::memory_order_release);
    s.thread->join();
    delete s.thread;
    s.thread = nullptr;
    BRAID_INFO(log::kProxy | log::kNet, "proxy progress thread stopped");
  }
}

int attachedCount() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.pumps);
  return static_cast<int>(s.list.size());
}

}  // namespace braid::proxy
