// Host memory that the kernels of every device of this process address: the one-sided
// operations' signal counters (comm/signals.h), which live in memory files the host maps.
// Ranks that are threads of one process pin the same boards (a rank's own, its peers'), and
// CUDA registers a range once per process: the registrations are counted, so that the
// communicator that pinned a board first can go while another rank's kernels still use it.
#pragma once

#include <cstddef>

namespace braid::runtime::cuda {

/// Pins [p, p + bytes) for every device (cudaHostRegister, portable and mapped) unless it is
/// pinned already, and counts one more holder. Throws ncclUnhandledCudaError when CUDA refuses.
void pinHost(void* p, size_t bytes);

/// One holder of p fewer; the last one unregisters it (errors ignored: the process may exit).
void unpinHost(void* p);

}  // namespace braid::runtime::cuda
