#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "runtime/driver_presence.h"
#include "test_env.h"

using namespace braid;

TEST_CASE("no NVIDIA driver is said so, not as an old driver", "[core][driver]") {
  // The runtime's text for a missing driver blames the driver's version.
  const std::string runtimeText = "CUDA driver version is insufficient for CUDA runtime version";
  CHECK(runtime::deviceQueryFailure(runtimeText, "libbraid-no-such-driver.so.1") ==
        "no NVIDIA driver found (libbraid-no-such-driver.so.1 cannot be loaded)");
  // A driver that loads (any loadable library stands in for it) keeps the runtime's words.
  CHECK(runtime::deviceQueryFailure(runtimeText, "libc.so.6") == "CUDA runtime: " + runtimeText);
  CHECK_FALSE(runtime::nvidiaDriverPresent("libbraid-no-such-driver.so.1"));
}

TEST_CASE("braid-info opens with the version, devices, backend, transports and plugins", "[tools][process]") {
  const char* info = std::getenv("BRAID_INFO_EXE");
  REQUIRE(info != nullptr);
  const std::string out = test::runShell(std::string("env -u BRAID_BACKEND NCCL_TUNER_PLUGIN=none ") + info);
  CHECK_THAT(out, Catch::StartsWith("NCCL version 2.30.7+braid"));
  CHECK_THAT(out, Catch::Contains("\nCUDA devices visible: "));
  CHECK_THAT(out, Catch::Contains("\nbackend: "));
  CHECK_THAT(out, Catch::Contains("\ntransports: threads of a process share memory"));
  CHECK_THAT(out, Catch::Contains("\nplugins (loaded at a communicator's init): net libnccl-net.so if it loads; "
                                  "tuner NCCL_TUNER_PLUGIN=none;"));
  if (!runtime::nvidiaDriverPresent()) {
    // This machine has no driver: a CUDA build says so, a build without CUDA says that instead.
    CHECK_THAT(out, Catch::Contains("CUDA devices visible: 0 - no NVIDIA driver found") ||
                        Catch::Contains("CUDA devices visible: 0 - Braid was built without CUDA"));
    CHECK_THAT(out, Catch::Contains("backend: host: communicators run on the CPU"));
  }
  // The overview comes before the table.
  const size_t table = out.find("\nBRAID_BACKEND ");
  REQUIRE(table != std::string::npos);
  CHECK(out.find("plugins (") < table);
}
