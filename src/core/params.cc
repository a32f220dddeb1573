#include "core/params.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "core/env_plugin.h"
#include "core/files.h"
#include "core/status.h"

namespace braid::params {

namespace {

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  const auto last = s.find_last_not_of(" \t\r\n");
  return s.substr(first, last - first + 1);
}

}  // namespace

bool parseInteger(const std::string& text, int64_t* out) {
  const std::string t = trim(text);
  if (t.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(t.c_str(), &end, 0);
  if (errno != 0 || end == t.c_str() || *end != '\0') return false;
  *out = v;
  return true;
}

Sources Sources::fromProcess() {
  Sources s;
  s.getenv = [](const char* name) -> const char* { return envplugin::get(name); };  // getenv, or the env plugin
  return s;
}

Store::Store(Sources sources) : sources_(std::move(sources)) {
  const char* conf = sources_.getenv("NCCL_CONF_FILE");
  if (conf != nullptr && conf[0] != '\0') {
    userFile_ = conf;
  } else if (const char* home = sources_.getenv("HOME"); home != nullptr && home[0] != '\0') {
    userFile_ = std::string(home) + "/.nccl.conf";
  }
  if (!userFile_.empty()) readFile(userFile_, userValues_);
  if (!sources_.systemFile.empty()) readFile(sources_.systemFile, systemValues_);
}

void Store::readFile(const std::string& path, std::map<std::string, std::string>& into) {
  std::string text, why;
  switch (files::readRegular(path, kConfigMaxBytes, &text, &why)) {
    case files::ReadResult::kAbsent: return;  // an absent file is normal
    case files::ReadResult::kRefused:
      problems_.push_back({"ignoring config file " + path + ": " + why});
      return;
    case files::ReadResult::kRead: break;
  }
  parseConfig(text, path, into, &problems_);
}

void parseConfig(std::string_view text, const std::string& path, std::map<std::string, std::string>& into,
                 std::vector<Problem>* problems) {
  size_t lineNo = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view raw = text.substr(start, end - start);
    start = end + 1;
    ++lineNo;
    if (raw.size() > kConfigMaxLine) {
      problems->push_back({path + ":" + std::to_string(lineNo) + ": ignoring a line of " + std::to_string(raw.size()) +
                           " bytes (at most " + std::to_string(kConfigMaxLine) + ")"});
      continue;
    }
    std::string line(raw);
    if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    line = trim(line);
    if (line.empty()) continue;
    const auto eq = line.find('=');
    const std::string name = eq == std::string::npos ? "" : trim(line.substr(0, eq));
    if (name.empty() || name.find_first_of(" \t") != std::string::npos) {
      problems->push_back({path + ":" + std::to_string(lineNo) + ": ignoring line '" + line +
                           "' (expected NAME=value)"});
      continue;
    }
    into.emplace(name, trim(line.substr(eq + 1)));  // the first definition in a file wins
  }
}

Setting Store::lookup(const std::string& name) const {
  if (const char* v = sources_.getenv(name.c_str()); v != nullptr) {
    return {v, Origin::Environment, ""};
  }
  if (auto it = userValues_.find(name); it != userValues_.end()) {
    return {it->second, Origin::UserFile, userFile_};
  }
  if (auto it = systemValues_.find(name); it != systemValues_.end()) {
    return {it->second, Origin::SystemFile, sources_.systemFile};
  }
  const KnobSpec* knob = findKnob(name);
  return {knob != nullptr ? knob->defaultValue : "", Origin::Default, ""};
}

const KnobSpec& Store::spec(const std::string& name, KnobType type) const {
  const KnobSpec* knob = findKnob(name);
  if (knob == nullptr) fail(ncclInternalError, "parameter %s is not declared in the registry", name.c_str());
  if (knob->type != type) fail(ncclInternalError, "parameter %s read with the wrong type", name.c_str());
  return *knob;
}

int64_t Store::integer(const std::string& name) {
  const KnobSpec& knob = spec(name, KnobType::Integer);
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = integers_.find(name); it != integers_.end()) return it->second;
  int64_t fallback = 0;
  parseInteger(knob.defaultValue, &fallback);
  const Setting setting = lookup(name);
  int64_t value = fallback;
  if (setting.origin != Origin::Default && !parseInteger(setting.text, &value)) {
    problems_.push_back({"invalid value '" + setting.text + "' for " + name + " (from " +
                         originName(setting.origin) + (setting.file.empty() ? "" : " " + setting.file) +
                         "): not an integer; using the default " + knob.defaultValue});
    value = fallback;
  }
  integers_.emplace(name, value);
  return value;
}

std::string Store::string(const std::string& name) {
  spec(name, KnobType::String);
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = strings_.find(name); it != strings_.end()) return it->second;
  std::string value = lookup(name).text;
  strings_.emplace(name, value);
  return value;
}

bool Store::firstWarning(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  return warned_.insert(key).second;
}

std::vector<Problem> Store::takeProblems() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Problem> out;
  out.swap(problems_);
  return out;
}

Store& process() {
  static Store store(Sources::fromProcess());
  return store;
}

const char* originName(Origin origin) {
  switch (origin) {
    case Origin::Default: return "default";
    case Origin::Environment: return "environment";
    case Origin::UserFile: return "user config file";
    case Origin::SystemFile: return "system config file";
  }
  return "?";
}

const KnobSpec* findKnob(const std::string& name) {
  const auto& table = knobTable();
  auto it = std::lower_bound(table.begin(), table.end(), name,
                             [](const KnobSpec& k, const std::string& n) { return n > k.name; });
  return (it != table.end() && name == it->name) ? &*it : nullptr;
}

}  // namespace braid::params
