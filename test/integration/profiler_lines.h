// The lines test/plugins/profiler_record.c prints, parsed for the profiler tests
// (plugin_test.cc, profiler_proxy_test.cc, emulated_plugin_test.cc), and the checks they share.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
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

/// The start line of event `id`.
inline const ProfLine* started(const std::vector<ProfLine>& lines, int id) {
  for (const auto& l : lines) {
    if (l.op == "start" && l.id == id) return &l;
  }
  return nullptr;
}

inline int asInt(const std::string& s) { return s.empty() || s == "-" ? 0 : std::stoi(s); }

/// What checkProxyEvents found of one ProxyOp.
struct ProxyOpSeen {
  int id = 0;
  std::string parentType;  ///< Coll or P2p
  std::string parentFunc;  ///< its func field
  int channel = -1;
  bool isSend = false;
  int steps = 0;
  uint64_t bytes = 0;  ///< its steps' sizes together
  int late = 0;        ///< a receiver's: steps of the next operation, stopped waiting (RecvWait alone)
  int firstLate = -1;
};

/// Checks rank r's ProxyOp and ProxyStep events: each ProxyOp's parent is a Coll or P2P event
/// of the rank, its peer the other rank, pid and chunk set; its ProxyStep children come in
/// step order from 0, each with the states of its side in order (a sender's SendWait; a
/// receiver's RecvWait then RecvGPUWait, or RecvGPUWait alone for a step that landed before
/// the operation began here), each with positive bytes, and each stopped before the ProxyOp,
/// which stops before its parent. Every event started stops exactly once.
inline std::vector<ProxyOpSeen> checkProxyEvents(const std::vector<ProfLine>& lines, int r) {
  std::map<int, size_t> startAt, stopAt;
  std::map<int, int> stops;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].op == "start") {
      CHECK(startAt.count(lines[i].id) == 0);
      startAt[lines[i].id] = i;
    }
    if (lines[i].op == "stop") {
      ++stops[lines[i].id];
      stopAt[lines[i].id] = i;
    }
  }
  for (const auto& [id, at] : startAt) {
    INFO(lines[at].text);
    CHECK(stops[id] == 1);  // every start has its stop
  }
  std::vector<ProxyOpSeen> ops;
  std::map<int, size_t> opIndex;
  for (size_t i = 0; i < lines.size(); ++i) {
    const ProfLine& l = lines[i];
    if (l.op != "start" || l.what != "ProxyOp") continue;
    INFO(l.text);
    const ProfLine* p = started(lines, asInt(l.fields.at("parent")));
    REQUIRE(p != nullptr);
    CHECK((p->what == "Coll" || p->what == "P2p"));
    CHECK(asInt(l.fields.at("peer")) == 1 - r);
    CHECK(asInt(l.fields.at("pid")) > 0);
    CHECK(asInt(l.fields.at("chunk")) > 0);
    CHECK(stopAt.count(l.id) == 1);
    CHECK(stopAt.count(p->id) == 1);
    if (stopAt.count(l.id) && stopAt.count(p->id)) CHECK(stopAt[l.id] < stopAt[p->id]);
    ProxyOpSeen seen;
    seen.id = l.id;
    seen.parentType = p->what;
    seen.parentFunc = p->fields.count("func") ? p->fields.at("func") : "";
    seen.channel = asInt(l.fields.at("channel"));
    seen.isSend = l.fields.at("send") == "1";
    opIndex[l.id] = ops.size();
    ops.push_back(seen);
  }
  std::map<int, std::vector<std::string>> states;  // per ProxyStep: its states in order
  std::map<int, uint64_t> bytes;                    // and the bytes its last state said
  for (const ProfLine& l : lines) {
    if (l.op == "state" && started(lines, l.id) != nullptr && started(lines, l.id)->what == "ProxyStep") {
      states[l.id].push_back(l.what);
      bytes[l.id] = std::stoull(l.fields.at("size"));
    }
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    const ProfLine& l = lines[i];
    if (l.op != "start" || l.what != "ProxyStep") continue;
    INFO(l.text);
    const int parent = asInt(l.fields.at("parent"));
    REQUIRE(opIndex.count(parent) == 1);  // a ProxyOp of this rank
    ProxyOpSeen& op = ops[opIndex[parent]];
    CHECK(asInt(l.fields.at("step")) == op.steps);  // in step order, from 0
    ++op.steps;
    const std::vector<std::string>& st = states[l.id];
    // Every step says its size, a step that landed early too (every operation here is Simple);
    // one may be empty (a ring's chunk of a small slice, cut at 512-byte boundaries).
    CHECK(bytes.count(l.id) == 1);
    op.bytes += bytes[l.id];
    if (op.isSend) {
      CHECK(st == std::vector<std::string>{"SendWait"});
    } else if (st == std::vector<std::string>{"RecvWait"}) {
      // The next operation's step, whose header came while this one was watched (the peer
      // ran ahead: proxy/op_trace.h); only after this operation's own steps.
      if (op.late == 0) op.firstLate = op.steps - 1;
      ++op.late;
    } else {
      CHECK((st == std::vector<std::string>{"RecvWait", "RecvGPUWait"} ||
             st == std::vector<std::string>{"RecvGPUWait"}));
    }
    CHECK(startAt[parent] < i);
    if (stopAt.count(l.id) && stopAt.count(parent)) CHECK(stopAt[l.id] < stopAt[parent]);
  }
  for (const ProxyOpSeen& op : ops) {
    INFO("ProxyOp " << op.id);
    CHECK(op.steps > 0);  // a ProxyOp starts with its first step
    CHECK(op.bytes > 0);
    if (op.late > 0) CHECK(op.firstLate + op.late == op.steps);  // (the late ones last)
    CHECK(op.late < op.steps);
  }
  return ops;
}

}  // namespace braid::test
