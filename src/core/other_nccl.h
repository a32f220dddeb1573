// Another NCCL in the same process. A program linked against NVIDIA's libnccl.so.2 that also
// loads Braid's (or the reverse, through a dependency) runs whichever library each call binds
// to; both report a 2.x version code, so nothing else tells the user which one ran.
#pragma once

#include <string>
#include <vector>

namespace braid::core {

/// The files of the loaded shared objects, other than the one holding this code, that define
/// ncclGetVersion themselves (not through a dependency).
std::vector<std::string> otherNcclLibraries();

/// The WARN text for such a file.
std::string otherNcclWarning(const std::string& file);

/// Logs otherNcclWarning for each of otherNcclLibraries() (core::initOnce calls it once).
void warnAboutOtherNccl();

}  // namespace braid::core
