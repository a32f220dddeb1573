#include "plugin/plugin_log.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>

#include "core/log.h"

namespace braid::plugin {

void pluginLog(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* format, ...) {
  const int l = std::min(static_cast<int>(level), static_cast<int>(log::Level::Trace));
  if (l <= 0 || !log::enabled(static_cast<log::Level>(l), flags)) return;
  char text[1024];
  va_list args;
  va_start(args, format);
  vsnprintf(text, sizeof text, format, args);
  va_end(args);
  log::write(static_cast<log::Level>(l), flags, file != nullptr ? file : "plugin", line, "%s", text);
}

}  // namespace braid::plugin
