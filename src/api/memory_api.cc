// Memory allocation, buffer registration and symmetric windows.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include <mutex>
#include <map>

#include "api/api.h"
#include "comm/communicator.h"
#include "comm/init.h"
#include "group/group.h"
#include "datapath/data_path.h"
#include "datapath/one_sided_relay.h"
#include "bootstrap/bootstrap.h"
#include "core/log.h"
#include "core/memory_files.h"
#include "core/process.h"
#include "runtime/device.h"
#include "transport/net/ib/one_sided_verbs.h"
#include "transport/net/one_sided_links.h"
#include "transport/net/plugin/one_sided_plugin.h"

using namespace braid;

namespace {


/// What ncclMemAlloc handed out (true: device memory), so ncclMemFree can refuse anything else
/// and free each kind its own way.
struct HostAllocations {
  std::mutex mutex;
  std::map<void*, bool> live;
};
HostAllocations& allocations() {
  static HostAllocations* a = new HostAllocations();  // never destroyed: frees may come during exit
  return *a;
}

}  // namespace

BRAID_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size);
ncclResult_t pncclMemAlloc(void** ptr, size_t size) {
  return api::guarded("ncclMemAlloc", nullptr, [&] {
    api::requireNonNull(ptr, "ptr");
    if (size == 0) fail(ncclInvalidArgument, "size is 0");
    void* p = nullptr;
    // The CUDA backend where the library would choose it for a new rank on this thread: device
    // memory of the current device. Else page-aligned host memory, in whole pages.
    const bool onDevice = comm::deviceOfNewRank(comm::InitSettings::fromParams(), -1) >= 0;
    if (onDevice) {
      p = runtime::allocateDeviceMemory(size);
    } else {  // in a memory file: a window on it reaches the other processes of this host
      p = memfiles::allocate(size);
    }
    std::lock_guard<std::mutex> lock(allocations().mutex);
    allocations().live[p] = onDevice;
    *ptr = p;
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclMemFree, void* ptr);
ncclResult_t pncclMemFree(void* ptr) {
  return api::guarded("ncclMemFree", nullptr, [&] {
    if (ptr == nullptr) return ncclSuccess;  // freeing NULL is a no-op
    bool onDevice = false;
    {
      std::lock_guard<std::mutex> lock(allocations().mutex);
      auto it = allocations().live.find(ptr);
      if (it == allocations().live.end()) fail(ncclInvalidArgument, "ptr %p was not allocated by ncclMemAlloc", ptr);
      onDevice = it->second;
      allocations().live.erase(it);
    }
    if (onDevice) {
      runtime::freeDeviceMemory(ptr);
    } else {
      memfiles::release(ptr);
    }
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size, void** handle);
ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  return api::guarded("ncclCommRegister", comm, [&] {
    Communicator& c = communicatorFrom(comm);
    api::requireNonNull(handle, "handle");
    if (buff == nullptr && size > 0) fail(ncclInvalidArgument, "buff is NULL with size %zu", size);
    *handle = c.registrations().add(buff, size);
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle);
ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle) {
  return api::guarded("ncclCommDeregister", comm, [&] {
    Communicator& c = communicatorFrom(comm);
    const RegistrationTable::Entry ended = c.registrations().remove(handle);
    if (c.hasDataPath()) c.dataPath().registrationEnded(ended.buffer, ended.size);
    return ncclSuccess;
  });
}

namespace {

/// One rank's side of a window registration, as every rank sees it (bootstrap allgather).
struct WindowClaim {
  uint64_t size;
  int32_t flags;
  int32_t problem;    ///< 0, or what this rank found wrong with its own arguments (WindowProblem)
  uint64_t buffer;    ///< the address, meaningful to ranks of the same process
  uint64_t processId; ///< process::randomId() of the rank's process
  uint64_t signals;   ///< its one-sided counters (comm/signals.h), for ranks of the same process
  uint64_t host;      ///< its host (hostHash)
  fds::Offer memory;  ///< its buffer's memory file for processes of its host (token 0: not shareable);
                      ///< on the CUDA backend its ncclMemAlloc allocation (Device::exportBuffer)
  uint64_t memoryOffset;  ///< the buffer's offset in that file
  uint64_t memoryBytes;   ///< the allocation's size (the CUDA backend's: the whole of it is mapped)
  fds::Offer signalsOffer;  ///< its counters' memory file
  uint64_t windowId;        ///< its id of the window, which puts over a link name (random)
  int32_t oneSidedNet;      ///< its BRAID_ONE_SIDED_NET
  int32_t interHost;        ///< its network transport (transport::Kind) where it may need links, else -1
};

/// Which ranks this rank's one-sided operations reach over links (every rank computes the same
/// pairs from the claims): ranks on other hosts, and with BRAID_ONE_SIDED_NET on either side
/// every other rank. Opens the links' listeners at the first registration that needs any (a
/// collective step: every rank sees the same claims, so all of them take it or none); each
/// link is connected on its first use.
std::vector<bool> linkPeers(Communicator& c, const std::vector<WindowClaim>& claims) {
  const int n = c.identity().nRanks, me = c.identity().rank;
  std::vector<bool> linked(n, false);
  if (transport::onesided::Carrier* links = c.oneSidedLinks()) {
    for (int r = 0; r < n; ++r) linked[r] = links->linked(r);
    return linked;
  }
  auto needsLink = [&](int a, int b) {
    return a != b && (claims[a].host != claims[b].host || claims[a].oneSidedNet != 0 || claims[b].oneSidedNet != 0);
  };
  bool anyPair = false;
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n && !anyPair; ++b) anyPair = needsLink(a, b);
  }
  if (!anyPair) return linked;
  for (int r = 0; r < n; ++r) linked[r] = needsLink(me, r);
  comm::SignalBoard& board = c.signals();
  auto arrive = [&board](int from, int ctx) { board.arrive(from, ctx); };
  const int contexts = std::max(1, c.config().numRmaCtx);
  // The net plugin where every rank's network is one; verbs (RDMA into the peers' windows)
  // where every rank's is verbs, as their FIFO connections' would be; else TCP links.
  auto everyRankOver = [&claims](transport::Kind kind) {
    return std::all_of(claims.begin(), claims.end(),
                       [kind](const WindowClaim& w) { return w.interHost == static_cast<int32_t>(kind); });
  };
  // On the CUDA backend not verbs: its RDMA writes would land in the device window unseen, with
  // no moment to copy them from a host mirror (datapath/one_sided_relay.h); TCP links there.
  const bool onDevice = c.dataPath().onDevice();
  std::unique_ptr<transport::onesided::Carrier> carrier;
  if (everyRankOver(transport::Kind::kPlugin)) {
    std::vector<int> devices(n, 0);  // (each peer's comms on the device its send/recv connections use)
    for (int r = 0; r < n; ++r) devices[r] = linked[r] ? c.dataPath().oneSidedPluginDevice(r) : 0;
    auto plugin = std::make_unique<transport::onesided::PluginCarrier>(
        me, n, contexts, c.identity().commHash, c.abortWord(), c.dataPath().netPlugin(), std::move(devices), arrive);
    plugin->open(c.bootstrap(), linked, c.bootstrap().peerAddress(me), c.bootstrap().timeout());
    carrier = std::move(plugin);
  } else if (everyRankOver(transport::Kind::kIb) && !onDevice) {
    transport::onesided::VerbsSetup setup{me, n, contexts, c.identity().commHash, c.abortWord(),
                                          c.dataPath().oneSidedIbSettings(), arrive};
    carrier = transport::onesided::connectVerbs(setup, c.bootstrap(), linked, c.bootstrap().peerAddress(me),
                                                c.bootstrap().timeout());
  } else {
    if (everyRankOver(transport::Kind::kIb)) {
      BRAID_INFO(log::kNet, "one-sided: the CUDA backend carries one-sided operations across hosts over TCP links, "
                 "not verbs (an RDMA write into a device window would need GPUDirect RDMA)");
    }
    auto links = std::make_unique<transport::onesided::Links>(me, n, contexts, c.identity().commHash, c.abortWord(), arrive);
    links->open(c.bootstrap(), linked, c.bootstrap().peerAddress(me), c.config().maxP2pPeers, c.bootstrap().timeout());
    carrier = std::move(links);
  }
  if (onDevice) {  // (stream-ordered puts and landing into device windows, over the same carrier)
    Communicator* raw = &c;
    carrier = std::make_unique<datapath::OneSidedRelay>(std::move(carrier), c.dataPath().device(), c.abortWord(),
                                                        [raw](ncclResult_t code, const std::string& why) {
                                                          raw->setLastError(why);
                                                          raw->setAsyncError(code);
                                                        });
  }
  c.adoptOneSidedLinks(std::move(carrier));
  return linked;
}

/// What a window maps of other processes' memory, unmapped when the window's last entry goes.
struct PeerMappings {
  std::vector<std::unique_ptr<memfiles::Mapping>> files;  // the host backend's
  struct Imported {  // the CUDA backend's: a peer's allocation, mapped whole
    runtime::Device* device;
    void* base;
  };
  std::vector<Imported> allocations;
  ~PeerMappings() {
    for (const Imported& a : allocations) a.device->closeBuffer(a.base);
  }
};

/// Maps the peer's ncclMemAlloc allocation that `claim` offers (the CUDA backend) and returns the
/// address of its window there. (The windows of a communicator go before its device.)
void* importDeviceWindow(runtime::Device& device, const WindowClaim& claim, PeerMappings& mappings) {
  void* base = device.importBuffer(claim.memory, claim.memoryBytes);
  mappings.allocations.push_back({&device, base});
  return static_cast<char*>(base) + claim.memoryOffset;
}

/// Makes peers' parts of a window (and their signal counters) reachable from this rank: the
/// addresses of ranks of this process, mappings of the other processes of this host. A mapping
/// that fails leaves that peer unreached (its calls say so) rather than failing the
/// registration, so that every rank reaches the barrier after it.
void reachPeers(Communicator& c, const std::vector<WindowClaim>& claims, const std::vector<bool>& linked,
                WindowEntry& entry) {
  const int n = c.identity().nRanks, me = c.identity().rank;
  auto mappings = std::make_shared<PeerMappings>();
  entry.peerBuffers.assign(n, nullptr);
  entry.peerReach.assign(n, WindowReach::kMapped);
  for (int r = 0; r < n; ++r) {
    if (linked[r]) {
      entry.peerReach[r] = WindowReach::kNetwork;
      continue;
    }
    if (claims[r].processId == claims[me].processId) {  // threads of one process address each other
      entry.peerBuffers[r] = reinterpret_cast<void*>(claims[r].buffer);
      c.signals().learn(r, claims[r].signals);
      continue;
    }
    if (claims[r].host != claims[me].host) {
      entry.peerReach[r] = WindowReach::kOtherHost;
      continue;
    }
    try {
      if (!c.signals().reaches(r)) c.signals().map(r, claims[r].signalsOffer);
      if (claims[r].memory.token.empty()) {
        entry.peerReach[r] = WindowReach::kNotShareable;
        continue;
      }
      if (c.dataPath().onDevice()) {
        entry.peerBuffers[r] = importDeviceWindow(c.dataPath().device(), claims[r], *mappings);
      } else {
        mappings->files.push_back(
            std::make_unique<memfiles::Mapping>(claims[r].memory, claims[r].memoryOffset, entry.size));
        entry.peerBuffers[r] = mappings->files.back()->data();
      }
    } catch (const Error& e) {
      BRAID_WARN("ncclCommWindowRegister: rank %d cannot map rank %d's memory (%s); one-sided calls to it will fail",
                 me, r, e.what());
      entry.peerReach[r] = WindowReach::kOtherHost;
    }
  }
  entry.peerMappings = mappings;
}

/// This rank's network transport when its one-sided calls may need a carrier (peers on other
/// hosts, or BRAID_ONE_SIDED_NET) and none was made yet; else -1. One whose NCCL_NET cannot
/// run counts as -1: its FIFO connections say why.
int32_t interHostKind(Communicator& c) {
  if (c.oneSidedLinks() != nullptr) return -1;
  bool spans = c.oneSidedOverNetwork();
  for (int r = 0; r < c.identity().nRanks && !spans; ++r) spans = c.dataPath().hostOf(r) != c.dataPath().hostOf(c.identity().rank);
  if (!spans) return -1;
  try {
    return static_cast<int32_t>(c.dataPath().interHostKind());
  } catch (const Error&) {
    return -1;
  }
}

enum WindowProblem : int32_t { kWindowOk = 0, kWindowNull, kWindowMisaligned, kWindowFlags, kWindowUnreachable };

const char* windowProblemText(int32_t problem) {
  switch (problem) {
    case kWindowNull: return "a NULL buffer or a size of 0";
    case kWindowMisaligned: return "a buffer not aligned to NCCL_WIN_REQUIRED_ALIGNMENT";
    case kWindowFlags: return "unknown winFlags";
    default: return "memory its device cannot reach";
  }
}

/// The collective part of ncclCommWindowRegister: every rank says what it registers (and what
/// it found wrong with its own arguments, so that a refused rank fails every rank instead of
/// leaving them waiting); all must agree on size and flags.
void registerWindow(Communicator& c, void* buff, size_t size, int flags, int32_t problem, const std::string& why,
                    ncclWindow_t* win) {
  const int n = c.identity().nRanks, me = c.identity().rank;
  std::vector<WindowClaim> claims(n);
  WindowClaim& mine = claims[me];
  mine = WindowClaim{size, flags, problem, reinterpret_cast<uint64_t>(buff), process::randomId(),
                     c.signals().address(), c.dataPath().hostOf(me), {}, 0, 0, c.signals().offer(),
                     process::random64(), 0, -1};
  mine.oneSidedNet = c.oneSidedOverNetwork() ? 1 : 0;
  mine.interHost = problem == kWindowOk ? interHostKind(c) : -1;
  size_t offset = 0;
  if (problem == kWindowOk && !c.dataPath().onDevice() && memfiles::offer(buff, size, &mine.memory, &offset)) {
    mine.memoryOffset = offset;
  }
  // The CUDA backend offers the allocation holding the window (once per allocation, for as long
  // as it lives: not withdrawn below). Memory not from ncclMemAlloc has no such offer.
  runtime::Device::BufferExport exported{};
  const bool deviceOffer =
      problem == kWindowOk && c.dataPath().onDevice() && c.dataPath().device().exportBuffer(buff, size, &exported);
  if (deviceOffer) {
    mine.memory = exported.offer;
    mine.memoryOffset = static_cast<uint64_t>(static_cast<const char*>(buff) - exported.base);
    mine.memoryBytes = exported.bytes;
  }
  struct Withdraw {  // this rank's offers, once every peer has mapped them (the barrier below)
    fds::Token memory, signals;
    ~Withdraw() {
      if (!memory.empty()) fds::withdraw(memory);
      if (!signals.empty()) fds::withdraw(signals);
    }
  } withdraw{deviceOffer ? fds::Token{} : mine.memory.token, mine.signalsOffer.token};
  c.bootstrap().allGather(claims.data(), sizeof(WindowClaim));
  if (problem != kWindowOk) fail(ncclInvalidArgument, "%s", why.c_str());
  for (int r = 0; r < n; ++r) {
    if (claims[r].problem != kWindowOk) {
      fail(ncclInvalidUsage, "rank %d's window registration was refused (%s); no rank registers this window", r,
           windowProblemText(claims[r].problem));
    }
    if (claims[r].size != size || claims[r].flags != flags) {
      fail(ncclInvalidUsage, "rank %d registers a window of %zu bytes with winFlags %#x but rank %d one of %llu bytes "
                             "with winFlags %#x; every rank must register the same size and flags", me, size, flags,
           r, static_cast<unsigned long long>(claims[r].size), static_cast<unsigned>(claims[r].flags));
    }
  }
  WindowEntry entry;
  entry.buffer = buff;
  entry.size = size;
  entry.flags = flags;
  entry.rank = me;
  entry.localRank = c.identity().localRank;
  entry.localRanks = c.identity().localRanks;
  entry.id = mine.windowId;
  for (const WindowClaim& claim : claims) entry.peerIds.push_back(claim.windowId);
  reachPeers(c, claims, linkPeers(c, claims), entry);
  transport::onesided::Carrier* links = c.oneSidedLinks();
  if (links != nullptr) links->publishWindow(entry.id, buff, size, {});
  try {
    c.bootstrap().barrier();  // (every peer has mapped this rank's offers, and published its window: puts may come)
  } catch (...) {
    if (links != nullptr) links->withdrawWindow(entry.id);
    throw;
  }
  *win = c.windows().add(entry);
}

}  // namespace

BRAID_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
          int winFlags);
ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags) {
  return api::guarded("ncclCommWindowRegister", comm, [&]() -> ncclResult_t {
    Communicator& c = communicatorFrom(comm);
    api::requireNonNull(win, "win");
    *win = nullptr;
    if (!c.hasBootstrap()) fail(ncclInvalidUsage, "the communicator has not completed init");
    // Local faults still take part in the exchange (see registerWindow).
    int32_t problem = kWindowOk;
    std::string why;
    char text[256];
    if (buff == nullptr || size == 0) {
      problem = kWindowNull;
      std::snprintf(text, sizeof text, "buff is %p and size %zu; a window needs memory", buff, size);
    } else if (reinterpret_cast<uintptr_t>(buff) % NCCL_WIN_REQUIRED_ALIGNMENT != 0) {
      problem = kWindowMisaligned;
      std::snprintf(text, sizeof text, "buff %p is not aligned to NCCL_WIN_REQUIRED_ALIGNMENT (%d bytes); memory from "
                    "ncclMemAlloc is", buff, NCCL_WIN_REQUIRED_ALIGNMENT);
    } else if ((winFlags & ~(NCCL_WIN_DEFAULT | NCCL_WIN_COLL_SYMMETRIC | NCCL_WIN_STRICT_ORDERING)) != 0) {
      problem = kWindowFlags;
      std::snprintf(text, sizeof text, "winFlags is %#x; known flags are NCCL_WIN_DEFAULT, NCCL_WIN_COLL_SYMMETRIC and "
                    "NCCL_WIN_STRICT_ORDERING",
                    static_cast<unsigned>(winFlags));
    } else {
      try {
        c.dataPath().checkBuffer(buff, "buff", "ncclCommWindowRegister");
      } catch (const Error& e) {
        problem = kWindowUnreachable;
        std::snprintf(text, sizeof text, "%s", e.what());
      }
    }
    if (problem != kWindowOk) why = text;
    Communicator* raw = &c;
    auto job = [raw, buff, size, winFlags, problem, why, win] { registerWindow(*raw, buff, size, winFlags, problem, why, win); };
    if (group::active()) {  // with the group's other collective calls, at its end
      group::defer(&c, job);
      return ncclSuccess;
    }
    if (!c.config().blocking) return c.run(job, /*background=*/true);
    CallGuard inUse(c);
    job();
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win);
ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return api::guarded("ncclCommWindowDeregister", comm, [&] {
    Communicator& c = communicatorFrom(comm);
    if (win == nullptr) fail(ncclInvalidArgument, "win is NULL");
    const uint64_t id = c.windows().find(win).id;
    c.windows().remove(win);
    // (on return no put over a link writes into the memory any more)
    if (transport::onesided::Carrier* links = c.oneSidedLinks()) links->withdrawWindow(id);
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclWinGetUserPtr, ncclComm_t comm, ncclWindow_t win, void** outUserPtr);
ncclResult_t pncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr) {
  return api::guarded("ncclWinGetUserPtr", comm, [&] {
    Communicator& c = communicatorFrom(comm);
    api::requireNonNull(win, "win");
    api::requireNonNull(outUserPtr, "outUserPtr");
    *outUserPtr = c.windows().find(win).buffer;
    return ncclSuccess;
  });
}
