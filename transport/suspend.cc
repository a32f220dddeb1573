#include "transport/suspend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <type_traits>

#include "bootstrap/bootstrap.h"
#include "core/log.h"
#include "core/status.h"

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
/// in memory whose address the allocator keeps (its importer, if any, lets go at the same time).
bool deviceReleasable(const Connector::End& end, FifoAllocator* device, const FifoMemory::DeviceData& d) {
  const bool kindReleases = end.kind == Kind::kP2p || end.kind == Kind::kShm;
  return kindReleases && end.memory->countersOnDevice() && device->dataUse(d.at, d.bytes).suspendable;
}

/// Whether `end` is a sender's mapping of a peer process's slots in its GPU memory.
bool importsPeerSlots(const Connector::End& end) {
  return end.kind == Kind::kShm && end.isSend && end.memory->slotsShared();
}

/// Whether suspend gives back a sender's credit line (FifoMemory::creditData): a thread peer's
/// (p2p), whose receiver reaches it at the same address in this process, or one exported to a
/// receiver process (shm), which lets go of its mapping at the same suspend and is sent the new
/// handle at resume, as for the receiver's slots the other way round.
bool creditReleasable(const Connector::End& end, FifoAllocator* device, const FifoMemory::DeviceData& credit) {
  return credit.at != nullptr && (end.kind == Kind::kP2p || end.kind == Kind::kShm) &&
         device->dataUse(credit.at, credit.bytes).suspendable;
}

/// A ResumeHandle's link for the credit line of FIFO `link`.
int32_t creditLink(int link) { return kCreditLinkBase + link; }

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
      const uint64_t bytes = device->dataUse(credit.at, credit.bytes).bytes;
      (creditReleasable(end, device, credit) ? f.releasable : f.persistent) += bytes;
    }
  });
  return f;
}

uint64_t releaseDeviceSlots(const Connector& connector, FifoAllocator* device, std::vector<SuspendedSlots>* suspended) {
  uint64_t released = 0;
  // The importers' mappings first (as NCCL's order): the owner's memory is freed once both are gone.
  connector.forEachEnd([&](const Connector::End& end) {
    if (!importsPeerSlots(end)) return;
    const FifoMemory::DeviceData d = end.memory->deviceData();
    if (d.at == nullptr || !device->suspendImport(d.at)) return;
    suspended->push_back(SuspendedSlots{d.at, end.peer, end.link, true, true, d.bytes});
  });
  connector.forEachEnd([&](const Connector::End& end) {  // (a receiver's mapping of its sender's credit line)
    const FifoMemory::DeviceData c = end.memory->importedCreditData();
    if (c.at == nullptr || !device->suspendImport(c.at)) return;
    suspended->push_back(SuspendedSlots{c.at, end.peer, creditLink(end.link), true, true, c.bytes});
  });
  // keep: the bytes that carry over (counters), written back at resume; shared: the peer maps it.
  auto suspend = [&](const Connector::End& end, int link, const FifoMemory::DeviceData& d, uint64_t keep,
                     bool shared) {
    const uint64_t bytes = device->dataUse(d.at, d.bytes).bytes;
    if (!device->suspendData(d.at, keep)) return;
    suspended->push_back(SuspendedSlots{d.at, end.peer, link, false, shared, d.bytes});
    released += bytes;
  };
  connector.forEachEnd([&](const Connector::End& end) {
    const FifoMemory::DeviceData d = ownedDeviceData(end);
    if (d.at != nullptr && deviceReleasable(end, device, d)) {
      suspend(end, end.link, d, kDeviceCounterBytes, end.memory->slotsShared());
    }
    // A sender's credit line is all counter (head): it comes back as it was.
    const FifoMemory::DeviceData credit = end.memory->creditData();
    if (creditReleasable(end, device, credit)) {
      suspend(end, creditLink(end.link), credit, kCreditLineBytes, end.kind == Kind::kShm);
    }
  });
  return released;
}

/// A resume's new slot handles, one message from the owner to each peer that maps its slots.
constexpr uint32_t kResumeHandlesTag = 0x52480000;

/// This rank's own memory of `suspended` again, at its addresses; returns where it was.
std::set<char*> resumeOwnMemory(FifoAllocator* device, std::vector<SuspendedSlots>* suspended) {
  std::set<char*> resumed;
  for (auto it = suspended->begin(); it != suspended->end();) {
    if (it->imported) {
      ++it;
      continue;
    }
    device->resumeData(it->at);
    resumed.insert(it->at);
    it = suspended->erase(it);
  }
  return resumed;
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

uint64_t releaseSlots(const Connector& connector, FifoAllocator* device, std::vector<SuspendedSlots>* suspended) {
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

namespace {

/// "link 3", or "link 3's credit line" (kCreditLinkBase), for the texts.
std::string linkName(int32_t link) {
  if (link >= kCreditLinkBase) return "link " + std::to_string(link - kCreditLinkBase) + "'s credit line";
  return "link " + std::to_string(link);
}

}  // namespace

std::string checkResumeHandles(const std::vector<ResumeHandle>& got, const std::vector<int>& links,
                               const std::set<int>& letGo) {
  if (got.size() != links.size()) {
    return std::to_string(got.size()) + " entries for this rank's " + std::to_string(links.size()) + " FIFOs from it";
  }
  std::set<int> seen;
  for (const ResumeHandle& h : got) {
    if (std::find(links.begin(), links.end(), h.link) == links.end()) {
      return linkName(h.link) + " is no FIFO of this rank's from it";
    }
    if (!seen.insert(h.link).second) return linkName(h.link) + " comes twice";
    if (h.replaced > 1) return linkName(h.link) + "'s replaced flag is " + std::to_string(h.replaced);
    if ((h.replaced == 1) != (letGo.count(h.link) == 1)) {
      const char* why = h.replaced == 1 ? " has new memory, but this rank kept its mapping"
                                        : " kept its memory, but this rank let go of its mapping";
      return linkName(h.link) + why;
    }
  }
  return "";
}

void restoreSlots(const Connector& connector, FifoAllocator* device, bootstrap::Bootstrap& channel,
                  std::vector<SuspendedSlots>* suspended, const std::atomic<bool>* abortFlag) {
  const std::set<char*> resumed = resumeOwnMemory(device, suspended);
  // Each owner's entries for a peer, and the links whose entries each importer expects (every
  // FIFO whose slots the owner keeps in its GPU memory for it: the same set at both ends).
  std::map<int, std::vector<ResumeHandle>> outgoing;
  std::map<int, std::vector<int>> expected;
  // An owner's memory the peer maps, as one entry: new (with a handle) where it was resumed.
  auto offer = [&](const Connector::End& end, int32_t link, char* at, const char* what) {
    ResumeHandle h{};
    h.link = link;
    h.replaced = resumed.count(at) != 0 ? 1 : 0;
    if (h.replaced != 0 && !device->exportData(at, h.handle)) {
      fail(ncclSystemError, "resume: the %s rank %d maps (link %d) are new, but no handle for them could be made", what,
           end.peer, end.link);
    }
    outgoing[end.peer].push_back(h);
  };
  connector.forEachEnd([&](const Connector::End& end) {
    if (end.kind != Kind::kShm) return;
    // The credit line goes from the sender (its owner) to the receiver (which maps it).
    if (end.isSend && end.memory->creditData().at != nullptr) {
      offer(end, creditLink(end.link), end.memory->creditData().at, "credit line");
    } else if (!end.isSend && end.memory->importedCreditData().at != nullptr) {
      expected[end.peer].push_back(creditLink(end.link));
    }
    if (!end.memory->slotsShared()) return;
    if (end.isSend) {
      expected[end.peer].push_back(end.link);
    } else {
      offer(end, end.link, end.memory->deviceData().at, "FIFO slots");
    }
  });
  for (const auto& [peer, entries] : outgoing) {  // (all sent before any is awaited: no rank waits on another's send)
    try {
      channel.send(peer, kResumeHandlesTag, entries.data(), entries.size() * sizeof(ResumeHandle), abortFlag);
    } catch (const Error& e) {
      fail(e.code(), "resume: cannot send rank %d the new handles of the FIFO slots it maps: %s", peer, e.what());
    }
  }
  for (const auto& [peer, links] : expected) {
    std::vector<ResumeHandle> got(links.size());
    try {
      channel.recv(peer, kResumeHandlesTag, got.data(), got.size() * sizeof(ResumeHandle), abortFlag);
    } catch (const Error& e) {
      fail(e.code(), "resume: rank %d did not send the new handles of its FIFO slots that this rank maps: %s", peer,
           e.what());
    }
    std::set<int> letGo;
    for (const SuspendedSlots& s : *suspended) {
      if (s.imported && s.peer == peer) letGo.insert(s.link);
    }
    const std::string wrong = checkResumeHandles(got, links, letGo);
    if (!wrong.empty()) {
      fail(ncclSystemError, "resume: refused rank %d's new FIFO slot handles: %s", peer, wrong.c_str());
    }
    for (const ResumeHandle& h : got) {
      if (h.replaced == 0) continue;
      const int from = peer;  // (clang 14 cannot capture a structured binding)
      auto it = std::find_if(suspended->begin(), suspended->end(), [&](const SuspendedSlots& s) {
        return s.imported && s.peer == from && s.link == h.link;
      });
      try {
        device->resumeImport(it->at, h.handle, it->bytes);
      } catch (const Error& e) {
        fail(e.code(), "resume: cannot map rank %d's new memory of %s: %s", peer, linkName(h.link).c_str(), e.what());
      }
      suspended->erase(it);
    }
  }
  for (const SuspendedSlots& s : *suspended) {  // (a mapping let go of, its peer's FIFO not found: a bug)
    fail(ncclInternalError, "resume: this rank's mapping of rank %d's memory of %s has no new handle", s.peer,
         linkName(s.link).c_str());
  }
}

}  // namespace braid::transport
