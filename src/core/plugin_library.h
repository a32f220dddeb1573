// Finding and opening NCCL plugin libraries, as NCCL 2.28.9 does for every plugin kind.
//
// A plugin variable (NCCL_TUNER_PLUGIN, NCCL_ENV_PLUGIN, ...) is
//   unset or empty   the default library, libnccl-<kind>.so
//   "none"           no plugin (any case)
//   a path (a '/')   that file
//   a name X         libnccl-<kind>-X.so, then X itself (the dynamic linker's search path)
// Libraries are opened with dlopen(RTLD_NOW | RTLD_LOCAL) at run time, so libnccl.so's NEEDED
// list does not change. Nothing here logs: opening may happen before the logger is configured
// (the env plugin is loaded by the first read of a variable), so callers get the lines to log.
#pragma once

#include <string>
#include <vector>

namespace braid::plugin {

/// An open plugin library; closed (dlclose) when destroyed.
class Library {
 public:
  Library() = default;
  Library(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  Library(Library&& other) noexcept;
  Library& operator=(Library&& other) noexcept;
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  ~Library();

  explicit operator bool() const { return handle_ != nullptr; }
  /// The address of exported `name`, or nullptr.
  void* symbol(const char* name) const;
  /// The file that was opened (its full path when the dynamic linker knows it).
  const std::string& path() const { return path_; }
  /// Leaves the library open for the rest of the process (its code may still run: atexit
  /// handlers, threads it started).
  void keepOpen() { handle_ = nullptr; }

 private:
  void* handle_ = nullptr;
  std::string path_;
};

/// A line for the caller to log.
struct Note {
  bool warn;  ///< WARN; else INFO
  std::string text;
};

/// Whether a plugin variable's value turns the plugin off ("none", any case).
bool disabled(const std::string& value);

/// The names tried for a variable's value, in order (see the top of this file). `kind` is
/// "net", "tuner", "env", ...
std::vector<std::string> candidates(const std::string& kind, const std::string& value);

/// Opens the first candidate that loads. A candidate that does not exist is listed in one INFO
/// note ("Could not find: ..."); one that exists but does not load (not a library, missing
/// dependencies) is a WARN note with the linker's reason. `label` prefixes the notes ("TUNER").
Library open(const std::string& kind, const std::string& value, const char* label, std::vector<Note>* notes);

/// The first of `symbols` the library exports; *index is its position (-1 when none).
void* firstSymbol(const Library& library, const std::vector<std::string>& symbols, int* index);

/// "a, b, c": the symbols tried, for messages.
std::string joinNames(const std::vector<std::string>& names);

}  // namespace braid::plugin
