// Group semantics (ncclGroupStart/End).
//
// Between ncclGroupStart and ncclGroupEnd, creation calls (init, split, shrink) hand out their
// communicator at once and defer their work, and collectives and sends/receives are
// collected per communicator. ncclGroupEnd runs the deferred creations concurrently, then
// every communicator's operations: the calling thread runs one communicator's, each other
// communicator's run on its own job thread, so one thread can drive all ranks of a
// ncclCommInitAll set without waiting on itself. A lone call outside a group is a group of one.
// One-sided calls in a group run after their communicator's operations, in call order.
#pragma once

#include <nccl.h>

#include <functional>

#include "plan/task.h"

namespace braid {
class Communicator;
}

namespace braid::group {

/// True between ncclGroupStart and the matching ncclGroupEnd on this thread.
bool active();
/// implicit: Braid's own group around one call (a lone nonblocking call, Gather, Scatter),
/// not the user's ncclGroupStart (a profiler plugin is told the difference).
void start(bool implicit = false);
/// Runs what the group collected. With blocking communicators it returns when everything is
/// complete (throwing the first failure); if any communicator is nonblocking it returns
/// ncclInProgress at once and the work completes in the background.
ncclResult_t end();
/// Like end(), but the collected operations are planned, not run: their predicted time (µs;
/// the longest communicator's, whose operations run one after another) goes to *estimatedUs.
/// Creations in the group run as in end().
ncclResult_t simulateEnd(float* estimatedUs);
/// Defers a creation job for `comm` to the end of the current group.
void defer(Communicator* comm, std::function<void()> job);
/// Adds a one-sided call of `comm` (ncclPutSignal, ncclSignal, ncclWaitSignal) to the current
/// group: at its end, after comm's collectives and sends/receives, in call order, on the thread
/// that runs comm's operations.
void enqueueAfter(Communicator* comm, const char* call, std::function<void()> job);
/// Adds an operation of `comm` to the current group.
void enqueue(Communicator* comm, const plan::Task& task);
/// Forgets everything collected for comm (it is being aborted or destroyed).
void forget(Communicator* comm);

}  // namespace braid::group
