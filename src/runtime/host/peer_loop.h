// A group's sends and receives driven by one CPU thread: the host backend's, and the emulated
// device's in the tests (the GPU's is kernels/cuda_entry.cuh's peer kernel).
#pragma once

#include <deque>

#include "kernels/algorithms/send_recv.h"

namespace braid::runtime::host {

/// Passes over `queues` (a range of std::deque<kernels::PeerOp>, one a connection, each in
/// posted order) moving what every queue's first operation can, each operation starting from
/// the step the one before it left on the connection, until all are done (true) or, stalled,
/// the abort word is raised (false). Reports progress and waits in `status`.
template <typename Queues>
bool drivePeerQueues(Queues& queues, kernels::ChannelStatus& status, const uint32_t* abortFlag) {
  for (auto& q : queues)
    if (!q.empty()) q.front().step = *q.front().conn.step;
  for (uint32_t spins = 0;;) {
    bool all = true, moved = false;
    const kernels::PeerOp* stalled = nullptr;  // the first unfinished operation of the pass
    for (auto& q : queues) {
      while (!q.empty()) {
        kernels::PeerOp& op = q.front();
        for (int i = 0; i < kernels::kSteps && kernels::tryPeerStep(op, &status); ++i) moved = true;
        if (!kernels::peerOpDone(op)) break;
        *op.conn.step = op.step;  // (for the connection's next operation)
        q.pop_front();
        if (!q.empty()) q.front().step = *q.front().conn.step;
        moved = true;
      }
      all = all && q.empty();
      if (stalled == nullptr && !q.empty()) stalled = &q.front();
    }
    if (all) return true;
    spins = moved ? 0 : spins + 1;
    kernels::reportPeerPass(&status, moved, spins, stalled);
    if ((spins & 63) == 63 && kernels::loadRelaxed(const_cast<uint32_t*>(abortFlag)) != 0) {
      // The proxy reads no further step into a buffer this call gives back (send_recv.h,
      // byReference); the caller waits for its pass in progress (proxy::waitForPass), after
      // which the raised flag keeps it off the buffers.
      for (auto& q : queues)
        if (!q.empty() && q.front().byReference && !q.front().isSend && q.front().offered)
          kernels::storeRelease(q.front().conn.offer + kernels::kOfferTag, uint64_t{0});
      return false;
    }
    kernels::backOff(spins);
  }
}

}  // namespace braid::runtime::host
