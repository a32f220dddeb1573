// The bootstrap root: the rendezvous point named by a unique id.
//
// It waits for every rank's Registration, checks that they agree (same nranks, each rank
// once, same ABI), then sends each rank the table of all ranks' listening addresses and
// exits. On disagreement it answers every rank it has heard from, and every later one,
// with the reason. When ranks are missing at the deadline it tells the waiting ranks which.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "core/socket.h"

namespace braid::bootstrap {

/// Starts a root thread on an already-listening socket. The thread ends on its own once it
/// has served (or failed) one communicator, or at the deadline; a registry joins finished
/// roots and stops the rest at exit. Returns the root's ticket, for stopRoot.
uint64_t startRoot(net::Socket listening, uint64_t secret, std::chrono::seconds timeout);
/// Stops the root of `ticket` if it still runs (its communicator's init failed, so it would
/// wait for ranks until its deadline) and joins its thread.
void stopRoot(uint64_t ticket);

/// Number of root threads currently alive in this process (for leak tests).
int liveRoots();

/// "rank 3", "ranks 3 and 5", "ranks 1, 2 and 5", shortened for long lists; `total` (when
/// more than ranks.size()) says how many there are of which `ranks` are the first.
std::string describeRanks(const std::vector<int>& ranks, size_t total = 0);

}  // namespace braid::bootstrap
