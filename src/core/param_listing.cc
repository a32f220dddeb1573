#include "core/param_listing.h"

#include <algorithm>
#include <cstring>
#include <strings.h>

namespace braid::params {

bool dumpAllRequested(Store& store) {
  const std::string v = store.string("NCCL_PARAM_DUMP_ALL");
  // NCCL reads it as a bool: "true"/"1" (any case) switch it on.
  return strcasecmp(v.c_str(), "true") == 0 || v == "1" || strcasecmp(v.c_str(), "yes") == 0 ||
         strcasecmp(v.c_str(), "on") == 0;
}

std::vector<ListedParameter> listedParameters(Store& store) {
  std::vector<ListedParameter> out;
  for (const KnobSpec& knob : knobTable()) out.push_back({knob.name, &knob});
  if (dumpAllRequested(store)) {
    for (const char* name : unhonouredNcclVariables()) out.push_back({name, nullptr});
  }
  std::sort(out.begin(), out.end(),
            [](const ListedParameter& a, const ListedParameter& b) { return std::strcmp(a.name, b.name) < 0; });
  return out;
}

ListedParameter findListed(const std::string& name) {
  if (const KnobSpec* knob = findKnob(name)) return {knob->name, knob};
  for (const char* unread : unhonouredNcclVariables()) {
    if (name == unread) return {unread, nullptr};
  }
  return {nullptr, nullptr};
}

std::string valueText(Store& store, const ListedParameter& p) {
  if (p.spec == nullptr) return store.lookup(p.name).text;
  if (p.spec->type == KnobType::Integer) return std::to_string(store.integer(p.name));
  return store.string(p.name);
}

std::string describe(Store& store, const ListedParameter& p) {
  const Setting s = store.lookup(p.name);
  std::string origin = originName(s.origin);
  if (!s.file.empty()) origin += " " + s.file;
  std::string value = valueText(store, p);
  if (std::strcmp(p.name, "BRAID_COMM_SECRET") == 0 && !value.empty()) value = "(set; not shown)";
  const char* type = p.spec == nullptr ? "text" : p.spec->type == KnobType::Integer ? "integer" : "string";
  const char* use = p.spec == nullptr ? "recognised, not read by Braid" : p.spec->honoured ? "honoured" : "not used yet";
  const std::string help = p.spec != nullptr ? p.spec->help : "an NCCL variable that has no effect in Braid";
  const std::string defaultText = p.spec != nullptr ? p.spec->defaultValue : "";
  return std::string(p.name) + " (" + type + ") [" + use + "] " + help + "\n    value=" +
         (value.empty() ? "\"\"" : value) + " set_by=" + origin + " default=" +
         (defaultText.empty() ? "\"\"" : defaultText) + "\n";
}

}  // namespace braid::params
