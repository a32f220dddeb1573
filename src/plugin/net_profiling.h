// NetPlugin events: the profiler callback Braid hands a net plugin at init (v10, v11), and the
// phandle it passes with each isend and irecv (v10, v11), through which the net plugin starts,
// updates and stops events of its own in the communicator's profiler plugin, each a child of
// the ProxyStep of the transfer it belongs to (as NCCL 2.28 does).
//
// A phandle is the address of one step slot of a network end's trace (proxy/op_trace.h, the
// owner): the NetPlugin event a plugin starts with it gets the ProxyStep open in that slot at
// that moment as its parent, and none starts when no step is open there (the profiler's mask
// leaves NetPlugin out, or the transfer's step has ended). A call gets a NULL phandle while
// its end is not traced, and when it names no step yet (the plugin transport's receive of a
// step's record: the step begins when the record arrives). Nothing a plugin hands back is
// used before it is checked: a phandle must lie in a registered owner's slots, and an event
// handle must be one this callback gave out and that is still open; what is not is refused
// with ncclInvalidArgument (start: no event). Only while no owner is registered and no event
// is open is a start answered ncclSuccess (and no event) without looking at its phandle.
//
// With no owner registered and no event open (no profiler plugin, or one that wants none of
// these events) the callback's cost is one relaxed load; Braid's own per-step path does not
// change (a phandle is given only while the end is traced, decided by the test the trace's
// calls already make).
#pragma once

#include <cstdint>

#include "nccl.h"

namespace braid::plugin {

class ProfilerSession;

/// The owner of phandles: `count` consecutive bytes, one per step slot.
class NetEventParents {
 public:
  /// Under the owner's own lock: starts a NetPlugin event (the net plugin's `id` and `data`)
  /// under the ProxyStep open in `slot`, when one is and its session wants NetPlugin events.
  /// Returns the event's handle and sets *session, or returns nullptr.
  virtual void* startNetEvent(int slot, int64_t id, void* data, ProfilerSession** session) = 0;

 protected:
  ~NetEventParents() = default;
};

/// Makes phandles [first, first + count) known to the callback, as slots 0..count-1 of
/// `owner`, until forgetNetParents(owner) (which waits for a callback using them to return).
void registerNetParents(NetEventParents* owner, const char* first, int count);
void forgetNetParents(NetEventParents* owner);

/// A profiler session ends: the NetPlugin events of it still open are forgotten (a later stop
/// of one is refused).
void forgetNetEvents(ProfilerSession* session);

/// The ncclProfilerCallback_t Braid passes to net plugins. type: ncclProfilerNetEventStart
/// (pHandle: the phandle of the call; *eHandle: the new event, or NULL), Stop, Update
/// (extData: the data NetPluginUpdate carries) or UpdateAndStop (*eHandle: the event).
ncclResult_t netProfilerCallback(void** eHandle, int type, void* pHandle, int64_t pluginId, void* extData);

}  // namespace braid::plugin
