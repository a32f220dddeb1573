#include "core/env_plugin.h"

#include <nccl_env.h>
#include <pthread.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <set>
#include <vector>

#include "core/log.h"
#include "core/plugin_library.h"

namespace braid::envplugin {

namespace {

const std::vector<std::string> kSymbols = {"ncclEnvPlugin_v1"};

struct State {
  std::mutex mutex;  ///< serialises getEnv (a plugin's answer is valid until its next call) and finalize
  std::atomic<const ncclEnv_v1_t*> plugin{nullptr};  ///< null: none loaded, or finalized
  std::string name;
  std::set<std::string> values;  ///< every answer, copied: pointers handed out stay valid
  std::vector<plugin::Note> notes;
  bool reported = false;
};

State& state() {
  static State* s = new State();  // never destroyed: variables may be read during exit
  return *s;
}

void finalizeAtExit() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const ncclEnv_v1_t* p = s.plugin.exchange(nullptr);  // (reads from here on use getenv)
  if (p == nullptr) return;
  if (p->finalize != nullptr) p->finalize();
}

/// Loads the plugin NCCL_ENV_PLUGIN names; notes what happened (logged later, by reportLoad).
void load(State& s) {
  const char* value = std::getenv("NCCL_ENV_PLUGIN");
  const std::string requested = value != nullptr ? value : "";
  if (value != nullptr) s.notes.push_back({false, "NCCL_ENV_PLUGIN set by environment to " + requested});
  if (plugin::disabled(requested)) return;
  plugin::Library library = plugin::open("env", requested, "ENV", &s.notes);
  if (!library) return;
  int version = -1;
  auto* p = static_cast<const ncclEnv_v1_t*>(plugin::firstSymbol(library, kSymbols, &version));
  if (p == nullptr) {
    s.notes.push_back({true, "ENV/Plugin: " + library.path() + " exports none of " + plugin::joinNames(kSymbols) +
                                 "; NCCL variables are read from the environment"});
    return;
  }
  const std::string name = p->name != nullptr ? p->name : "(unnamed)";
  if (p->getEnv == nullptr || p->init == nullptr) {
    s.notes.push_back({true, "ENV/Plugin: " + library.path() + ": env plugin " + name + " (v1) has no " +
                                 (p->init == nullptr ? "init" : "getEnv") +
                                 " function; NCCL variables are read from the environment"});
    return;
  }
  const ncclResult_t r = p->init(2, 28, 9, "");
  if (r != ncclSuccess) {
    s.notes.push_back({true, "ENV/Plugin: " + library.path() + ": env plugin " + name + " (v1) init failed with " +
                                 std::to_string(static_cast<int>(r)) +
                                 "; NCCL variables are read from the environment"});
    return;
  }
  s.notes.push_back({false, "ENV/Plugin: Loaded env plugin " + name + " (v1) from " + library.path()});
  s.name = name;
  s.plugin.store(p, std::memory_order_release);
  library.keepOpen();  // finalize runs at exit, and threads may read variables until then
  std::atexit(finalizeAtExit);
}

State& loaded() {
  static std::once_flag once;
  std::call_once(once, [] {
    State& s = state();
    load(s);
    // A forked child may inherit the lock from a parent thread reading a variable.
    pthread_atfork(nullptr, nullptr, [] { new (&state().mutex) std::mutex(); });
  });
  return state();
}

}  // namespace

const char* get(const char* name) {
  State& s = loaded();
  if (s.plugin.load(std::memory_order_acquire) == nullptr || std::strncmp(name, "NCCL_", 5) != 0) {
    return std::getenv(name);
  }
  std::lock_guard<std::mutex> lock(s.mutex);
  const ncclEnv_v1_t* p = s.plugin.load(std::memory_order_relaxed);
  if (p == nullptr) return std::getenv(name);  // finalized meanwhile
  const char* value = p->getEnv(name);
  if (value == nullptr) return nullptr;
  return s.values.emplace(value).first->c_str();
}

void reportLoad() {
  State& s = loaded();
  std::vector<plugin::Note> notes;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.reported) return;
    s.reported = true;
    notes = s.notes;
  }
  for (const auto& n : notes) {
    if (n.warn) {
      BRAID_WARN("%s", n.text.c_str());
    } else {
      BRAID_INFO(log::kInit | log::kEnv, "%s", n.text.c_str());
    }
  }
}

std::string loadedName() {
  State& s = loaded();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.plugin.load() != nullptr ? s.name : "";
}

}  // namespace braid::envplugin
