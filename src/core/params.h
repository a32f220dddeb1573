// The parameter registry: every environment knob Braid reads, declared once.
//
// A value is looked up in this order, the first hit winning: the process
// environment; the user's config file (NCCL_CONF_FILE, or ~/.nccl.conf when
// NCCL_CONF_FILE is unset); the system config file (/etc/nccl.conf); the
// knob's default. Config files hold lines "NAME=value"; '#' starts a comment.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace braid::params {

enum class KnobType { Integer, String };

/// One row of the registry (params_table.cc).
struct KnobSpec {
  const char* name;
  KnobType type;
  const char* defaultValue;  ///< as text; integers are parsed like strtoll(s, nullptr, 0)
  const char* help;          ///< one line
  bool honoured;             ///< false: declared and validated, but nothing in Braid uses it yet
};

/// Every knob Braid declares, sorted by name.
const std::vector<KnobSpec>& knobTable();
/// The spec named name, or nullptr.
const KnobSpec* findKnob(const std::string& name);
/// NCCL variables (2.28.9's and those 2.29/2.30 added) that Braid does not read at all (yet);
/// setting one only earns an INFO line.
const std::vector<const char*>& unhonouredNcclVariables();
/// The variables NCCL 2.29 and 2.30 added, declared or not.
const std::vector<const char*>& ncclVariablesAfter2289();

enum class Origin { Default, Environment, UserFile, SystemFile };

/// A raw setting and where it came from.
struct Setting {
  std::string text;
  Origin origin = Origin::Default;
  std::string file;  ///< the config file, when origin is a file
};

/// Where values come from. Tests inject their own; fromProcess() reads the real ones.
struct Sources {
  std::function<const char*(const char*)> getenv;
  std::string systemFile = "/etc/nccl.conf";
  static Sources fromProcess();
};

/// A problem found while reading settings (a bad line, a bad value), to be logged at WARN.
struct Problem {
  std::string text;
};

/// A snapshot of all sources. Values are resolved lazily and cached: a knob is read once.
class Store {
 public:
  explicit Store(Sources sources);

  /// The raw setting of any variable name (declared or not), without parsing.
  Setting lookup(const std::string& name) const;
  /// The integer value of a declared integer knob. A bad value is reported and the default used.
  int64_t integer(const std::string& name);
  /// The string value of a declared string knob.
  std::string string(const std::string& name);
  /// True the first time `key` is asked about, false after: a knob read for every communicator
  /// (and clamped, say) warns once a store, so once a process for process().
  bool firstWarning(const std::string& key);
  /// Problems found so far (bad config lines, bad values); each reported once by takeProblems().
  std::vector<Problem> takeProblems();

  /// The user config file consulted ("" when none), and the system one.
  const std::string& userFile() const { return userFile_; }
  const std::string& systemFile() const { return sources_.systemFile; }

 private:
  void readFile(const std::string& path, std::map<std::string, std::string>& into);
  const KnobSpec& spec(const std::string& name, KnobType type) const;

  Sources sources_;
  std::string userFile_;
  std::map<std::string, std::string> userValues_;
  std::map<std::string, std::string> systemValues_;
  std::mutex mutex_;
  std::map<std::string, int64_t> integers_;
  std::map<std::string, std::string> strings_;
  std::vector<Problem> problems_;
  std::set<std::string> warned_;
};

/// The largest config file read (a larger one is ignored with a warning), and the longest line
/// (a longer one is skipped with a warning naming the file and line).
constexpr size_t kConfigMaxBytes = size_t{1} << 20;
constexpr size_t kConfigMaxLine = 4096;

/// Parses the text of a config file: "NAME=value" lines, '#' comments, the first definition of
/// a name winning; each bad or overlong line is skipped and named (`path`:line) in *problems.
/// Pure (test/fuzz/env_parsers_fuzz.cc).
void parseConfig(std::string_view text, const std::string& path, std::map<std::string, std::string>& into,
                 std::vector<Problem>* problems);

/// Parses an integer the way NCCL does (decimal, 0x hex, 0 octal), but rejects trailing junk.
bool parseInteger(const std::string& text, int64_t* out);

/// The process-wide store, created on first use from the real environment and files.
Store& process();

/// Name of an origin for listings ("environment", "default", ...).
const char* originName(Origin origin);

}  // namespace braid::params
