#include "plugin/net_profiling.h"

#include <nccl_common.h>

#include <atomic>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <unordered_map>

#include "plugin/profiler_plugin.h"

namespace braid::plugin {

namespace {

struct Owner {
  NetEventParents* owner;
  int count;
};

/// The registered phandle ranges and the NetPlugin events open now.
struct Registry {
  // Held while a callback uses an owner or an event, so neither goes away in the middle.
  std::mutex mutex;
  std::map<const char*, Owner, std::less<>> owners;      // by the range's first byte
  std::unordered_map<void*, ProfilerSession*> open;  // event handle -> its session
  std::atomic<size_t> live{0};                       // owners.size() + open.size()
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: net plugins' threads may outlive main
  return *r;
}

void recount(Registry& r) { r.live.store(r.owners.size() + r.open.size(), std::memory_order_relaxed); }

/// The owner and slot of `phandle`, or false when it lies in no registered range.
bool find(Registry& r, const void* phandle, Owner* owner, int* slot) {
  const char* p = static_cast<const char*>(phandle);
  auto it = r.owners.upper_bound(p);
  if (it == r.owners.begin()) return false;
  --it;
  // (compared as integers: the pointer may point anywhere)
  const auto offset = reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(it->first);
  if (offset >= static_cast<uintptr_t>(it->second.count)) return false;
  *owner = it->second;
  *slot = static_cast<int>(offset);
  return true;
}

}  // namespace

void registerNetParents(NetEventParents* owner, const char* first, int count) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.owners[first] = Owner{owner, count};
  recount(r);
}

void forgetNetParents(NetEventParents* owner) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto it = r.owners.begin(); it != r.owners.end();) {
    it = it->second.owner == owner ? r.owners.erase(it) : std::next(it);
  }
  recount(r);
}

void forgetNetEvents(ProfilerSession* session) {
  Registry& r = registry();
  if (r.live.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto it = r.open.begin(); it != r.open.end();) {
    it = it->second == session ? r.open.erase(it) : std::next(it);
  }
  recount(r);
}

ncclResult_t netProfilerCallback(void** eHandle, int type, void* pHandle, int64_t pluginId, void* extData) {
  if (eHandle == nullptr) return ncclInvalidArgument;
  Registry& r = registry();
  if (type == ncclProfilerNetEventStart) *eHandle = nullptr;
  if (r.live.load(std::memory_order_relaxed) == 0) {  // nobody profiles: a stop or update has no event either
    return type == ncclProfilerNetEventStart || *eHandle == nullptr ? ncclSuccess : ncclInvalidArgument;
  }
  std::lock_guard<std::mutex> lock(r.mutex);
  if (type == ncclProfilerNetEventStart) {
    Owner owner{};
    int slot = 0;
    if (!find(r, pHandle, &owner, &slot)) return pHandle == nullptr ? ncclSuccess : ncclInvalidArgument;
    ProfilerSession* session = nullptr;
    void* event = owner.owner->startNetEvent(slot, pluginId, extData, &session);
    if (event != nullptr) {
      r.open[event] = session;
      recount(r);
      *eHandle = event;
    }
    return ncclSuccess;
  }
  if (type != ncclProfilerNetEventStop && type != ncclProfilerNetEventUpdate &&
      type != ncclProfilerNetEventUpdateAndStop) {
    return ncclInvalidArgument;
  }
  void* event = *eHandle;
  if (event == nullptr) return ncclSuccess;  // (its start gave none)
  const auto it = r.open.find(event);
  if (it == r.open.end()) return ncclInvalidArgument;  // not ours, or stopped already
  if (type != ncclProfilerNetEventStop) it->second->record(event, profile::kNetPluginUpdate, 0, extData);
  if (type != ncclProfilerNetEventUpdate) {
    it->second->stop(event);
    r.open.erase(it);
    recount(r);
  }
  return ncclSuccess;
}

}  // namespace braid::plugin
