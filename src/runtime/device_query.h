// What CUDA devices this process can see. Answers 0 (with the reason) on a build without
// CUDA, without a driver, or without devices: none of these is an error for Braid.
#pragma once

#include <string>

#include "braid_config.h"

namespace braid::runtime {

struct DeviceCount {
  int count = 0;
  std::string note;  ///< why the count is 0, or the runtime's own words
};

#if BRAID_HAVE_CUDA
/// Asks the (statically linked) CUDA runtime.
DeviceCount cudaDevices();
#else
inline DeviceCount cudaDevices() { return {0, "Braid was built without CUDA"}; }
#endif

}  // namespace braid::runtime
