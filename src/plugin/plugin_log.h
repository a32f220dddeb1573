// The logger every plugin receives (ncclDebugLogger_t of nccl_common.h): NCCL's levels and
// subsystem bits are Braid's, so a plugin's lines obey NCCL_DEBUG and NCCL_DEBUG_SUBSYS and
// carry NCCL's prefix.
#pragma once

#include <nccl_common.h>

namespace braid::plugin {

/// Writes a plugin's line when its level and subsystems are enabled.
void pluginLog(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* format, ...)
    __attribute__((format(printf, 5, 6)));

}  // namespace braid::plugin
