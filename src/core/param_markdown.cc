#include "core/param_markdown.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/params.h"

namespace braid::params {

namespace {

// A table cell: a '|' in the help text would end the cell early.
std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

const char* kIntro =
    "# Parameters\n"
    "\n"
    "<!-- Generated from the parameter registry (src/core/params_table.cc) by\n"
    "     `build/src/braid-info --markdown > docs/parameters.md`. Do not edit it by hand:\n"
    "     the docs suite (test/check_parameters_doc.sh) fails when it differs from the registry. -->\n"
    "\n"
    "Braid reads its settings as NCCL does: from the environment first, then from the config\n"
    "file `NCCL_CONF_FILE` names (or `~/.nccl.conf` when it is unset), then from\n"
    "`/etc/nccl.conf`; a file holds one `NAME=value` line per setting. `braid-info` prints every\n"
    "parameter with the value in force and where it came from (`braid-info --set` only those\n"
    "that are set, `braid-info NAME` one of them), and a program can ask the same through NCCL\n"
    "2.30's parameter API (`ncclParamGetAllParameterKeys`, `ncclParamDumpAll`).\n"
    "\n"
    "A parameter marked *not used yet* is accepted and validated, and setting it is logged at\n"
    "INFO, but nothing in this version of Braid reads it. Setting one of the NCCL variables in the\n"
    "last section is logged at INFO and otherwise ignored. An integer that does not parse is\n"
    "reported at WARN, and the default stays in force. How config files are read and how logging\n"
    "works: [settings and logging](troubleshooting.md#settings-and-logging).\n"
    "\n"
    "## Reference: the parameters Braid reads\n"
    "\n"
    "| name | type | default | meaning |\n"
    "|---|---|---|---|\n";

}  // namespace

std::string parametersMarkdown() {
  std::string page = kIntro;
  for (const KnobSpec& knob : knobTable()) {
    const std::string def = knob.defaultValue[0] == '\0' ? "(unset)" : "`" + std::string(knob.defaultValue) + "`";
    page += "| `" + std::string(knob.name) + "` | " + (knob.type == KnobType::Integer ? "integer" : "text") + " | " +
            def + " | " + cell(knob.help) + (knob.honoured ? "" : " (*not used yet*)") + " |\n";
  }
  page +=
      "\n"
      "## Reference: NCCL variables recognised but not read\n"
      "\n"
      "Braid knows these names from NCCL 2.28.9 to 2.30.7 and lists them with\n"
      "`NCCL_PARAM_DUMP_ALL=1 braid-info`; it does not act on them.\n"
      "\n";
  std::vector<const char*> names = unhonouredNcclVariables();  // 2.28.9's, then the later ones
  std::sort(names.begin(), names.end(), [](const char* a, const char* b) { return std::strcmp(a, b) < 0; });
  for (const char* name : names) page += "- `" + std::string(name) + "`\n";
  return page;
}

}  // namespace braid::params
