// Communicators made from existing ones: ncclCommSplit and ncclCommShrink.
#pragma once

#include <vector>

#include "comm/init.h"

namespace braid::comm {

/// Split's work for one parent rank: exchange colours and keys over the parent's channel,
/// order each colour's members by (key, parent rank), let the first member start a root and
/// hand its id to the others, then init `child`. child is NULL for NCCL_SPLIT_NOCOLOR (the
/// rank still takes part in the exchange).
void splitRank(Communicator& parent, int color, int key, uint32_t sequence, Communicator* child,
               const InitSettings& settings);

/// Shrink's work for one surviving rank: the survivors, in parent-rank order, form `child`.
/// Excluded ranks take no part (they may be dead), so no collective on the parent is used.
void shrinkRank(Communicator& parent, const std::vector<int>& excluded, uint32_t sequence, Communicator& child,
                const InitSettings& settings);

/// The members of a split colour in their new order, from every rank's (colour, key).
std::vector<int> splitMembers(const std::vector<int>& colors, const std::vector<int>& keys, int color);

}  // namespace braid::comm
