#include <dlfcn.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "core/other_nccl.h"
#include "test_env.h"

using namespace braid;

namespace {

std::string fakeNccl() {
  const char* path = std::getenv("BRAID_FAKE_NCCL");
  if (path == nullptr) FAIL("BRAID_FAKE_NCCL is not set (run the tests through meson test)");
  return path;
}

bool listed(const std::string& file) {
  for (const std::string& other : core::otherNcclLibraries()) {
    if (other == file) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("a second library exporting ncclGetVersion is found; Braid itself is not", "[core][other-nccl]") {
  const std::string fake = fakeNccl();
  // This test program holds Braid's code itself (statically): nothing else exports the name yet.
  CHECK_FALSE(listed(fake));
  CHECK(core::otherNcclLibraries().empty());
  void* handle = dlopen(fake.c_str(), RTLD_NOW | RTLD_LOCAL);
  REQUIRE(handle != nullptr);
  CHECK(listed(fake));
  CHECK(core::otherNcclLibraries().size() == 1);
  dlclose(handle);
  CHECK_FALSE(listed(fake));
  CHECK_THAT(core::otherNcclWarning("/usr/lib/libnccl.so.2"),
             Catch::StartsWith("another NCCL library is loaded in this process: /usr/lib/libnccl.so.2 exports "
                               "ncclGetVersion too; calls bound to it run that library, not Braid"));
}

TEST_CASE("Braid warns once at init when another NCCL is loaded in its process", "[core][other-nccl][process]") {
  const char* smoke = std::getenv("BRAID_SMOKE_EXE");
  REQUIRE(smoke != nullptr);
  const std::string fake = fakeNccl();
  // Preloaded, the second library wins the program's ncclGetVersion (its 22809 shows it ran,
  // not Braid's 23007), as NVIDIA's would; the program's other calls reach Braid, which names it.
  // (Under AddressSanitizer with its runtime as a shared library, a preloaded library must not
  // come before it: the check is turned off for this run.)
  const std::string out = test::runShell("ASAN_OPTIONS=\"$ASAN_OPTIONS:verify_asan_link_order=0\" LD_PRELOAD=" + fake +
                                         " NCCL_DEBUG=WARN " + smoke + " 2>&1");
  CHECK_THAT(out, Catch::Contains("smoke: version 22809"));
  CHECK_THAT(out, Catch::Contains("NCCL WARN another NCCL library is loaded in this process: " + fake +
                                  " exports ncclGetVersion too"));
  // Once a process, however many calls follow.
  const size_t first = out.find("another NCCL library");
  CHECK(out.find("another NCCL library", first + 1) == std::string::npos);
  // Without it, no such warning.
  CHECK_THAT(test::runShell(std::string("NCCL_DEBUG=WARN ") + smoke + " 2>&1"),
             !Catch::Contains("another NCCL library"));
}
