// Whether an NVIDIA driver is installed at all. The CUDA runtime answers "CUDA driver version is
// insufficient for CUDA runtime version" both for an old driver and for none, which sent a
// user without a GPU looking for a driver upgrade; the user-facing texts say which it is.
#pragma once

#include <string>

namespace braid::runtime {

/// The driver's library (libcuda.so.1, or driverLibrary for tests) can be loaded.
bool nvidiaDriverPresent(const char* driverLibrary = "libcuda.so.1");

/// Why the CUDA runtime found no device, in the user's words: "no NVIDIA driver found ..."
/// where the driver's library cannot be loaded, else the runtime's own text.
std::string deviceQueryFailure(const std::string& runtimeText, const char* driverLibrary = "libcuda.so.1");

}  // namespace braid::runtime
