// Files Braid opens by a name a user gave (NCCL_DEBUG_FILE, NCCL_TOPO_DUMP_FILE,
// NCCL_GRAPH_DUMP_FILE, the config files): never through a symbolic link where it writes, never
// blocking or reading without bound where it reads, and never inherited by an exec'd program.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>

namespace braid::files {

/// Opens `path` to write it from the start, as NCCL's output files are (created with mode 0644,
/// truncated), except that a symbolic link as its last component is refused (ELOOP) rather than
/// followed, and that the descriptor is closed on exec: a stdio stream, or null with errno set.
FILE* openOutput(const std::string& path);

/// What readRegular found.
enum class ReadResult { kRead, kAbsent, kRefused };
/// Reads all of `path` into *text when it is a regular file of at most `maxBytes`: kAbsent when
/// there is no such file (or it cannot be opened: *why says so), kRefused with the reason in
/// *why for a FIFO, a device, a directory or a larger file. Opening never blocks (O_NONBLOCK),
/// and at most maxBytes + 1 bytes are read.
ReadResult readRegular(const std::string& path, size_t maxBytes, std::string* text, std::string* why);

}  // namespace braid::files
