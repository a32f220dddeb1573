#include "runtime/host/slot_prefault.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

namespace braid::runtime::host {

namespace {

#ifndef MADV_POPULATE_WRITE
constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14; older kernels answer EINVAL, and nothing changes
#endif

/// Maps [begin, begin + bytes) writable, whole pages around it.
void populate(char* begin, uint64_t bytes) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = reinterpret_cast<uintptr_t>(begin) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(begin) + bytes + page - 1) & ~(page - 1);
  madvise(reinterpret_cast<void*>(start), end - start, MADV_POPULATE_WRITE);  // (a failure leaves faults on use)
}

}  // namespace

void SlotPrefault::cover(const kernels::ConnHandle& conn, kernels::Proto proto, uint64_t bytes) {
  char* slots = nullptr;
  uint64_t slotBytes = 0, reach = 0, stride = 0;
  switch (proto) {
    case kernels::Proto::kSimple:
      slots = conn.simple;
      slotBytes = conn.simpleStepBytes;
      stride = conn.simpleStride;
      reach = bytes;
      break;
    case kernels::Proto::kLL:  // 8 bytes of data a 16-byte line
      slots = reinterpret_cast<char*>(conn.ll);
      slotBytes = static_cast<uint64_t>(conn.llStepLines) * sizeof(kernels::LLLine);
      reach = (bytes + 7) / 8 * sizeof(kernels::LLLine);
      break;
    default:  // LL128 (120 bytes of data a 128-byte line)
      slots = reinterpret_cast<char*>(conn.ll128);
      slotBytes = static_cast<uint64_t>(conn.ll128StepLines) * sizeof(kernels::LL128Line);
      reach = (bytes + 119) / 120 * sizeof(kernels::LL128Line);
      break;
  }
  if (slots == nullptr || slotBytes == 0 || conn.slotsShared != 0) return;
  if (stride == 0) stride = slotBytes;  // (LL, LL128: slots back to back)
  reach = std::min(reach, slotBytes);
  uint64_t& done = covered_[slots];
  if (reach <= done) return;
  if (reach == slotBytes) {
    populate(slots, stride * (kernels::kSteps - 1) + slotBytes);
  } else {
    for (int s = 0; s < kernels::kSteps; ++s) populate(slots + s * stride + done, reach - done);
  }
  done = reach;
}

}  // namespace braid::runtime::host
