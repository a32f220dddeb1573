#include "core/other_nccl.h"

#include <dlfcn.h>
#include <link.h>

#include "core/log.h"

namespace braid::core {

namespace {

int collectName(struct dl_phdr_info* info, size_t, void* names) {
  // The main program and the vDSO have no file name to open.
  if (info->dlpi_name != nullptr && info->dlpi_name[0] == '/') {
    static_cast<std::vector<std::string>*>(names)->push_back(info->dlpi_name);
  }
  return 0;
}

}  // namespace

std::vector<std::string> otherNcclLibraries() {
  Dl_info self{};
  const std::string selfFile =
      dladdr(reinterpret_cast<void*>(&otherNcclLibraries), &self) != 0 && self.dli_fname ? self.dli_fname : "";
  // Names first, dlopen afterwards: dl_iterate_phdr holds the loader's lock while it calls back.
  std::vector<std::string> loaded;
  dl_iterate_phdr(collectName, &loaded);
  std::vector<std::string> others;
  for (const std::string& file : loaded) {
    if (file == selfFile) continue;
    void* handle = dlopen(file.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (handle == nullptr) continue;
    void* symbol = dlsym(handle, "ncclGetVersion");
    // dlsym also searches the object's dependencies: a library that merely links against
    // Braid finds Braid's symbol, which is no second NCCL.
    Dl_info where{};
    if (symbol != nullptr && dladdr(symbol, &where) != 0 && where.dli_fname != nullptr && file == where.dli_fname) {
      others.push_back(file);
    }
    dlclose(handle);
  }
  return others;
}

std::string otherNcclWarning(const std::string& file) {
  return "another NCCL library is loaded in this process: " + file +
         " exports ncclGetVersion too; calls bound to it run that library, not Braid (check with ldd, or put "
         "Braid's libnccl.so.2 first with LD_LIBRARY_PATH or LD_PRELOAD)";
}

void warnAboutOtherNccl() {
  for (const std::string& file : otherNcclLibraries()) BRAID_WARN("%s", otherNcclWarning(file).c_str());
}

}  // namespace braid::core
