#include "proxy/control_events.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "plugin/profiler_plugin.h"
#include "proxy/proxy.h"

namespace braid::proxy {

namespace profile = plugin::profile;

namespace {

struct Watcher {
  plugin::ProfilerSession* session;
  void* sleep = nullptr;  // its open Sleep event (nullptr: none)
};

/// The communicators watching, and the operations posted since the proxy last looked.
struct Watchers {
  std::mutex mutex;  // held while events are sent, so a watcher never goes in the middle of one
  std::vector<Watcher> list;
  std::atomic<int> count{0};        // list.size(), read without the lock
  std::atomic<uint64_t> posted{0};  // operations since the last Append (counted while watched)
};

Watchers& watchers() {
  static Watchers* w = new Watchers();  // never destroyed: communicators may end during exit
  return *w;
}

/// One whole event (start, its states, stop) for every watcher that wants ProxyCtrl now.
void emit(Watchers& w, int state, int secondState = -1, uint64_t appended = 0) {
  for (Watcher& watcher : w.list) {
    if (!watcher.session->wants(profile::kProxyCtrl)) continue;
    plugin::ProfileEvent e;
    e.type = profile::kProxyCtrl;
    void* handle = watcher.session->start(e);
    watcher.session->record(handle, state);
    if (secondState >= 0) watcher.session->record(handle, secondState, appended);
    watcher.session->stop(handle);
  }
}

/// Ends each open Sleep (under w.mutex).
void wakeAll(Watchers& w) {
  for (Watcher& watcher : w.list) {
    if (watcher.sleep == nullptr) continue;
    watcher.session->record(watcher.sleep, profile::kProxyCtrlWakeup);
    watcher.session->stop(watcher.sleep);
    watcher.sleep = nullptr;
  }
}

}  // namespace

ControlWatch::ControlWatch(plugin::ProfilerSession* session) : session_(session) {
  if (session_ == nullptr) return;
  Watchers& w = watchers();
  std::lock_guard<std::mutex> lock(w.mutex);
  w.list.push_back(Watcher{session_});
  w.count.store(static_cast<int>(w.list.size()), std::memory_order_relaxed);
}

ControlWatch::~ControlWatch() {
  if (session_ == nullptr) return;
  Watchers& w = watchers();
  std::lock_guard<std::mutex> lock(w.mutex);
  for (auto it = w.list.begin(); it != w.list.end(); ++it) {
    if (it->session != session_) continue;
    if (it->sleep != nullptr) {  // (the proxy still sleeps: the Sleep ends with the watch)
      session_->record(it->sleep, profile::kProxyCtrlWakeup);
      session_->stop(it->sleep);
    }
    w.list.erase(it);
    break;
  }
  w.count.store(static_cast<int>(w.list.size()), std::memory_order_relaxed);
}

void post() {
  Watchers& w = watchers();
  if (w.count.load(std::memory_order_relaxed) != 0) w.posted.fetch_add(1, std::memory_order_relaxed);
  kick();
}

ControlReporter::~ControlReporter() {
  Watchers& w = watchers();
  if (w.count.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> lock(w.mutex);
  wakeAll(w);
}

void ControlReporter::doorbell() {
  Watchers& w = watchers();
  if (w.count.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> lock(w.mutex);
  if (sleeping_) {
    wakeAll(w);
    sleeping_ = false;
  }
  const uint64_t appended = w.posted.exchange(0, std::memory_order_relaxed);
  if (appended > 0) emit(w, profile::kProxyCtrlAppend, profile::kProxyCtrlAppendEnd, appended);
}

void ControlReporter::afterPass(bool moved, bool waiting) {
  Watchers& w = watchers();
  if (w.count.load(std::memory_order_relaxed) == 0) return;
  const bool wakes = sleeping_ && !waiting;
  const bool activates = moved && !active_;
  const bool sleeps = !moved && waiting && !sleeping_;
  if (!wakes && !activates && !sleeps) return;  // (most passes: no lock taken)
  std::lock_guard<std::mutex> lock(w.mutex);
  if (sleeping_ && !waiting) {
    wakeAll(w);
    sleeping_ = false;
  }
  if (moved && !active_) {
    emit(w, profile::kProxyCtrlActive);
    active_ = true;
  } else if (!moved && waiting && !sleeping_) {
    if (active_) emit(w, profile::kProxyCtrlIdle);
    active_ = false;
    for (Watcher& watcher : w.list) {
      if (!watcher.session->wants(profile::kProxyCtrl)) continue;
      plugin::ProfileEvent e;
      e.type = profile::kProxyCtrl;
      watcher.sleep = watcher.session->start(e);
      watcher.session->record(watcher.sleep, profile::kProxyCtrlSleep);
    }
    sleeping_ = true;
  }
}

}  // namespace braid::proxy
