#include "plugin/plugin_log.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <sstream>

#include "core/log.h"

namespace braid::plugin {

void pluginLog(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* format, ...) {
  const int l = std::min(static_cast<int>(level), static_cast<int>(log::Level::Trace));
  if (l <= 0 || format == nullptr || !log::enabled(static_cast<log::Level>(l), flags)) return;
  char text[1024];
  va_list args;
  va_start(args, format);
  vsnprintf(text, sizeof text, format, args);
  va_end(args);
  log::write(static_cast<log::Level>(l), flags, file != nullptr ? file : "plugin", line, "%s", text);
}

void sayNotes(const std::vector<Note>& notes, unsigned long subsys) {
  for (const auto& n : notes) {
    if (n.warn) {
      BRAID_WARN("%s", n.text.c_str());
    } else {
      BRAID_INFO(log::kInit | subsys, "%s", n.text.c_str());
    }
  }
}

Opened openBesideNet(const char* kind, const char* label, const std::string& value, const std::string& netValue,
                     const std::vector<std::string>& symbols, unsigned long subsys) {
  std::vector<Note> notes;
  Opened o;
  o.library = open(kind, value, label, &notes);
  bool fromNet = false;
  if (!o.library && !disabled(netValue)) {
    std::stringstream list(netValue.empty() ? std::string(",") : netValue);
    for (std::string part; !o.library && std::getline(list, part, ',');) o.library = open("net", part, label, &notes);
    fromNet = static_cast<bool>(o.library);
  }
  sayNotes(notes, subsys);
  if (!o.library) return o;
  o.symbol = firstSymbol(o.library, symbols, &o.index);
  if (o.symbol == nullptr) {
    if (fromNet && value.empty()) {  // a net plugin without this kind is normal
      BRAID_INFO(log::kInit | subsys, "%s/Plugin: the net plugin library %s has no %s (%s)", label,
                 o.library.path().c_str(), kind, joinNames(symbols).c_str());
    } else {
      BRAID_WARN("%s/Plugin: %s exports none of %s; going on without a %s plugin", label, o.library.path().c_str(),
                 joinNames(symbols).c_str(), kind);
    }
  }
  return o;
}

}  // namespace braid::plugin
