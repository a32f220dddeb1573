#include "core/init.h"

#include <mutex>

#include "braid_config.h"
#include "core/env_plugin.h"
#include "core/log.h"
#include "core/other_nccl.h"
#include "core/params.h"

namespace braid::core {

std::string versionText() {
  return std::string("NCCL version 2.30.7+braid") + BRAID_VERSION + " (Braid " + BRAID_VERSION +
         ", implementing the NCCL 2.30.7 ABI" + (BRAID_HAVE_CUDA ? ", built with CUDA " BRAID_CUDA_VERSION : ", built without CUDA") + ")";
}

namespace {

void reportSettings() {
  params::Store& store = params::process();
  for (const char* name : params::unhonouredNcclVariables()) {
    const params::Setting s = store.lookup(name);
    if (s.origin == params::Origin::Default) continue;
    BRAID_INFO(log::kEnv, "%s=%s is set (%s) but Braid does not honour it yet; it is ignored", name,
               s.text.c_str(), params::originName(s.origin));
  }
  for (const auto& knob : params::knobTable()) {
    const params::Setting s = store.lookup(knob.name);
    if (s.origin == params::Origin::Default) continue;
    if (!knob.honoured) {
      BRAID_INFO(log::kEnv, "%s=%s is set (%s) but nothing in this Braid build uses it yet; it is ignored",
                 knob.name, s.text.c_str(), params::originName(s.origin));
    } else {
      BRAID_INFO(log::kEnv, "%s set by %s to %s", knob.name, params::originName(s.origin), s.text.c_str());
    }
    if (knob.type == params::KnobType::Integer) store.integer(knob.name);  // validate now
  }
  for (const auto& p : store.takeProblems()) BRAID_WARN("%s", p.text.c_str());
}

}  // namespace

void initOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (log::ensureConfigured() >= static_cast<int>(log::Level::Version)) {
      log::write(log::Level::Version, log::kInit, __FILE__, __LINE__, "%s", versionText().c_str());
    }
    envplugin::reportLoad();
    reportSettings();
    warnAboutOtherNccl();
  });
}

}  // namespace braid::core
