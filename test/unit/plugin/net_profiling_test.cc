// The profiler callback Braid gives net plugins (plugin/net_profiling.h): which phandles and
// event handles it accepts. A fake owner stands for a network end's trace.
#include <catch2/catch.hpp>
#include <nccl_common.h>

#include <array>

#include "plugin/net_profiling.h"

using namespace braid;

namespace {

/// Records what the callback asked of it; starts no event.
struct FakeOwner final : plugin::NetEventParents {
  int calls = 0;
  int slot = -1;
  int64_t id = 0;
  void* data = nullptr;
  void* startNetEvent(int s, int64_t i, void* d, plugin::ProfilerSession** session) override {
    (void)session;
    ++calls;
    slot = s, id = i, data = d;
    return nullptr;
  }
};

}  // namespace

TEST_CASE("the net plugins' profiler callback takes only the phandles Braid registered", "[plugin]") {
  std::array<char, 16> memory{};
  char* const slots = memory.data() + 4;  // 8 slots, with bytes on either side that are not
  const int count = 8;
  FakeOwner owner;
  int data = 0;
  void* event = &data;  // (a start clears it)

  // Nothing registered (no profiler traces an end): every start is a quiet no event.
  CHECK(plugin::netProfilerCallback(&event, ncclProfilerNetEventStart, slots, 7, &data) == ncclSuccess);
  CHECK(event == nullptr);
  CHECK(owner.calls == 0);

  plugin::registerNetParents(&owner, slots, count);
  for (int s = 0; s < count; ++s) {
    event = &data;
    CHECK(plugin::netProfilerCallback(&event, ncclProfilerNetEventStart, slots + s, 100 + s, &data) ==
          ncclSuccess);
    CHECK(owner.slot == s);
    CHECK(owner.id == 100 + s);
    CHECK(owner.data == &data);
    CHECK(event == nullptr);  // (the owner started none)
  }
  CHECK(owner.calls == 8);
  // Just outside the range, an address of the plugin's own, and NULL: the owner is not asked.
  CHECK(plugin::netProfilerCallback(&event, ncclProfilerNetEventStart, slots + 8, 1, nullptr) ==
        ncclInvalidArgument);
  CHECK(plugin::netProfilerCallback(&event, ncclProfilerNetEventStart, slots - 1, 1, nullptr) ==
        ncclInvalidArgument);
  CHECK(plugin::netProfilerCallback(&event, ncclProfilerNetEventStart, &data, 1, nullptr) == ncclInvalidArgument);
  CHECK(plugin::netProfilerCallback(&event, ncclProfilerNetEventStart, nullptr, 1, nullptr) == ncclSuccess);
  CHECK(owner.calls == 8);
  // An event handle the callback never gave: refused; none (its start gave none): nothing to do.
  void* madeUp = &data;
  CHECK(plugin::netProfilerCallback(&madeUp, ncclProfilerNetEventStop, nullptr, 0, nullptr) == ncclInvalidArgument);
  CHECK(plugin::netProfilerCallback(&madeUp, ncclProfilerNetEventUpdate, nullptr, 0, &data) == ncclInvalidArgument);
  CHECK(plugin::netProfilerCallback(&madeUp, ncclProfilerNetEventUpdateAndStop, nullptr, 0, &data) ==
        ncclInvalidArgument);
  void* none = nullptr;
  CHECK(plugin::netProfilerCallback(&none, ncclProfilerNetEventStop, nullptr, 0, nullptr) == ncclSuccess);
  // No place for the handle, or a type NCCL does not define.
  CHECK(plugin::netProfilerCallback(nullptr, ncclProfilerNetEventStart, slots, 1, nullptr) ==
        ncclInvalidArgument);
  CHECK(plugin::netProfilerCallback(&none, 9, slots, 1, nullptr) == ncclInvalidArgument);
  CHECK(owner.calls == 8);

  plugin::forgetNetParents(&owner);
  event = &data;
  CHECK(plugin::netProfilerCallback(&event, ncclProfilerNetEventStart, slots, 1, nullptr) == ncclSuccess);
  CHECK(event == nullptr);
  CHECK(owner.calls == 8);
}
