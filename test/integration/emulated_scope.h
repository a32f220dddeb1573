// What the tests on the emulated device share (emulated_device_test.cc, emulated_rma_test.cc):
// the device installed for the communicators a test makes, the ranks' streams, and a rank's
// stream synchronisation.
#pragma once

#include <cstdint>
#include <memory>

#include "comm/communicator.h"
#include "comm/init.h"
#include "datapath/data_path.h"
#include "integration/emulated_device.h"

namespace braid::test {

/// The emulated device for every communicator created while it lives.
using Emulated = EmulatedDeviceScope;

/// A stream of the rank's own (the emulated device orders launches itself; the pointer only
/// has to differ between ranks of one process, as real streams would).
inline cudaStream_t streamOf(int rank) {
  return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(0x1000 + 16 * rank));
}

/// Waits for what the rank has enqueued (what cudaStreamSynchronize would do).
inline void sync(ncclComm_t comm) { comm->dataPath().synchronize(); }

}  // namespace braid::test
