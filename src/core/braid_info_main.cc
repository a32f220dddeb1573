// braid-info: an overview of what this process would run on (version, backend, devices,
// transports, plugins), then every knob Braid declares, with its current value, where that value came
// from and one line of help (like ompi_info), plus the build's features.
//   braid-info            all knobs
//   braid-info --set      only knobs (and unhonoured NCCL variables) that are set
//   braid-info NAME...    only these knobs
//   braid-info --markdown docs/parameters.md: the registry as a page (defaults, not values)
// It lists the same parameters as ncclParamGetAllParameterKeys: with NCCL_PARAM_DUMP_ALL set,
// also every NCCL variable Braid recognises but does not read.
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <set>
#include <string>

#include "braid_config.h"
#include "core/init.h"
#include "core/param_listing.h"
#include "core/param_markdown.h"
#include "core/params.h"
#include "runtime/device_query.h"

using namespace braid;

namespace {

void usage() {
  std::printf("usage: braid-info [--set] [NAME...] | --markdown\n"
              "Lists Braid's parameters: value, origin (environment, config file, default) and help.\n"
              "--markdown prints docs/parameters.md: every parameter's default and help, from the registry.\n");
}

std::string origin(const params::Setting& s) {
  std::string o = params::originName(s.origin);
  if (!s.file.empty()) o += " " + s.file;
  return o;
}

bool loadable(const std::string& library) {
  void* handle = dlopen(library.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (handle != nullptr) dlclose(handle);
  return handle != nullptr;
}

// A plugin variable's value, or what Braid does when it is unset.
std::string pluginSetting(params::Store& store, const char* name, const char* whenUnset) {
  const std::string value = store.string(name);
  return value.empty() ? std::string(whenUnset) : name + ("=" + value);
}

// What this process would run on, before the parameter table: version, build, devices, the
// backend BRAID_BACKEND picks, the transports and the plugins.
void overview(params::Store& store) {
  const runtime::DeviceCount devices = runtime::cudaDevices();
  std::printf("%s\n", core::versionText().c_str());
  std::printf("build: CUDA %s, hwloc headers %s, ibverbs headers %s\n",
              BRAID_HAVE_CUDA ? BRAID_CUDA_VERSION " (sm " BRAID_CUDA_ARCHS ")" : "no",
              BRAID_HAVE_HWLOC_HEADERS ? "yes" : "no", BRAID_HAVE_IBVERBS_HEADERS ? "yes" : "no");
  std::printf("CUDA devices visible: %d%s%s\n", devices.count, devices.note.empty() ? "" : " - ",
              devices.note.c_str());
  const std::string backend = store.string("BRAID_BACKEND");
  const bool gpu = devices.count > 0 && backend != "host";
  std::printf("backend: %s (BRAID_BACKEND=%s)\n",
              gpu ? "CUDA: communicators run on the GPU of the thread's current device"
                  : "host: communicators run on the CPU, on host buffers",
              backend.empty() ? "auto" : backend.c_str());
  const std::string verbs = store.string("BRAID_IBVERBS_LIBRARY");
  std::printf("transports: threads of a process share memory, processes of a host shared memory, hosts sockets%s\n",
              loadable(verbs) ? (", or InfiniBand/RoCE where a port is active (" + verbs + " loads)").c_str()
                              : (" (no InfiniBand/RoCE: " + verbs + " cannot be loaded)").c_str());
  std::printf("plugins (loaded at a communicator's init): net %s; tuner %s; profiler %s; env %s\n",
              pluginSetting(store, "NCCL_NET_PLUGIN", "libnccl-net.so if it loads").c_str(),
              pluginSetting(store, "NCCL_TUNER_PLUGIN", "libnccl-tuner.so if it loads").c_str(),
              pluginSetting(store, "NCCL_PROFILER_PLUGIN", "libnccl-profiler.so if it loads").c_str(),
              pluginSetting(store, "NCCL_ENV_PLUGIN", "libnccl-env.so if it loads").c_str());
  std::printf("config files: user %s, system %s\n\n",
              store.userFile().empty() ? "(none: NCCL_CONF_FILE and HOME unset)" : store.userFile().c_str(),
              store.systemFile().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  bool onlySet = false;
  std::set<std::string> names;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--markdown") == 0) {
      std::fputs(params::parametersMarkdown().c_str(), stdout);
      return 0;
    } else if (std::strcmp(argv[i], "--set") == 0) {
      onlySet = true;
    } else if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) {
      usage();
      return 0;
    } else if (argv[i][0] == '-') {
      std::fprintf(stderr, "braid-info: unknown option %s\n", argv[i]);
      usage();
      return 2;
    } else {
      if (params::findKnob(argv[i]) == nullptr) {
        std::fprintf(stderr, "braid-info: %s is not one of Braid's parameters\n", argv[i]);
        return 2;
      }
      names.insert(argv[i]);
    }
  }

  params::Store& store = params::process();
  if (names.empty()) overview(store);

  const bool all = params::dumpAllRequested(store);
  for (const params::ListedParameter& listed : params::listedParameters(store)) {
    if (!names.empty() && names.count(listed.name) == 0) continue;
    if (listed.spec == nullptr) {  // (only with NCCL_PARAM_DUMP_ALL)
      const params::Setting s = store.lookup(listed.name);
      if (onlySet && s.origin == params::Origin::Default) continue;
      std::printf("%-22s = %-20s [%s] (recognised NCCL variable; Braid does not read it)\n", listed.name,
                  s.text.empty() ? "\"\"" : s.text.c_str(), origin(s).c_str());
      continue;
    }
    const params::KnobSpec& knob = *listed.spec;
    const params::Setting s = store.lookup(knob.name);
    if (onlySet && s.origin == params::Origin::Default) continue;
    std::string value = s.text;
    if (knob.type == params::KnobType::Integer) value = std::to_string(store.integer(knob.name));
    if (std::strcmp(knob.name, "BRAID_COMM_SECRET") == 0 && !value.empty()) value = "(set; not shown)";
    std::printf("%-22s = %-20s [%s]%s\n    %s\n", knob.name, value.empty() ? "\"\"" : value.c_str(),
                origin(s).c_str(), knob.honoured ? "" : " (not used by this build yet)", knob.help);
    int64_t parsed = 0;
    if (knob.type == params::KnobType::Integer && s.origin != params::Origin::Default &&
        !params::parseInteger(s.text, &parsed)) {
      std::printf("    note: the text '%s' was not a valid integer; the default is in force\n", s.text.c_str());
    }
  }

  if (names.empty() && !all) {
    int shown = 0;
    for (const char* name : params::unhonouredNcclVariables()) {
      const params::Setting s = store.lookup(name);
      if (s.origin == params::Origin::Default) continue;
      if (shown++ == 0) std::printf("\nNCCL variables that are set but not honoured by Braid (ignored):\n");
      std::printf("%-22s = %s [%s]\n", name, s.text.c_str(), origin(s).c_str());
    }
    if (!onlySet) {
      std::printf("\n%zu further NCCL variables are recognised but not honoured yet (NCCL_PARAM_DUMP_ALL=1 lists "
                  "them); setting one is logged at INFO and otherwise ignored.\n",
                  params::unhonouredNcclVariables().size());
    }
  }
  return 0;
}
