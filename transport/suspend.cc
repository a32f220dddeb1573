#include "transport/suspend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/log.h"

namespace braid::transport {

namespace {

uint64_t pageBytes() {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return page;
}

/// Whether this rank allocated `end`'s memory (else it maps the peer's).
bool owns(const Connector::End& end) {
  switch (end.kind) {
    case Kind::kP2p:
    case Kind::kShm:
      return !end.isSend;  // (the receiver allocates; the sender maps it)
    default:
      return true;  // a network end: each side has its own copy
  }
}

/// `end`'s device allocation (FifoMemory::deviceData) when this rank owns it; at == null else.
FifoMemory::DeviceData ownedDeviceData(const Connector::End& end) {
  if (!owns(end)) return {};
  return end.memory->deviceData();
}

/// Whether suspend may give `end`'s device allocation back: a thread's or a process's receiver
/// whose slots no other process maps, in memory whose address the allocator keeps.
bool deviceReleasable(const Connector::End& end, FifoAllocator* device, const FifoMemory::DeviceData& d) {
  const bool kindReleases = end.kind == Kind::kP2p || end.kind == Kind::kShm;
  return kindReleases && end.memory->countersOnDevice() && !end.memory->slotsShared() &&
         device->dataUse(d.at, d.bytes).suspendable;
}

FifoFootprint deviceFootprint(const Connector& connector, FifoAllocator* device) {
  FifoFootprint f;
  connector.forEachEnd([&](const Connector::End& end) {
    const FifoMemory::DeviceData d = ownedDeviceData(end);
    if (d.at != nullptr) {
      const uint64_t bytes = device->dataUse(d.at, d.bytes).bytes;
      (deviceReleasable(end, device, d) ? f.releasable : f.persistent) += bytes;
    }
    const FifoMemory::DeviceData credit = end.memory->creditData();  // (a sender's own)
    if (credit.at != nullptr) {
      const FifoAllocator::DataUse use = device->dataUse(credit.at, credit.bytes);
      (use.suspendable ? f.releasable : f.persistent) += use.bytes;
    }
  });
  return f;
}

uint64_t releaseDeviceSlots(const Connector& connector, FifoAllocator* device, std::vector<char*>* suspended) {
  uint64_t released = 0;
  // keep: the bytes that carry over (counters), written back at resume.
  auto suspend = [&](const FifoMemory::DeviceData& d, uint64_t keep) {
    const uint64_t bytes = device->dataUse(d.at, d.bytes).bytes;
    if (!device->suspendData(d.at, keep)) return;
    suspended->push_back(d.at);
    released += bytes;
  };
  connector.forEachEnd([&](const Connector::End& end) {
    const FifoMemory::DeviceData d = ownedDeviceData(end);
    if (d.at != nullptr && deviceReleasable(end, device, d)) suspend(d, kDeviceCounterBytes);
    // A sender's credit line is all counter (head): it comes back as it was.
    const FifoMemory::DeviceData credit = end.memory->creditData();
    if (credit.at != nullptr && device->dataUse(credit.at, credit.bytes).suspendable) suspend(credit, kCreditLineBytes);
  });
  return released;
}

}  // namespace

SlotPages releasablePages(const Connector::End& end) {
  const FifoMemory& m = *end.memory;
  const bool kindReleases = end.kind == Kind::kP2p || end.kind == Kind::kShm || end.kind == Kind::kSocket;
  if (!kindReleases || !owns(end) || end.registeredWith != nullptr || m.slotsShared()) return {};
  // Only slots that follow the control part in host memory, every protocol's after the other.
  char* slots = m.base() + fifoControlBytes();
  const FifoSizes& s = m.sizes();
  const uint64_t slotBytes = s.bytes() - fifoControlBytes();
  if (m.data() != slots || m.lineSlots() != slots + uint64_t(kernels::kSteps) * s.simpleStepBytes) return {};
  const uint64_t page = pageBytes();
  const uint64_t first = (reinterpret_cast<uintptr_t>(slots) + page - 1) / page * page;
  const uint64_t last = (reinterpret_cast<uintptr_t>(slots) + slotBytes) / page * page;
  if (last <= first) return {};
  return SlotPages{reinterpret_cast<char*>(first), last - first, end.kind == Kind::kShm};
}

bool releasePages(const SlotPages& pages) {
  return pages.bytes == 0 || madvise(pages.begin, pages.bytes, pages.shared ? MADV_REMOVE : MADV_DONTNEED) == 0;
}

FifoFootprint fifoFootprint(const Connector& connector, FifoAllocator* device) {
  if (device != nullptr) return deviceFootprint(connector, device);
  FifoFootprint f;
  connector.forEachEnd([&](const Connector::End& end) {
    if (!owns(end)) return;
    const uint64_t releasable = releasablePages(end).bytes;
    f.releasable += releasable;
    f.persistent += end.memory->sizes().bytes() - releasable;
  });
  return f;
}

uint64_t releaseSlots(const Connector& connector, FifoAllocator* device, std::vector<char*>* suspended) {
  if (device != nullptr) return releaseDeviceSlots(connector, device, suspended);
  uint64_t released = 0;
  connector.forEachEnd([&](const Connector::End& end) {
    const SlotPages pages = releasablePages(end);
    if (pages.bytes == 0) return;
    if (!releasePages(pages)) {
      BRAID_WARN("suspend: cannot release %llu bytes of FIFO slots to rank %d: %s (they stay)",
                 static_cast<unsigned long long>(pages.bytes), end.peer, std::strerror(errno));
      return;
    }
    released += pages.bytes;
  });
  return released;
}

void restoreSlots(FifoAllocator* device, std::vector<char*>* suspended) {
  while (!suspended->empty()) {
    device->resumeData(suspended->back());
    suspended->pop_back();
  }
}

}  // namespace braid::transport
