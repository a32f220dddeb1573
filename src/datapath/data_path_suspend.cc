// A suspended communicator's memory (ncclCommSuspend, ncclCommMemStats): what of the data path
// can be given back while it is idle, and giving it back. transport/suspend.h says which FIFO
// memory that is, and why the rest stays.
#include "core/log.h"
#include "datapath/data_path.h"
#include "transport/suspend.h"

namespace braid::datapath {

DataPath::MemoryUse DataPath::memoryUse() const {
  const transport::FifoFootprint fifos = transport::fifoFootprint(connector_);
  MemoryUse use;
  use.releasable = fifos.releasable + (device_ != nullptr ? device_->scratchBytes() : scratch_.mappedBytes());
  use.persistent = fifos.persistent;
  return use;
}

uint64_t DataPath::releaseMemory() {
  uint64_t released = transport::releaseSlots(connector_);
  if (device_ != nullptr) {
    released += device_->scratchBytes();
    device_->releaseScratch();
  } else {
    released += scratch_.mappedBytes();
    scratch_.drop();
  }
  BRAID_INFO(log::kAlloc, "rank %d: suspended: %llu bytes of FIFO slots and scratch given back", rank_,
             static_cast<unsigned long long>(released));
  return released;
}

}  // namespace braid::datapath
