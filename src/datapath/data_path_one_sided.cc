// The data path's part in one-sided operations: their waits on the host backend (puts and
// signals need no help from it there: comm/signals.h, one copy and a counter's release-increment
// by the caller), and the device that runs all three on the CUDA backend.
#include "kernels/platform.h"
#include "datapath/data_path.h"
#include "core/status.h"

namespace braid::datapath {

void DataPath::waitOneSided(const char* call, int peer, const std::function<bool()>& arrived) {
  if (arrived()) return;  // (the common case of a signal that came first: no watchdog round trip)
  Watchdog::Operation waiting(*watchdog_, kernels::OpSignature{}, call, 1);
  // Channel 0's status says whom the wait is for: a peer process that exits fails it within the
  // watchdog's short grace, and the hang report names the peer.
  kernels::ChannelStatus& status = statuses_[0];
  kernels::storeRelaxed(&status.waitPeer, static_cast<int32_t>(peer));
  kernels::storeRelease(&status.waitKind, static_cast<uint32_t>(kernels::kWaitData));
  struct Done {
    kernels::ChannelStatus& status;
    ~Done() { kernels::storeRelease(&status.waitKind, static_cast<uint32_t>(kernels::kWaitNone)); }
  } done{status};
  if (kernels::waitUntil([&] { return arrived(); }, abort_) == kernels::WaitResult::kAborted)
    failAborted(call);
}

runtime::Device& DataPath::oneSidedDevice(void* stream, const char* call) {
  if (device_ == nullptr) fail(ncclInternalError, "%s: a one-sided call on the device of a host-backend rank", call);
  RelaxedCapture relaxed(device_.get());
  device_->checkStream(stream, localDeviceRanks_, call);
  return *device_;
}

}  // namespace braid::datapath
