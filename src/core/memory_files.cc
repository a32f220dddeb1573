#include "core/memory_files.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>

#include "core/status.h"

namespace braid::memfiles {

namespace {

struct File {
  size_t bytes;
  int fd;
};

struct Files {
  std::mutex mutex;
  std::map<uintptr_t, File> live;  // by address
};

Files& files() {
  static Files* f = new Files();  // never destroyed: frees may come during exit
  return *f;
}

size_t pageSize() {
  return static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace

void* allocate(size_t bytes) {
  const size_t page = pageSize();
  const size_t rounded = (bytes + page - 1) / page * page;
  if (rounded < bytes) fail(ncclSystemError, "cannot allocate %zu bytes of host memory", bytes);
  const int fd = memfd_create("braid-memory", MFD_CLOEXEC);
  if (fd < 0)
    fail(ncclSystemError, "memfd_create for %zu bytes of host memory: %s", bytes, std::strerror(errno));
  if (ftruncate(fd, static_cast<off_t>(rounded)) != 0) {
    const int error = errno;
    close(fd);
    fail(ncclSystemError, "cannot size a memory file to %zu bytes: %s", rounded, std::strerror(error));
  }
  void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int error = errno;
    close(fd);
    fail(ncclSystemError, "cannot map %zu bytes of host memory: %s", rounded, std::strerror(error));
  }
  std::lock_guard<std::mutex> lock(files().mutex);
  files().live[reinterpret_cast<uintptr_t>(p)] = File{rounded, fd};
  return p;
}

bool release(void* p) {
  File f{};
  {
    std::lock_guard<std::mutex> lock(files().mutex);
    auto it = files().live.find(reinterpret_cast<uintptr_t>(p));
    if (it == files().live.end()) return false;
    f = it->second;
    files().live.erase(it);
  }
  munmap(p, f.bytes);
  close(f.fd);
  return true;
}

bool offer(const void* p, size_t bytes, fds::Offer* out, size_t* offset) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  int fd = -1;
  {
    std::lock_guard<std::mutex> lock(files().mutex);
    auto it = files().live.upper_bound(start);  // the first allocation after p
    if (it == files().live.begin()) return false;
    --it;
    if (start - it->first > it->second.bytes || bytes > it->second.bytes - (start - it->first)) return false;
    fd = it->second.fd;
    *offset = start - it->first;
    *out = fds::offer(fd);  // (a duplicate: a release meanwhile does not close what peers fetch)
  }
  return fd >= 0;
}

Mapping::Mapping(const fds::Offer& from, size_t offset, size_t bytes) {
  const int fd = fds::fetch(from);
  const size_t page = pageSize();
  const size_t first = offset / page * page;
  length_ = offset - first + bytes;
  base_ = mmap(nullptr, length_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(first));
  const int error = errno;
  close(fd);
  if (base_ == MAP_FAILED) {
    base_ = nullptr;
    fail(ncclSystemError, "cannot map %zu bytes of process %d's memory: %s", bytes, from.pid,
         std::strerror(error));
  }
  data_ = static_cast<char*>(base_) + (offset - first);
}

Mapping::~Mapping() {
  if (base_ != nullptr) munmap(base_, length_);
}

}  // namespace braid::memfiles
