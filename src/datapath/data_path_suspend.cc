// A suspended communicator's memory (ncclCommSuspend, ncclCommMemStats): what of the data path
// can be given back while it is idle, and giving it back. transport/suspend.h says which FIFO
// memory that is, and why the rest stays.
#include "core/log.h"
#include "datapath/data_path.h"
#include "transport/suspend.h"

namespace braid::datapath {

namespace {

/// The allocator of the device's FIFO memory, or null on the host backend.
transport::FifoAllocator* deviceAllocator(runtime::Device* device) {
  return device != nullptr ? device->fifoAllocator() : nullptr;
}

}  // namespace

DataPath::MemoryUse DataPath::memoryUse() const {
  const transport::FifoFootprint fifos = transport::fifoFootprint(connector_, deviceAllocator(device_.get()));
  MemoryUse use;
  use.releasable = fifos.releasable + (device_ != nullptr ? device_->scratchBytes() : scratch_.mappedBytes());
  use.persistent = fifos.persistent;
  return use;
}

uint64_t DataPath::releaseMemory() {
  uint64_t released = transport::releaseSlots(connector_, deviceAllocator(device_.get()), &suspendedFifos_);
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

void DataPath::restoreMemory(bootstrap::Bootstrap& channel, const std::atomic<bool>* abortFlag) {
  if (device_ == nullptr) return;  // (the host backend's pages come back on first touch)
  device_->restoreScratch();
  const size_t count = suspendedFifos_.size();
  // (also where this rank let go of nothing: its peers' messages are awaited, and it sends its own)
  transport::restoreSlots(connector_, deviceAllocator(device_.get()), channel, &suspendedFifos_, abortFlag);
  BRAID_INFO(log::kAlloc, "rank %d: resumed: %zu FIFO allocations of device memory (its own, or its mappings of a "
             "peer's) mapped again", rank_, count);
}

}  // namespace braid::datapath
