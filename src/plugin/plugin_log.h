// The logger every plugin receives (ncclDebugLogger_t of nccl_common.h): NCCL's levels and
// subsystem bits are Braid's, so a plugin's lines obey NCCL_DEBUG and NCCL_DEBUG_SUBSYS and
// carry NCCL's prefix. Also what the plugin kinds share when they open their library.
#pragma once

#include <nccl_common.h>

#include <string>
#include <vector>

#include "core/plugin_library.h"

namespace braid::plugin {

/// Writes a plugin's line when its level and subsystems are enabled.
void pluginLog(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* format, ...)
    __attribute__((format(printf, 5, 6)));

/// Logs the loader's notes: WARN, or INFO under `subsys`.
void sayNotes(const std::vector<Note>& notes, unsigned long subsys);

/// A tuner's or profiler's library and its newest usable symbol: the one NCCL_<KIND>_PLUGIN
/// names (`value`), else, as NCCL does, the net plugin's library (NCCL_NET_PLUGIN's entries,
/// `netValue`, or libnccl-net.so). `symbol` is null when there is none to use; the reason is
/// logged (a net plugin's library without this kind is normal: INFO; anything else WARN).
struct Opened {
  Library library;
  const void* symbol = nullptr;
  int index = -1;  ///< position of `symbol` in the list asked for
};
Opened openBesideNet(const char* kind, const char* label, const std::string& value, const std::string& netValue,
                     const std::vector<std::string>& symbols, unsigned long subsys);

}  // namespace braid::plugin
