// The runtime's CUDA entry points in a build without CUDA: no device is ever usable.
#include "core/status.h"
#include "runtime/device.h"

namespace braid::runtime {

std::unique_ptr<Device> openCudaDevice(int ordinal, int) {
  fail(ncclInvalidUsage, "CUDA device %d: Braid was built without CUDA", ordinal);
}

int currentCudaDevice(const char** why) {
  if (why != nullptr) *why = "Braid was built without CUDA";
  return -1;
}

int64_t cudaBusId(int) { return -1; }

void* allocateDeviceMemory(size_t) { fail(ncclInvalidUsage, "device memory: Braid was built without CUDA"); }
void freeDeviceMemory(void*) {}

}  // namespace braid::runtime
