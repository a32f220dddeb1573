// What the CUDA backend's one-sided operations across hosts need beside the stream
// (datapath/one_sided_relay.h): pinned host staging, and copies into device memory that a
// proxy thread makes without waiting for any user stream.
#pragma once

#include <cstddef>
#include <memory>

#include "runtime/device.h"

namespace braid::runtime::cuda {

/// Device::allocatePinned: cudaHostAlloc'd memory (portable: every device copies it at full
/// speed), freed by the returned pointer's deleter. Throws ncclUnhandledCudaError.
std::shared_ptr<char> allocatePinnedHost(size_t bytes);

/// Device::hostCopier for device `ordinal`: owns a non-blocking stream of its own.
std::unique_ptr<Device::HostCopier> makeHostCopier(int ordinal);

}  // namespace braid::runtime::cuda
