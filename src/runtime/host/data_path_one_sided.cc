// The data path's part in one-sided operations: their waits. Puts and signals need no help
// from it (comm/signals.h: one copy and a counter's release-increment by the caller).
#include "kernels/platform.h"
#include "runtime/host/data_path.h"

namespace braid::runtime::host {

void DataPath::waitOneSided(const char* call, const std::function<bool()>& arrived) {
  if (arrived()) return;  // (the common case of a signal that came first: no watchdog round trip)
  Watchdog::Operation waiting(*watchdog_, kernels::OpSignature{}, call, 0);
  if (kernels::waitUntil([&] { return arrived(); }, abort_) == kernels::WaitResult::kAborted) failAborted(call);
}

}  // namespace braid::runtime::host
