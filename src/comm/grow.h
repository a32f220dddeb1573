// Growing a communicator: ncclCommGetUniqueId and ncclCommGrow.
//
// One existing rank asks its communicator for a grow id: a root started in its process, the
// id recording how many ranks the communicator has. It hands the id to the new ranks (its own
// channel, as for ncclGetUniqueId) and passes it to its own ncclCommGrow; the other existing
// ranks pass NULL. The existing ranks agree over the parent's channel (rank 0 gathers what
// each passed and tells all the verdict and the id), then every rank, old and new, meets at
// that root as a rank of the grown communicator: the existing ones under their old numbers,
// the new ones under the numbers they were given. The parent is not touched beyond that.
#pragma once

#include <nccl.h>

#include "comm/init.h"

namespace braid::comm {

/// ncclCommGetUniqueId: starts the grow root and records the id on `parent` (one unused id
/// at a time).
ncclUniqueId offerGrowId(Communicator& parent, const InitSettings& settings);

/// What an existing rank passed to ncclCommGrow.
struct GrowRequest {
  int nRanks = 0;
  int rankArgument = -1;             ///< must be -1: existing ranks keep their numbers
  const ncclUniqueId* id = nullptr;  ///< the grow id on the rank that asked for it, else NULL
};

/// An existing rank's grow: agree with the other existing ranks on the request (any rank that
/// passed something wrong fails them all, with the same text), then init `child` as this
/// rank of the grown communicator. The id is used up when this ends, whether it succeeded.
void growExistingRank(Communicator& parent, const GrowRequest& request, uint32_t sequence, Communicator& child,
                      const InitSettings& settings);

/// Checks a new rank's arguments against its id before anything is created (throws naming
/// the argument).
void checkNewRankOfGrow(const ncclUniqueId& id, int nRanks, int rank);

/// A new rank's grow: init `child` (already at its rank and size) at the id's root.
void growNewRank(Communicator& child, const ncclUniqueId& id, const InitSettings& settings);

}  // namespace braid::comm
