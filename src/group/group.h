// Group semantics (ncclGroupStart/End) for communicator creation.
//
// Between ncclGroupStart and ncclGroupEnd, init, split and shrink calls hand out their
// communicator at once and defer the work; ncclGroupEnd runs every deferred job
// concurrently, so one thread can create several communicators that must rendezvous with
// each other (a ncclCommInitAll set) without waiting on itself. Collectives join the group
// with the data path.
#pragma once

#include <nccl.h>

#include <functional>

namespace braid {
class Communicator;
}

namespace braid::group {

/// True between ncclGroupStart and the matching ncclGroupEnd on this thread.
bool active();
void start();
/// Runs the deferred jobs. Blocking communicators: waits and returns the first failure
/// (throwing it). If any communicator is nonblocking, returns ncclInProgress at once.
ncclResult_t end();
/// Defers `job` for `comm` to the end of the current group.
void defer(Communicator* comm, std::function<void()> job);
/// Forgets jobs of comm that have not started (it is being aborted or destroyed).
void forget(Communicator* comm);

}  // namespace braid::group
