#include "integration/emulated_device.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>

#include "comm/config.h"
#include "comm/init.h"
#include "core/fd_exchange.h"
#include "core/status.h"
#include "kernels/algorithms/send_recv.h"
#include "kernels/launch_args.h"
#include "plugin/profiler_plugin.h"
#include "runtime/host/kernel_table.h"
#include "runtime/host/peer_loop.h"
#include "transport/fifo.h"

namespace braid::test {

namespace {

/// The emulated device's memory that other processes map, as cuMem memory is on a GPU: a
/// memory file mapped here, offered to other processes (core/fd_exchange.h) at its first
/// export. Suspend plays cuMem's: the owner unmaps and closes its file (the pages go once the
/// importer has let go too) keeping the address reserved, inaccessible, as an unmapped GPU
/// range; the importer does the same with its mapping; resume maps a new file at the owner's
/// address and, from its new offer, at the importer's. Process-wide and never destroyed.
class MemoryFiles {
 public:
  static MemoryFiles& process() {
    static MemoryFiles* files = new MemoryFiles();
    return *files;
  }
  void* allocate(size_t bytes) {
    const int fd = newFile(bytes);
    void* p = mapped(fd, bytes, nullptr);
    std::lock_guard<std::mutex> lock(mutex_);
    live_[p] = File{bytes, fd, {}, false, false, false};
    return p;
  }
  /// Maps what another process offered.
  void* import(const fds::Offer& from, size_t bytes) {
    void* p = mapOffer(from, bytes, nullptr);
    std::lock_guard<std::mutex> lock(mutex_);
    live_[p] = File{bytes, -1, {}, true, false, false};
    return p;
  }
  bool owns(const void* p) {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_.count(p) != 0;
  }
  /// The bytes of p's file, and whether it is an allocation of this process's (not an import)
  /// that no NIC maps (descriptorOf): one suspend may give back. False when p is none.
  bool suspendable(const void* p, size_t* bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(p);
    if (it == live_.end()) return false;
    *bytes = it->second.bytes;
    return !it->second.imported && !it->second.nicMaps;
  }
  /// Suspend: p's pages (an allocation's or an import's) are let go of, its address stays
  /// reserved; an allocation's offer is withdrawn and its file closed. False when p is none,
  /// or suspended already.
  bool suspend(void* p) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(p);
    if (it == live_.end() || it->second.suspended || it->second.nicMaps) return false;
    File& f = it->second;
    reserve(p, f.bytes);
    if (!f.offer.token.empty()) fds::withdraw(f.offer.token);
    if (f.fd >= 0) close(f.fd);
    f.offer = {};
    f.fd = -1;
    f.suspended = true;
    return true;
  }
  /// Resume of an allocation (from == null: a new file) or of an import (the owner's new offer,
  /// of exactly the reservation's bytes) at p.
  void resume(void* p, const fds::Offer* from, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(p);
    if (it == live_.end() || !it->second.suspended || it->second.imported != (from != nullptr)) {
      fail(ncclInternalError, "emulated device: %p is no suspended %s", p, from != nullptr ? "import" : "allocation");
    }
    File& f = it->second;
    if (bytes != f.bytes) {
      fail(ncclSystemError, "emulated device: a handle of %zu bytes for the %zu reserved at %p", bytes, f.bytes, p);
    }
    if (from != nullptr) {
      mapOffer(*from, bytes, p);
    } else {
      f.fd = newFile(bytes);
      mapped(f.fd, bytes, p);
    }
    f.suspended = false;
  }
  void release(void* p) {
    File f{};
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = live_.find(p);
      if (it == live_.end()) return;
      f = it->second;
      live_.erase(it);
    }
    if (!f.offer.token.empty()) fds::withdraw(f.offer.token);
    if (f.fd >= 0) close(f.fd);
    munmap(p, f.bytes);  // (a suspended one's reservation too)
  }
  /// The allocation (not an import) holding all of [p, p + bytes).
  bool find(const void* p, size_t bytes, void** base, size_t* size) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = holding(p, bytes);
    if (it == live_.end()) return false;
    *base = const_cast<void*>(it->first);
    *size = it->second.bytes;
    return true;
  }
  /// A new descriptor of the memory file holding [p, p + bytes) (as a GPU's dma-buf), and p's
  /// offset in it; -1 when no allocation holds it. A NIC maps it from now on: no suspend.
  int descriptorOf(void* p, size_t bytes, uint64_t* offset) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = holding(p, bytes);
    if (it == live_.end()) return -1;
    *offset = static_cast<uint64_t>(static_cast<char*>(p) - static_cast<const char*>(it->first));
    it->second.nicMaps = true;
    return dup(it->second.fd);
  }
  /// Where other processes fetch allocation `base` (offered once).
  fds::Offer share(void* base, size_t* bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(base);
    if (it == live_.end() || it->second.fd < 0) fail(ncclInternalError, "emulated device: %p is no allocation", base);
    if (it->second.offer.token.empty()) it->second.offer = fds::offer(it->second.fd);
    *bytes = it->second.bytes;
    return it->second.offer;
  }

 private:
  struct File {
    size_t bytes;
    int fd;            // -1: an import, or suspended
    fds::Offer offer;  // offered (an empty token: not yet)
    bool imported;
    bool suspended;    // its pages let go of, the address reserved
    bool nicMaps;      // a descriptor went to a NIC (descriptorOf)
  };
  /// The live allocation (not an import) holding all of [p, p + bytes), or live_.end(); under mutex_.
  std::map<const void*, struct File>::iterator holding(const void* p, size_t bytes) {
    auto it = live_.upper_bound(p);
    if (it == live_.begin()) return live_.end();
    --it;
    const char* start = static_cast<const char*>(it->first);
    const char* q = static_cast<const char*>(p);
    const bool inside = q < start + it->second.bytes && static_cast<size_t>(start + it->second.bytes - q) >= bytes;
    return it->second.fd >= 0 && inside ? it : live_.end();
  }
  static int newFile(size_t bytes) {
    const int fd = memfd_create("braid-emulated-device", MFD_CLOEXEC);
    if (fd < 0) fail(ncclSystemError, "emulated device: memfd_create: %s", strerror(errno));
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      close(fd);
      fail(ncclSystemError, "emulated device: cannot size a memory file to %zu bytes", bytes);
    }
    return fd;
  }
  /// Maps fd's bytes, at `at` (replacing its reservation) unless null.
  static void* mapped(int fd, size_t bytes, void* at) {
    void* p = mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (at != nullptr ? MAP_FIXED : 0), fd, 0);
    if (p == MAP_FAILED) fail(ncclSystemError, "emulated device: cannot map %zu bytes: %s", bytes, strerror(errno));
    return p;
  }
  static void* mapOffer(const fds::Offer& from, size_t bytes, void* at) {
    const int fd = fds::fetch(from, std::chrono::seconds(2));
    void* p = nullptr;
    try {
      p = mapped(fd, bytes, at);
    } catch (...) {
      close(fd);
      throw;
    }
    close(fd);
    return p;
  }
  /// Replaces the mapping at p with an inaccessible reservation, as an unmapped GPU range.
  static void reserve(void* p, size_t bytes) {
    if (mmap(p, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == MAP_FAILED) {
      fail(ncclSystemError, "emulated device: cannot unmap %zu bytes at %p: %s", bytes, p, strerror(errno));
    }
  }
  std::mutex mutex_;
  std::map<const void*, File> live_;
};

/// What exportData writes: where to fetch the file, and its size.
struct FileHandle {
  fds::Offer offer;
  uint64_t bytes;
};

/// The "device memory": host memory, zeroed, the slots apart from the counters as on a GPU;
/// shareable slots in memory files that the peer process maps. Process-wide and never
/// destroyed, as the CUDA backend's (FIFOs outlive communicators). Slots no other process maps
/// play cuMem memory (as the CUDA backend allocates them): pages at an address of their own,
/// which suspendData unmaps (the address stays reserved, inaccessible, as a GPU's unmapped
/// range) and resumeData maps again, zeroed; shared slots are memory files that suspend and
/// resume alike (MemoryFiles), the peer's mapping let go of and mapped again with them
/// (suspendImport, resumeImport). EmulatedDevice::physicalBytes counts the pages allocated here.
class HostFifoAllocator final : public transport::FifoAllocator {
 public:
  void* allocateControl(size_t bytes) override { return zeroed(bytes); }
  void freeControl(void* p) override { std::free(p); }
  void* allocateData(size_t bytes, bool shareable) override {
    if (shareable) {
      void* p = MemoryFiles::process().allocate(bytes);
      EmulatedDevice::physicalBytes += bytes;
      return p;
    }
    const size_t size = (bytes + kPage - 1) / kPage * kPage;
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fail(ncclSystemError, "emulated device: cannot allocate %zu bytes: %s", bytes, strerror(errno));
    std::lock_guard<std::mutex> lock(mutex_);
    regions_[p] = Region{size, false, {}};
    EmulatedDevice::physicalBytes += size;
    return p;
  }
  void freeData(void* p) override {
    if (MemoryFiles::process().owns(p)) {
      size_t bytes = 0;
      if (MemoryFiles::process().find(p, 1, &p, &bytes)) EmulatedDevice::physicalBytes -= bytes;  // (not suspended)
      kept_.erase(p);
      return MemoryFiles::process().release(p);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = regions_.find(p);
    if (it == regions_.end()) return;
    if (!it->second.suspended) EmulatedDevice::physicalBytes -= it->second.bytes;
    munmap(p, it->second.bytes);
    regions_.erase(it);
  }
  DataUse dataUse(void* p, uint64_t requested) override {
    size_t fileBytes = 0;
    if (MemoryFiles::process().owns(p)) return DataUse{requested, MemoryFiles::process().suspendable(p, &fileBytes)};
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = regions_.find(p);
    if (it == regions_.end()) return DataUse{requested, false};
    return DataUse{it->second.bytes, true};
  }
  bool suspendData(void* p, uint64_t keepBytes) override {
    size_t fileBytes = 0;
    if (MemoryFiles::process().suspendable(p, &fileBytes)) {  // (slots a peer process maps: it lets go too)
      std::vector<char> kept(static_cast<char*>(p), static_cast<char*>(p) + std::min<uint64_t>(keepBytes, fileBytes));
      if (!MemoryFiles::process().suspend(p)) return false;
      std::lock_guard<std::mutex> lock(mutex_);
      kept_[p] = std::move(kept);
      EmulatedDevice::physicalBytes -= fileBytes;
      return true;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = regions_.find(p);
    if (it == regions_.end() || it->second.suspended) return false;
    Region& r = it->second;
    r.kept.assign(static_cast<char*>(p), static_cast<char*>(p) + std::min<uint64_t>(keepBytes, r.bytes));
    // The pages go; the address stays reserved, and touching it faults as an unmapped GPU range.
    if (mmap(p, r.bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == MAP_FAILED) {
      fail(ncclSystemError, "emulated device: cannot unmap %zu bytes at %p: %s", r.bytes, p, strerror(errno));
    }
    r.suspended = true;
    EmulatedDevice::physicalBytes -= r.bytes;
    return true;
  }
  void resumeData(void* p) override {
    size_t fileBytes = 0;
    if (MemoryFiles::process().suspendable(p, &fileBytes)) {
      MemoryFiles::process().resume(p, nullptr, fileBytes);
      std::lock_guard<std::mutex> lock(mutex_);
      const std::vector<char>& kept = kept_[p];
      if (!kept.empty()) std::memcpy(p, kept.data(), kept.size());
      kept_.erase(p);
      EmulatedDevice::physicalBytes += fileBytes;
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = regions_.find(p);
    if (it == regions_.end() || !it->second.suspended) fail(ncclInternalError, "emulated device: %p is not suspended", p);
    Region& r = it->second;
    if (mmap(p, r.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED) {
      fail(ncclSystemError, "emulated device: cannot map %zu bytes at %p again: %s", r.bytes, p, strerror(errno));
    }
    if (!r.kept.empty()) std::memcpy(p, r.kept.data(), r.kept.size());  // (scratch keeps nothing: no null source)
    r.kept.clear();
    r.suspended = false;
    EmulatedDevice::physicalBytes += r.bytes;
  }
  void registerHost(void*, size_t) override {}
  void unregisterHost(void*) override {}
  bool exportData(void* p, uint8_t* handle) override {
    if (!MemoryFiles::process().owns(p)) return false;
    FileHandle h{};
    size_t bytes = 0;
    h.offer = MemoryFiles::process().share(p, &bytes);
    h.bytes = bytes;
    std::memset(handle, 0, kHandleBytes);
    std::memcpy(handle, &h, sizeof h);
    return true;
  }
  void* importData(const uint8_t* handle, uint64_t need) override {
    FileHandle h{};
    std::memcpy(&h, handle, sizeof h);
    if (h.bytes < need) fail(ncclSystemError, "emulated device: a handle of %zu bytes for %llu", static_cast<size_t>(h.bytes),
                             static_cast<unsigned long long>(need));
    return MemoryFiles::process().import(h.offer, h.bytes);
  }
  void closeData(void* p) override { MemoryFiles::process().release(p); }
  bool suspendImport(void* p) override { return MemoryFiles::process().suspend(p); }
  void resumeImport(void* p, const uint8_t* handle, uint64_t need) override {
    FileHandle h{};
    std::memcpy(&h, handle, sizeof h);
    if (h.bytes < need) {
      fail(ncclSystemError, "emulated device: a handle of %zu bytes for %llu", static_cast<size_t>(h.bytes),
           static_cast<unsigned long long>(need));
    }
    MemoryFiles::process().resume(p, &h.offer, h.bytes);
  }
  int dmabufFd(void* p, size_t bytes, uint64_t* offset) override {
    return MemoryFiles::process().descriptorOf(p, bytes, offset);
  }
  bool ordersRemoteWrites() override { return true; }
  bool nicReadsWell() override { return true; }

 private:
  static constexpr size_t kPage = 4096;
  struct Region {
    size_t bytes;
    bool suspended;
    std::vector<char> kept;  // suspendData's copy of the first bytes
  };
  std::mutex mutex_;
  std::map<void*, Region> regions_;  // the slots that play cuMem memory, by address
  std::map<void*, std::vector<char>> kept_;  // suspended memory files: suspendData's copy of the first bytes

  static void* zeroed(size_t bytes) {
    void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (p == nullptr) fail(ncclSystemError, "emulated device: cannot allocate %zu bytes", bytes);
    std::memset(p, 0, bytes);
    return p;
  }
};

/// The process's emulated device memory (every emulated device's FIFOs and scratch).
HostFifoAllocator& deviceMemory() {
  static HostFifoAllocator* allocator = new HostFifoAllocator();
  return *allocator;
}

}  // namespace

std::atomic<void*> EmulatedDevice::capturedStream{nullptr};
std::atomic<int> EmulatedDevice::hostCopies{0};
std::atomic<int> EmulatedDevice::launches{0};
std::atomic<int> EmulatedDevice::works{0};
std::atomic<uint64_t> EmulatedDevice::sendSteps{0};
std::atomic<int> EmulatedDevice::residentBlocksAll{1024};
std::atomic<int> EmulatedDevice::maxLaunchChannels{0};
std::atomic<size_t> EmulatedDevice::inlineLimit{kernels::kInlineArgBytes};
std::atomic<int> EmulatedDevice::packedLaunches{0};
std::atomic<int> EmulatedDevice::maxPeerBlocks{0};
std::atomic<int> EmulatedDevice::badPeerBlocks{0};
std::atomic<int> EmulatedDevice::oneSidedRuns{0};
std::atomic<int64_t> EmulatedDevice::physicalBytes{0};

void* EmulatedDevice::allocateShareable(size_t bytes) { return MemoryFiles::process().allocate(bytes); }
void EmulatedDevice::freeShareable(void* p) { MemoryFiles::process().release(p); }

bool EmulatedDevice::exportBuffer(const void* p, uint64_t bytes, BufferExport* out) {
  void* base = nullptr;
  size_t size = 0;
  if (!MemoryFiles::process().find(p, bytes, &base, &size)) return false;
  out->offer = MemoryFiles::process().share(base, &size);
  out->base = static_cast<const char*>(base);
  out->bytes = size;
  return true;
}

void* EmulatedDevice::importBuffer(const fds::Offer& from, uint64_t bytes) {
  return MemoryFiles::process().import(from, bytes);
}

void EmulatedDevice::closeBuffer(void* p) { MemoryFiles::process().release(p); }

EmulatedDeviceScope::EmulatedDeviceScope() {
  comm::setTestDeviceFactory([](int) { return std::make_unique<EmulatedDevice>(); });
}

EmulatedDeviceScope::~EmulatedDeviceScope() { comm::setTestDeviceFactory(nullptr); }

bool EmulatedDevice::launchesDone(uint64_t mark) { return doneLaunch_.load(std::memory_order_acquire) >= mark; }

EmulatedDevice::EmulatedDevice()
    : statuses_(new kernels::ChannelStatus[kMaxChannels]()), abort_(new uint32_t(0)) {
  worker_ = std::thread([this] { loop(); });
}

EmulatedDevice::~EmulatedDevice() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  worker_.join();
  for (void* p : scratch_) deviceMemory().freeData(p);
}

transport::FifoAllocator* EmulatedDevice::fifoAllocator() { return &deviceMemory(); }

void* EmulatedDevice::scratch(uint64_t bytes) {
  if (bytes > scratchBytes_) {  // (older blocks are kept: a queued launch may still use one)
    scratch_.push_back(deviceMemory().allocateData(bytes, false));
    scratchBytes_ = bytes;
  }
  return scratch_.empty() ? nullptr : scratch_.back();
}

uint64_t EmulatedDevice::scratchBytes() const {
  uint64_t bytes = 0;
  for (void* p : scratch_) bytes += deviceMemory().dataUse(p, 0).bytes;
  return bytes;
}

void EmulatedDevice::releaseScratch() {
  synchronize();
  for (void* p : scratch_) deviceMemory().suspendData(p, 0);  // (contents need not survive: see restoreScratch)
  scratchSuspended_ = true;
}

void EmulatedDevice::restoreScratch() {
  if (!scratchSuspended_) return;
  for (void* p : scratch_) deviceMemory().resumeData(p);
  scratchSuspended_ = false;
}

void EmulatedDevice::checkStream(void* stream, int localDeviceRanks, const char* call) {
  if (localDeviceRanks > 1 && stream == nullptr) {
    fail(ncclInvalidUsage, "%s: %d ranks of this process share the emulated device and this rank enqueues on the legacy "
                           "default stream", call, localDeviceRanks);
  }
}

void EmulatedDevice::launchCollective(const kernels::CollWork* given, int nWorks, const kernels::RingHandle* rings,
                                      int nChannels, int nRanks, bool copy, int red, int dtype, void*, const char* call) {
  using runtime::host::HostCollectiveFn;
  const HostCollectiveFn fn = copy ? runtime::host::kCopyFunction : runtime::host::kReductionTable[red][dtype];
  if (fn == nullptr) fail(ncclInvalidUsage, "%s: not instantiated in this build", call);
  for (int seen = maxLaunchChannels.load(); nChannels > seen && !maxLaunchChannels.compare_exchange_weak(seen, nChannels);) {
  }
  // The arguments travel as a GPU launch's do: packed into the launch's parameters where they
  // fit inlineLimit (kernels/launch_args.h), found again as the kernels find them; else copied,
  // the connection handles too.
  const int n = nWorks * nChannels;
  auto packed = std::make_shared<kernels::InlineArgs>();
  const bool inParameters = kernels::packCollective(given, n, rings, nChannels, nRanks, packed.get(), inlineLimit.load());
  if (inParameters) ++packedLaunches;
  auto w = std::make_shared<std::vector<kernels::CollWork>>();
  auto r = std::make_shared<std::vector<kernels::RingHandle>>();
  auto handles = std::make_shared<std::vector<kernels::ConnHandle>>();
  if (!inParameters) {
    w->assign(given, given + n);
    r->assign(rings, rings + nChannels);
    handles->reserve(2 * static_cast<size_t>(n) * nRanks);
    for (kernels::CollWork& work : *w) {
      if (work.peerSend == nullptr) continue;
      const size_t at = handles->size();
      handles->insert(handles->end(), work.peerSend, work.peerSend + nRanks);
      handles->insert(handles->end(), work.peerRecv, work.peerRecv + nRanks);
      work.peerSend = handles->data() + at;
      work.peerRecv = handles->data() + at + nRanks;
    }
  }
  const uint64_t seq = ++seq_;
  ++launches;
  works += nWorks;
  enqueue([this, fn, w, r, handles, packed, inParameters, n, nWorks, nChannels, seq] {
    executor_.runChannels(nChannels, [&](int c, runtime::host::HostGroup& g) {
      statuses_[c].startTime = plugin::profilerClock();  // (the GPU's clock, played by the profiler's)
      kernels::storeRelease(&statuses_[c].startedSeq, seq);
      const unsigned char* bytes = packed->bytes;
      const kernels::RingHandle& ring = inParameters ? kernels::inlineRings(bytes, n)[c] : (*r)[c];
      for (int i = 0; i < nWorks; ++i) {
        const size_t at = static_cast<size_t>(i) * nChannels + c;
        kernels::CollWork work = inParameters ? kernels::inlineWorks(bytes)[at] : (*w)[at];
        if (inParameters) {  // (as the kernels' channelLoop: offsets into the parameters)
          work.peerSend = kernels::inlinePeers(bytes, work.peerSend);
          work.peerRecv = kernels::inlinePeers(bytes, work.peerRecv);
        }
        if (!fn(g, work, ring, abort_.get())) break;
      }
      statuses_[c].doneTime = plugin::profilerClock();
      kernels::storeRelease(&statuses_[c].doneSeq, seq);
    });
    doneLaunch_.store(seq, std::memory_order_release);
  });
}

void EmulatedDevice::launchPeers(const kernels::PeerOp* ops, const int* starts, int nQueues, int blocks,
                                 const kernels::MappedBuffer* mapped, int nMapped, void*, const char*) {
  // (one host loop plays every block: it moves every queue's steps in turn)
  for (int seen = maxPeerBlocks.load(); blocks > seen && !maxPeerBlocks.compare_exchange_weak(seen, blocks);) {
  }
  if (blocks < 1 || blocks > std::max(1, nQueues)) ++badPeerBlocks;
  // Copied, the mapped buffers too, as a GPU launch's arguments are.
  auto table = std::make_shared<std::vector<kernels::MappedBuffer>>(mapped, mapped + nMapped);
  std::vector<std::deque<kernels::PeerOp>> queues(nQueues);
  for (int q = 0; q < nQueues; ++q) {
    for (int i = starts[q]; i < starts[q + 1]; ++i) {
      kernels::PeerOp op = ops[i];
      if (op.mapped != nullptr) op.mapped = table->data() + (ops[i].mapped - mapped);
      queues[q].push_back(op);
    }
  }
  const uint64_t seq = ++seq_;
  ++launches;
  enqueue([this, queues = std::move(queues), table, seq, blocks]() mutable {
    std::vector<std::pair<uint64_t*, uint64_t>> sends;  // each send connection's step word, and its step before
    for (const auto& q : queues)
      if (!q.empty() && q.front().isSend) sends.emplace_back(q.front().conn.step, *q.front().conn.step);
    const int played = std::clamp(blocks, 1, kMaxChannels);  // (the blocks' times: the one loop's)
    for (int b = 0; b < played; ++b) statuses_[b].startTime = plugin::profilerClock();
    kernels::storeRelease(&statuses_[0].startedSeq, seq);
    runtime::host::drivePeerQueues(queues, statuses_[0], abort_.get());  // (aborted or not, the launch ends)
    for (const auto& [word, before] : sends) sendSteps += *word - before;
    for (int b = 0; b < played; ++b) statuses_[b].doneTime = plugin::profilerClock();
    kernels::storeRelease(&statuses_[0].doneSeq, seq);
    doneLaunch_.store(seq, std::memory_order_release);
  });
}

void EmulatedDevice::joinStreams(void*, const std::vector<void*>&) {}
void EmulatedDevice::releaseStreams(void*, const std::vector<void*>&) {}

void EmulatedDevice::copy(void* dst, const void* src, size_t bytes, void*) {
  enqueue([dst, src, bytes] { std::memmove(dst, src, bytes); });
}

std::shared_ptr<char> EmulatedDevice::allocatePinned(size_t bytes) {
  return std::shared_ptr<char>(new char[bytes], std::default_delete<char[]>());
}

namespace {
/// The "device" is the host: a copy into its memory is a memmove, made at once.
class ImmediateCopier final : public runtime::Device::HostCopier {
 public:
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) std::memmove(dst, src, bytes);
    ++EmulatedDevice::hostCopies;
  }
};
}  // namespace

std::unique_ptr<runtime::Device::HostCopier> EmulatedDevice::hostCopier() { return std::make_unique<ImmediateCopier>(); }

void EmulatedDevice::putSignal(void* dst, const void* src, size_t bytes, uint64_t* counter, void*, const char*) {
  // (one job, as the copy and the signal's kernel follow each other on a stream)
  enqueue([dst, src, bytes, counter] {
    if (bytes > 0) std::memmove(dst, src, bytes);  // (a put to itself may overlap its source)
    kernels::signalArrive(counter);
    ++oneSidedRuns;
  });
}

void EmulatedDevice::waitSignals(const kernels::SignalWait* waits, int n, void*, const char*) {
  // The worker spins as the wait kernel does: later jobs of this device run after it.
  enqueue([this, copied = std::vector<kernels::SignalWait>(waits, waits + n)] {
    kernels::waitSignals(copied.data(), static_cast<int>(copied.size()), abort_.get());
    ++oneSidedRuns;
  });
}

bool EmulatedDevice::hostFunction(void* stream, std::function<void()> fn) {
  if (captureId(stream) != 0) return false;
  enqueue(std::move(fn));
  return true;
}

void EmulatedDevice::synchronize() {
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t target = enqueued_;
  changed_.wait(lock, [&] { return done_ >= target; });
}

bool EmulatedDevice::busy() { return runtime::anyChannelRunning(statuses_.get(), kMaxChannels); }

void EmulatedDevice::enqueue(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(job));
    ++enqueued_;
  }
  changed_.notify_all();
}

void EmulatedDevice::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // (stopping, and everything ran)
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    job();
    lock.lock();
    ++done_;
    changed_.notify_all();
  }
}

}  // namespace braid::test
