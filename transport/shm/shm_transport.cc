#include "transport/shm/shm_transport.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/log.h"
#include "core/process.h"
#include "core/status.h"

namespace braid::transport::shm {

namespace {

/// Slots in GPU memory that the sender still maps, with their segment (which holds the word
/// that says when it no longer does): freed by a later sweep, as CUDA leaves freeing
/// exported memory that another process still maps undefined. Sweeps run only as FIFOs are
/// destroyed, never during connection setup, where freeing GPU memory would wait for kernels
/// that may be waiting for this very setup. Process-wide, never destroyed.
class PendingFrees {
 public:
  static PendingFrees& process() {
    static PendingFrees* pending = new PendingFrees();
    return *pending;
  }
  void add(char* data, FifoAllocator* allocator, void* segment, size_t bytes, const uint32_t* state) {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.push_back({data, allocator, segment, bytes, state});
  }
  /// Frees what the importers have let go of.
  void sweep() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < entries_.size();) {
      Entry& e = entries_[i];
      if (kernels::loadAcquire(const_cast<uint32_t*>(e.state)) == kImportMapped) {
        ++i;
        continue;
      }
      e.allocator->freeData(e.data);
      munmap(e.segment, e.bytes);
      entries_.erase(entries_.begin() + static_cast<long>(i));
    }
  }

 private:
  struct Entry {
    char* data;
    FifoAllocator* allocator;
    void* segment;
    size_t bytes;
    const uint32_t* state;  // the segment's importStateWord
  };
  std::mutex mutex_;
  std::vector<Entry> entries_;
};

class MappedFifo final : public FifoMemory {
 public:
  /// ownedName: the creator's segment name, removed at destruction in case the connection
  /// never completed (a peer that failed during setup); "" for the importer.
  MappedFifo(const FifoSizes& sizes, void* memory, size_t bytes, std::string ownedName = "")
      : FifoMemory(sizes), memory_(memory), bytes_(bytes), ownedName_(std::move(ownedName)) {}
  ~MappedFifo() override {
    const bool owner = !ownedName_.empty();
    if (owner) shm_unlink(ownedName_.c_str());  // ENOENT once unlinked: fine
    closeCreditMapping();
    bool segmentKept = false;  // a pending free holds memory_ (the word that says when to free)
    if (data_ != nullptr && !owner) {  // the sender: unmaps, then tells the receiver
      allocator_->closeData(data_);
      kernels::storeRelease(importStateWord(), kImportClosed);
    } else if (data_ != nullptr && kernels::loadAcquire(importStateWord()) == kImportMapped) {  // still mapped there
      PendingFrees::process().add(data_, allocator_, memory_, bytes_, importStateWord());
      segmentKept = true;
    } else if (data_ != nullptr) {
      allocator_->freeData(data_);
    }
    if (creditExported_) {  // the sender's GPU line, freed as the receiver's slots are (never both: one is the receiver's)
      char* line = reinterpret_cast<char*>(credit_.load(std::memory_order_relaxed));
      const uint32_t state = kernels::loadAcquire(creditStateWord());
      if (!segmentKept && state == kImportMapped) {
        PendingFrees::process().add(line, creditAllocator_, memory_, bytes_, creditStateWord());
        segmentKept = true;
      } else {
        // (not mapped yet: the receiver finds the handle gone and this word saying why)
        if (state != kImportMapped) kernels::storeRelease(creditStateWord(), kImportOwnerLeft);
        creditAllocator_->freeData(line);
      }
    }
    if (segmentKept) return;
    munmap(memory_, bytes_);
    PendingFrees::process().sweep();
  }
  char* base() const override { return static_cast<char*>(memory_); }
  /// With the slots in GPU memory, data_ is their allocation: tail and head, then the slots.
  char* data() const override { return data_ != nullptr ? data_ + kDeviceCounterBytes : base() + fifoControlBytes(); }
  uint64_t* counters() const override { return reinterpret_cast<uint64_t*>(data_ != nullptr ? data_ : base()); }
  uint64_t hostBytes() const override { return bytes_; }
  bool slotsShared() const override { return data_ != nullptr; }
  uint64_t* creditWord() const override {
    uint64_t* line = credit_.load(std::memory_order_acquire);
    return line != nullptr ? line : FifoMemory::creditWord();
  }
  DeviceData creditData() const override {
    if (!creditExported_) return {};
    return DeviceData{reinterpret_cast<char*>(credit_.load(std::memory_order_relaxed)), kCreditLineBytes};
  }
  DeviceData importedCreditData() const override {
    if (!creditImported_) return {};
    return DeviceData{reinterpret_cast<char*>(credit_.load(std::memory_order_relaxed)), kCreditLineBytes};
  }
  /// The sender: its credit line, in its GPU's memory exported (`device`, where the allocator
  /// can), else in a one-page segment of its own; says where in `ack`.
  void createCredit(FifoAllocator* allocator, bool device, Acknowledgement* ack);
  /// The receiver: maps the credit line the sender's (checked) acknowledgement names. A sender
  /// whose steps all fit the free slots may have ended before (its line is gone): head then
  /// goes to a page of the receiver's own, which no one reads.
  void adoptCredit(const Acknowledgement& ack, FifoAllocator* allocator);
  bool senderLeft() const;
  void adoptLeftCredit(FifoAllocator* allocator);
  /// The counters and slots are GPU memory from `allocator` (deviceDataBytes of it, zeroed):
  /// allocated (creator) or imported (importer).
  void setData(char* data, FifoAllocator* allocator) {
    data_ = data;
    allocator_ = allocator;
  }

 private:
  void* memory_;
  size_t bytes_;
  std::string ownedName_;
  char* data_ = nullptr;
  FifoAllocator* allocator_ = nullptr;
  // head: the sender's credit line (its own, or the receiver's mapping of it); null until the
  // connection is made (head's default place, which no kernel uses then).
  std::atomic<uint64_t*> credit_{nullptr};
  FifoAllocator* creditAllocator_ = nullptr;  // the backend's that holds, maps or registered it
  void* creditPage_ = nullptr;                // a credit segment's page, mapped here
  bool creditRegistered_ = false;             // creditPage_ is registered with creditAllocator_
  std::string creditName_;                    // the sender's credit segment's name (removed at destruction)
  bool creditExported_ = false;               // the sender's line is its GPU memory, exported
  bool creditImported_ = false;               // the receiver maps the sender's exported line

  void mapCreditPage(void* page, FifoAllocator* allocator);
  void closeCreditMapping();
};

/// A new name: this process's pid, pid namespace and random id, and a number never used before
/// by it (a forked child has an id of its own, so it may count on from its parent's number).
std::string newSegmentName() {
  static std::atomic<uint64_t> next{0};
  char sequence[20];
  std::snprintf(sequence, sizeof sequence, "%llx", static_cast<unsigned long long>(next++));
  return segmentPrefix(static_cast<int>(getpid()), process::pidNamespace(), process::randomId()) + sequence;
}

void* mapFd(int fd, size_t bytes, const char* name) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) fail(ncclSystemError, "shm: cannot map %s (%zu bytes): %s", name, bytes, strerror(errno));
  return p;
}

/// A credit segment: one page (the line at its start).
constexpr size_t kCreditPageBytes = 4096;

void MappedFifo::mapCreditPage(void* page, FifoAllocator* allocator) {
  creditPage_ = page;
  if (allocator != nullptr) {  // (the kernels poll or write it)
    allocator->registerHost(page, kCreditPageBytes);
    creditAllocator_ = allocator;
    creditRegistered_ = true;
  }
  credit_.store(static_cast<uint64_t*>(page), std::memory_order_release);
}

void MappedFifo::closeCreditMapping() {
  if (creditPage_ != nullptr) {
    if (creditRegistered_) creditAllocator_->unregisterHost(creditPage_);
    munmap(creditPage_, kCreditPageBytes);
  }
  if (!creditName_.empty()) {  // (the sender's segment; ENOENT once the receiver has it)
    // A sender may end before its receiver maps the line (its steps fit the free slots): the
    // receiver then finds the name gone and this word saying why.
    if (kernels::loadAcquire(creditStateWord()) != kImportMapped) kernels::storeRelease(creditStateWord(), kImportOwnerLeft);
    shm_unlink(creditName_.c_str());
  }
  if (creditImported_) {  // unmaps, then tells the sender
    creditAllocator_->closeData(credit_.load(std::memory_order_relaxed));
    kernels::storeRelease(creditStateWord(), kImportClosed);
  }
}

void MappedFifo::createCredit(FifoAllocator* allocator, bool device, Acknowledgement* ack) {
  if (device) {
    void* line = allocator->allocateData(kCreditLineBytes, true);
    if (allocator->exportData(line, ack->creditHandle)) {
      creditAllocator_ = allocator;
      creditExported_ = true;
      credit_.store(static_cast<uint64_t*>(line), std::memory_order_release);
      ack->credit = kCreditDevice;
      return;
    }
    allocator->freeData(line);  // (not shareable after all: a segment instead)
  }
  const std::string name = newSegmentName();
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) fail(ncclSystemError, "shm: cannot create the credit segment %s: %s", name.c_str(), strerror(errno));
  creditName_ = name;  // (removed at destruction from here on)
  if (ftruncate(fd, kCreditPageBytes) != 0) {
    const int err = errno;
    close(fd);
    fail(ncclSystemError, "shm: cannot size the credit segment %s: %s (is /dev/shm full?)", name.c_str(), strerror(err));
  }
  void* page = nullptr;
  try {
    page = mapFd(fd, kCreditPageBytes, name.c_str());
  } catch (...) {
    close(fd);
    throw;
  }
  close(fd);
  mapCreditPage(page, allocator);
  ack->credit = kCreditSegment;
  std::strncpy(ack->creditName, name.c_str(), sizeof(ack->creditName) - 1);
}

bool MappedFifo::senderLeft() const { return kernels::loadAcquire(creditStateWord()) == kImportOwnerLeft; }

void MappedFifo::adoptLeftCredit(FifoAllocator* allocator) {
  void* page = mmap(nullptr, kCreditPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) fail(ncclSystemError, "shm: cannot map a page for head: %s", strerror(errno));
  mapCreditPage(page, allocator);
}

void MappedFifo::adoptCredit(const Acknowledgement& ack, FifoAllocator* allocator) {
  if (ack.credit == kCreditDevice) {
    if (allocator == nullptr) fail(ncclInternalError, "shm: the sender's credit line is GPU memory, which the host backend cannot map");
    void* line = nullptr;
    try {
      line = allocator->importData(ack.creditHandle, kCreditLineBytes);
    } catch (const Error&) {
      if (!senderLeft()) throw;
      return adoptLeftCredit(allocator);  // (the sender ended first: nobody reads head)
    }
    creditAllocator_ = allocator;
    credit_.store(static_cast<uint64_t*>(line), std::memory_order_release);
    creditImported_ = true;
    kernels::storeRelease(creditStateWord(), kImportMapped);
    return;
  }
  const int fd = shm_open(ack.creditName, O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0 && errno == ENOENT && senderLeft()) return adoptLeftCredit(allocator);  // (as above)
  if (fd < 0) fail(ncclSystemError, "shm: cannot open the sender's credit segment %s: %s", ack.creditName, strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      static_cast<uint64_t>(st.st_size) < kCreditPageBytes) {
    close(fd);
    fail(ncclSystemError, "shm: the sender's credit segment %s is not this user's page (owner uid %u, %lld bytes)",
         ack.creditName, static_cast<unsigned>(st.st_uid), static_cast<long long>(st.st_size));
  }
  void* page = nullptr;
  try {
    page = mapFd(fd, kCreditPageBytes, ack.creditName);
  } catch (...) {
    close(fd);
    throw;
  }
  close(fd);
  shm_unlink(ack.creditName);  // (mapped by both: nothing is left behind in /dev/shm)
  mapCreditPage(page, allocator);
  kernels::storeRelease(creditStateWord(), kImportMapped);  // (the sender's end need not say it left)
}

}  // namespace

std::unique_ptr<FifoMemory> create(const FifoSizes& sizes, FifoAllocator* allocator, bool deviceData, Descriptor* out) {
  std::memset(out, 0, sizeof(*out));
  const std::string name = newSegmentName();
  // The slots first, in GPU memory where the backend can share it.
  char* data = nullptr;
  if (allocator != nullptr && deviceData) {
    data = static_cast<char*>(allocator->allocateData(deviceDataBytes(sizes), true));
    if (!allocator->exportData(data, out->dataHandle)) {
      allocator->freeData(data);
      data = nullptr;
    }
  }
  auto freeData = [&] {
    if (data != nullptr) allocator->freeData(data);
  };
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    freeData();
    fail(ncclSystemError, "shm: cannot create %s: %s", name.c_str(), strerror(err));
  }
  const size_t bytes = data != nullptr ? (fifoControlBytes() + 4095) / 4096 * 4096 : sizes.bytes();
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    freeData();
    fail(ncclSystemError, "shm: cannot size %s to %zu bytes: %s (is /dev/shm full?)", name.c_str(), bytes, strerror(err));
  }
  void* p = nullptr;
  try {
    p = mapFd(fd, bytes, name.c_str());
  } catch (...) {
    close(fd);
    shm_unlink(name.c_str());
    freeData();
    throw;
  }
  close(fd);
  out->kind = Kind::kShm;
  out->ownerPid = static_cast<int32_t>(getpid());
  out->bytes = bytes;
  out->sizes = sizes;
  out->dataShared = data != nullptr ? 1 : 0;
  std::strncpy(out->shmName, name.c_str(), sizeof(out->shmName) - 1);
  auto memory = std::make_unique<MappedFifo>(sizes, p, bytes, name);
  if (data != nullptr) memory->setData(data, allocator);
  return memory;
}

std::string segmentPrefix(int pid, uint64_t pidNamespace, uint64_t processId) {
  char prefix[sizeof(Descriptor::shmName)];
  std::snprintf(prefix, sizeof prefix, "/braid-%d-%llx-%016llx-", pid, static_cast<unsigned long long>(pidNamespace),
                static_cast<unsigned long long>(processId));
  return prefix;
}

std::unique_ptr<FifoMemory> import(const Descriptor& d, FifoAllocator* allocator, Acknowledgement* ack) {
  const int fd = shm_open(d.shmName, O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) fail(ncclSystemError, "shm: cannot open %s of process %d: %s", d.shmName, d.ownerPid, strerror(errno));
  // Only a segment of this user, as large as the FIFO: mapping a shorter one would fault on
  // first touch (SIGBUS), and someone else's could be rewritten under us.
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      static_cast<uint64_t>(st.st_size) < d.bytes) {
    close(fd);
    fail(ncclSystemError, "shm: segment %s of process %d is not this user's FIFO of %llu bytes (owner uid %u, %lld "
                          "bytes)", d.shmName, d.ownerPid, static_cast<unsigned long long>(d.bytes),
         static_cast<unsigned>(st.st_uid), static_cast<long long>(st.st_size));
  }
  void* p = nullptr;
  try {
    p = mapFd(fd, d.bytes, d.shmName);
  } catch (...) {
    close(fd);
    throw;
  }
  close(fd);
  auto memory = std::make_unique<MappedFifo>(d.sizes, p, d.bytes);
  if (d.dataShared != 0) {
    if (allocator == nullptr) {
      fail(ncclInternalError, "shm: process %d keeps the FIFO slots of %s in its GPU's memory, which this rank's "
                              "host backend cannot map", d.ownerPid, d.shmName);
    }
    try {
      memory->setData(static_cast<char*>(allocator->importData(d.dataHandle, deviceDataBytes(d.sizes))), allocator);
      kernels::storeRelease(memory->importStateWord(), kImportMapped);
    } catch (const Error& e) {
      fail(e.code(), "%s; mapping process %d's FIFO slots (%s) from its GPU's memory failed: NCCL_P2P_DISABLE=1 keeps "
                     "them in shared host memory", e.what(), d.ownerPid, d.shmName);
    }
  }
  if (ack != nullptr) memory->createCredit(allocator, d.dataShared != 0 && allocator != nullptr, ack);
  return memory;
}

void adoptCredit(FifoMemory& receiver, const Acknowledgement& ack, FifoAllocator* allocator) {
  auto* mapped = dynamic_cast<MappedFifo*>(&receiver);
  if (mapped == nullptr) fail(ncclInternalError, "shm: a credit line offered to a FIFO this transport did not create");
  mapped->adoptCredit(ack, allocator);
}

void unlinkName(const Descriptor& d) { shm_unlink(d.shmName); }

bool segmentOwner(const std::string& name, int* pid, uint64_t* pidNamespace) {
  const char* text = name.c_str() + (name.rfind('/', 0) == 0 ? 1 : 0);
  int owner = 0, end = 0;
  unsigned long long ns = 0, id = 0, seq = 0;
  if (std::sscanf(text, "braid-%d-%llx-%16llx-%llx%n", &owner, &ns, &id, &seq, &end) != 4 || text[end] != '\0' ||
      owner <= 0) {
    return false;
  }
  *pid = owner;
  *pidNamespace = ns;
  return true;
}

int removeOrphans() {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  const uint64_t ours = process::pidNamespace();
  std::vector<std::string> orphans;
  while (const dirent* e = readdir(dir)) {
    int pid = 0;
    uint64_t ns = 0;
    // (another namespace's pid says nothing here: its segments are left to its own inits)
    if (segmentOwner(e->d_name, &pid, &ns) && ours != 0 && ns == ours && process::pidGone(pid)) {
      orphans.push_back(e->d_name);
    }
  }
  closedir(dir);
  int removed = 0;
  for (const std::string& name : orphans) {
    if (shm_unlink(("/" + name).c_str()) != 0) continue;  // (another init removed it first)
    ++removed;
    BRAID_INFO(log::kInit | log::kShm, "removed the shared-memory segment /dev/shm/%s: the process that created it "
               "has exited without removing it (killed during connection setup)", name.c_str());
  }
  return removed;
}

}  // namespace braid::transport::shm
