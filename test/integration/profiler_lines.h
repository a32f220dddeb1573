// The lines test/plugins/profiler_record.c prints, parsed for the profiler tests
// (plugin_test.cc, profiler_proxy_test.cc).
#pragma once

#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace braid::test {

/// One line the test profiler printed for a rank: "prof r<rank> start|state|stop <id> ...".
struct ProfLine {
  std::string op;    ///< start, state, stop
  int id = 0;
  std::string what;  ///< the event type (start, stop) or the state's name
  std::map<std::string, std::string> fields;  ///< key=value
  std::string text;
};

/// Rank `rank`'s lines in `out`, in order.
inline std::vector<ProfLine> profLines(const std::string& out, int rank) {
  std::vector<ProfLine> lines;
  const std::string prefix = "prof r" + std::to_string(rank) + " ";
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) != 0) continue;
    std::istringstream words(line.substr(prefix.size()));
    ProfLine l;
    l.text = line;
    words >> l.op;
    if (l.op != "start" && l.op != "state" && l.op != "stop") continue;
    words >> l.id >> l.what;
    for (std::string w; words >> w;) {
      const size_t eq = w.find('=');
      if (eq != std::string::npos) l.fields[w.substr(0, eq)] = w.substr(eq + 1);
    }
    lines.push_back(l);
  }
  return lines;
}

}  // namespace braid::test
