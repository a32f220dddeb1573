#include "runtime/device_query.h"

#include <cuda_runtime.h>

#include "runtime/driver_presence.h"

namespace braid::runtime {

DeviceCount cudaDevices() {
  int count = 0;  // left unwritten by the runtime when no driver is present
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return {0, deviceQueryFailure(cudaGetErrorString(err))};
  }
  return {count, count == 0 ? "no CUDA device" : ""};
}

}  // namespace braid::runtime
