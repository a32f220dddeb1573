#include "core/plugin_library.h"

#include <dlfcn.h>
#include <link.h>
#include <strings.h>

#include <utility>

namespace braid::plugin {

Library::Library(Library&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), path_(std::move(other.path_)) {}

Library& Library::operator=(Library&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) dlclose(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

Library::~Library() {
  if (handle_ != nullptr) dlclose(handle_);
}

void* Library::symbol(const char* name) const { return handle_ != nullptr ? dlsym(handle_, name) : nullptr; }

bool disabled(const std::string& value) { return strcasecmp(value.c_str(), "none") == 0; }

std::vector<std::string> candidates(const std::string& kind, const std::string& value) {
  const std::string prefix = "libnccl-" + kind;
  if (value.empty()) return {prefix + ".so"};
  if (value.find('/') != std::string::npos) return {value};
  const bool fileName = value.size() > 3 && value.compare(0, 3, "lib") == 0 &&
                        value.compare(value.size() - 3, 3, ".so") == 0;
  if (fileName) return {value};  // already a library's file name (libnccl-tuner-x.so)
  return {prefix + "-" + value + ".so", value};
}

namespace {

/// The full path of an open library, as the dynamic linker resolved it.
std::string resolvedPath(void* handle, const std::string& fallback) {
  struct link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr && map->l_name[0] != '\0') {
    return map->l_name;
  }
  return fallback;
}

}  // namespace

Library open(const std::string& kind, const std::string& value, const char* label, std::vector<Note>* notes) {
  std::string missing;
  for (const std::string& name : candidates(kind, value)) {
    void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) return Library(handle, resolvedPath(handle, name));
    const char* error = dlerror();
    const std::string why = error != nullptr ? error : "unknown dlopen error";
    // Only the candidate itself missing counts as absent (not a dependency it names).
    if (why.rfind(name + ":", 0) == 0 && why.find("No such file or directory") != std::string::npos) {
      missing += " " + name;
    } else {
      notes->push_back({true, std::string(label) + "/Plugin: cannot load " + name + ": " + why});
    }
  }
  if (!missing.empty()) notes->push_back({false, std::string(label) + "/Plugin: Could not find:" + missing});
  return Library();
}

void* firstSymbol(const Library& library, const std::vector<std::string>& symbols, int* index) {
  for (size_t i = 0; i < symbols.size(); ++i) {
    if (void* p = library.symbol(symbols[i].c_str()); p != nullptr) {
      *index = static_cast<int>(i);
      return p;
    }
  }
  *index = -1;
  return nullptr;
}

std::string joinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace braid::plugin
