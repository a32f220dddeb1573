// Dispatch from (reduction, element type) to the host instantiation of the kernels, written
// by kernels/generate.py into the build folder.
#pragma once

#include <cstdint>

#include "kernels/collectives.h"
#include "runtime/host/host_group.h"

namespace braid::runtime::host {

using HostCollectiveFn = kernels::CollectiveFn<HostGroup>;

constexpr int kNumRedKinds = static_cast<int>(kernels::RedKind::kCount);
constexpr int kNumElemTypes = 12;

/// [RedKind][ncclDataType_t]; nullptr where -Donly_funcs left the combination out.
extern const HostCollectiveFn kReductionTable[kNumRedKinds][kNumElemTypes];
/// The byte-copy instantiation used by Broadcast and AllGather (any element type).
extern const HostCollectiveFn kCopyFunction;
/// The -Donly_funcs filter this build was made with ("" for all).
extern const char* const kOnlyFuncs;

}  // namespace braid::runtime::host
