#include "transport/shm/shm_transport.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/status.h"

namespace braid::transport::shm {

namespace {

class MappedFifo final : public FifoMemory {
 public:
  /// ownedName: the creator's segment name, removed at destruction in case the connection
  /// never completed (a peer that failed during setup); "" for the importer.
  MappedFifo(const FifoSizes& sizes, void* memory, size_t bytes, std::string ownedName = "")
      : FifoMemory(sizes), memory_(memory), bytes_(bytes), ownedName_(std::move(ownedName)) {}
  ~MappedFifo() override {
    munmap(memory_, bytes_);
    if (!ownedName_.empty()) shm_unlink(ownedName_.c_str());  // ENOENT once unlinked: fine
  }
  char* base() const override { return static_cast<char*>(memory_); }

 private:
  void* memory_;
  size_t bytes_;
  std::string ownedName_;
};

void* mapFd(int fd, size_t bytes, const char* name) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) fail(ncclSystemError, "shm: cannot map %s (%zu bytes): %s", name, bytes, strerror(errno));
  return p;
}

}  // namespace

std::unique_ptr<FifoMemory> create(const FifoSizes& sizes, const std::string& uniqueName, Descriptor* out) {
  std::memset(out, 0, sizeof(*out));
  const std::string name = "/braid-" + uniqueName;
  if (name.size() >= sizeof(out->shmName)) fail(ncclInternalError, "shm segment name %s is too long", name.c_str());
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) fail(ncclSystemError, "shm: cannot create %s: %s", name.c_str(), strerror(errno));
  const size_t bytes = sizes.bytes();
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    fail(ncclSystemError, "shm: cannot size %s to %zu bytes: %s (is /dev/shm full?)", name.c_str(), bytes, strerror(err));
  }
  void* p = nullptr;
  try {
    p = mapFd(fd, bytes, name.c_str());
  } catch (...) {
    close(fd);
    shm_unlink(name.c_str());
    throw;
  }
  close(fd);
  out->kind = Kind::kShm;
  out->ownerPid = static_cast<int32_t>(getpid());
  out->bytes = bytes;
  out->sizes = sizes;
  std::strncpy(out->shmName, name.c_str(), sizeof(out->shmName) - 1);
  return std::make_unique<MappedFifo>(sizes, p, bytes, name);
}

std::unique_ptr<FifoMemory> import(const Descriptor& d) {
  const int fd = shm_open(d.shmName, O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) fail(ncclSystemError, "shm: cannot open %s of process %d: %s", d.shmName, d.ownerPid, strerror(errno));
  void* p = nullptr;
  try {
    p = mapFd(fd, d.bytes, d.shmName);
  } catch (...) {
    close(fd);
    throw;
  }
  close(fd);
  return std::make_unique<MappedFifo>(d.sizes, p, d.bytes);
}

void unlinkName(const Descriptor& d) { shm_unlink(d.shmName); }

}  // namespace braid::transport::shm
