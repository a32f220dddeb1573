#include "runtime/cuda/cumem.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/fd_exchange.h"
#include "runtime/cuda/cuda_support.h"
#include "core/log.h"
#include "core/params.h"
#include "core/status.h"

namespace braid::runtime::cuda {

namespace {

// The driver functions used here: (field, driver symbol).
#define BRAID_CUMEM_FUNCTIONS(X)                                                                        \
  X(create, cuMemCreate) X(release, cuMemRelease) X(reserve, cuMemAddressReserve)                      \
  X(addressFree, cuMemAddressFree) X(map, cuMemMap) X(unmap, cuMemUnmap) X(setAccess, cuMemSetAccess)  \
  X(granularity, cuMemGetAllocationGranularity) X(exportHandle, cuMemExportToShareableHandle)          \
  X(importHandle, cuMemImportFromShareableHandle) X(attribute, cuDeviceGetAttribute)

struct Driver {
#define BRAID_FIELD(field, symbol) decltype(&symbol) field = nullptr;
  BRAID_CUMEM_FUNCTIONS(BRAID_FIELD)
#undef BRAID_FIELD
  decltype(&cuGetErrorName) errorName = nullptr;
  decltype(&cuMemGetHandleForAddressRange) rangeHandle = nullptr;  ///< dma-buf export (CUDA 11.7 and later)
  bool complete = true;  ///< every function of BRAID_CUMEM_FUNCTIONS was found

  static const Driver& get() {
    static const Driver driver = [] {
      Driver d;
#define BRAID_LOAD(field, symbol)                                 \
  d.field = driverFunction<decltype(&symbol)>(#symbol);           \
  d.complete = d.complete && d.field != nullptr;
      BRAID_CUMEM_FUNCTIONS(BRAID_LOAD)
#undef BRAID_LOAD
      d.errorName = driverFunction<decltype(&cuGetErrorName)>("cuGetErrorName");
      d.rangeHandle = driverFunction<decltype(&cuMemGetHandleForAddressRange)>("cuMemGetHandleForAddressRange");
      return d;
    }();
    return driver;
  }
};

/// Throws ncclUnhandledCudaError naming the driver call and its error.
void check(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return;
  const char* name = "unknown error";
  if (Driver::get().errorName != nullptr) Driver::get().errorName(r, &name);
  fail(ncclUnhandledCudaError, "%s failed: %s (%d)", call, name, static_cast<int>(r));
}

/// The mappings made here, by address.
struct Mapping {
  CUmemGenericAllocationHandle handle;
  size_t bytes;
  int device = -1;        ///< where the physical memory is (cumemAllocate's device)
  bool imported = false;  ///< cumemImport's (another process's memory)
  bool exported = false;  ///< a descriptor or dma-buf of it was made: someone else may map its pages
  bool suspended = false; ///< cumemSuspend gave its physical memory back (handle 0); the address stays
  fds::Offer offer{};     ///< cumemShare's (an empty token: not shared), withdrawn when freed
};
struct Mappings {
  std::mutex mutex;
  std::map<const void*, Mapping> live;
};
Mappings& mappings() {
  static Mappings* m = new Mappings();  // never destroyed: frees may come during exit
  return *m;
}

CUmemAllocationProp propertiesFor(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  int rdma = 0;  // (a NIC may then read and write it: GPU Direct RDMA, transport/net/ib)
  if (Driver::get().attribute(&rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, device) == CUDA_SUCCESS &&
      rdma) {
    prop.allocFlags.gpuDirectRDMACapable = 1;
  }
  return prop;
}

size_t granularityOf(int device) {
  const CUmemAllocationProp prop = propertiesFor(device);
  size_t g = 0;
  check(Driver::get().granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "cuMemGetAllocationGranularity");
  return g > 0 ? g : size_t(2) << 20;
}

/// Maps `handle`'s `bytes` at the reserved address ptr and lets `device` and every device that
/// can reach it read and write them; on failure unmaps what it mapped and throws.
void mapAt(CUdeviceptr ptr, int device, CUmemGenericAllocationHandle handle, size_t bytes) {
  const Driver& d = Driver::get();
  check(d.map(ptr, bytes, 0, handle, 0), "cuMemMap");
  int count = 0;
  cudaGetDeviceCount(&count);
  std::vector<CUmemAccessDesc> access;
  for (int e = 0; e < count; ++e) {
    int reach = e == device ? 1 : 0;
    if (e != device && cudaDeviceCanAccessPeer(&reach, e, device) != cudaSuccess) reach = 0;
    if (!reach) continue;
    CUmemAccessDesc a{};
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = e;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    access.push_back(a);
  }
  cudaGetLastError();
  const CUresult r = d.setAccess(ptr, bytes, access.data(), access.size());
  if (r != CUDA_SUCCESS) {
    d.unmap(ptr, bytes);
    check(r, "cuMemSetAccess");
  }
}

/// Reserves an address for `handle`'s `bytes` and maps it there (mapAt); releases nothing on
/// failure but what it made.
void* mapHandle(int device, CUmemGenericAllocationHandle handle, size_t bytes, size_t granularity) {
  const Driver& d = Driver::get();
  CUdeviceptr ptr = 0;
  check(d.reserve(&ptr, bytes, granularity, 0, 0), "cuMemAddressReserve");
  try {
    mapAt(ptr, device, handle, bytes);
  } catch (...) {
    d.addressFree(ptr, bytes);
    throw;
  }
  void* p = reinterpret_cast<void*>(static_cast<uintptr_t>(ptr));
  std::lock_guard<std::mutex> lock(mappings().mutex);
  Mapping& m = mappings().live[p];
  m.handle = handle;
  m.bytes = bytes;
  m.device = device;
  return p;
}

/// Marks the mapping of this process's own memory that holds p as exported (a NIC or another
/// process maps its pages), if there is one.
void markExported(const void* p) {
  std::lock_guard<std::mutex> lock(mappings().mutex);
  auto it = mappings().live.upper_bound(p);
  if (it == mappings().live.begin()) return;
  --it;
  if (static_cast<const char*>(p) < static_cast<const char*>(it->first) + it->second.bytes) it->second.exported = true;
}

/// A copy of suspended mapping p (cumemSuspend's, or cumemSuspendImport's when `imported`);
/// throws when p is none.
Mapping suspendedMapping(const void* p, bool imported) {
  std::lock_guard<std::mutex> lock(mappings().mutex);
  auto it = mappings().live.find(p);
  if (it == mappings().live.end() || it->second.imported != imported || !it->second.suspended) {
    fail(ncclInternalError, "cuMem resume of %s at %p, which is not suspended", imported ? "the import" : "memory", p);
  }
  return it->second;
}

/// Maps `handle` (new memory, or a peer's new memory) at suspended mapping p (`m`: its size
/// and device) and marks p live again; releases handle and throws when it cannot.
void mapAgain(void* p, const Mapping& m, CUmemGenericAllocationHandle handle) {
  try {
    mapAt(static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)), m.device, handle, m.bytes);
  } catch (...) {
    Driver::get().release(handle);
    throw;
  }
  std::lock_guard<std::mutex> lock(mappings().mutex);
  Mapping& live = mappings().live[p];
  live.handle = handle;
  live.suspended = false;
}

}  // namespace

bool threadHasContext() {
  using GetCurrent = decltype(&cuCtxGetCurrent);
  static const GetCurrent getCurrent = driverFunction<GetCurrent>("cuCtxGetCurrent");
  if (getCurrent == nullptr) return true;
  CUcontext ctx = nullptr;
  return getCurrent(&ctx) != CUDA_SUCCESS || ctx != nullptr;
}

bool cumemEnabled(int device) {
  static std::mutex mutex;
  static std::map<int, bool>* known = new std::map<int, bool>();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = known->find(device);
  if (it != known->end()) return it->second;
  const char* why = nullptr;
  const Driver& d = Driver::get();
  int vmm = 0, fd = 0;
  if (params::process().integer("NCCL_CUMEM_ENABLE") == 0) {
    why = "NCCL_CUMEM_ENABLE=0";
  } else if (!d.complete) {
    why = "the driver lacks the cuMem entry points";
  } else if (d.attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device) != CUDA_SUCCESS || !vmm) {
    why = "the device does not support virtual memory management";
  } else if (d.attribute(&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, device) != CUDA_SUCCESS ||
             !fd) {
    why = "the device cannot export memory as file descriptors";
  }
  const bool enabled = why == nullptr;
  if (enabled) {
    BRAID_INFO(log::kInit | log::kAlloc, "CUDA device %d: cuMem memory with file descriptor handles (NCCL_CUMEM_ENABLE)",
               device);
  } else {
    BRAID_INFO(log::kInit | log::kAlloc, "CUDA device %d: cudaMalloc and legacy IPC handles (%s)", device, why);
  }
  (*known)[device] = enabled;
  return enabled;
}

void* cumemAllocate(int device, size_t bytes) {
  const Driver& d = Driver::get();
  cudaFree(nullptr);  // (the device's primary context, current for the driver calls)
  const size_t granularity = granularityOf(device);
  const size_t size = (bytes + granularity - 1) / granularity * granularity;
  const CUmemAllocationProp prop = propertiesFor(device);
  CUmemGenericAllocationHandle handle = 0;
  check(d.create(&handle, size, &prop, 0), "cuMemCreate");
  try {
    return mapHandle(device, handle, size, granularity);
  } catch (...) {
    d.release(handle);
    throw;
  }
}

bool cumemOwns(const void* p) {
  std::lock_guard<std::mutex> lock(mappings().mutex);
  return mappings().live.count(p) != 0;
}

void cumemFree(void* p) {
  Mapping m{};
  {
    std::lock_guard<std::mutex> lock(mappings().mutex);
    auto it = mappings().live.find(p);
    if (it == mappings().live.end()) return;
    m = it->second;
    mappings().live.erase(it);
  }
  if (!m.offer.token.empty()) fds::withdraw(m.offer.token);
  const Driver& d = Driver::get();
  const CUdeviceptr ptr = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p));
  if (!m.suspended) d.unmap(ptr, m.bytes);
  d.addressFree(ptr, m.bytes);
  if (!m.suspended) d.release(m.handle);
}

size_t cumemSuspendable(const void* p) {
  std::lock_guard<std::mutex> lock(mappings().mutex);
  auto it = mappings().live.find(p);
  if (it == mappings().live.end()) return 0;
  const Mapping& m = it->second;
  return m.imported || m.exported ? 0 : m.bytes;
}

size_t cumemSize(const void* p) {
  std::lock_guard<std::mutex> lock(mappings().mutex);
  auto it = mappings().live.find(p);
  return it == mappings().live.end() ? 0 : it->second.bytes;
}

void cumemSuspend(void* p) {
  std::lock_guard<std::mutex> lock(mappings().mutex);
  auto it = mappings().live.find(p);
  if (it == mappings().live.end() || it->second.imported || it->second.exported || it->second.suspended) {
    fail(ncclInternalError, "cuMem suspend of %p, which is no mapping of this process's own unshared memory", p);
  }
  Mapping& m = it->second;
  const Driver& d = Driver::get();
  const CUdeviceptr ptr = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p));
  check(d.unmap(ptr, m.bytes), "cuMemUnmap");
  d.release(m.handle);  // (unmapped, the handle was the last reference: the physical memory goes)
  m.handle = 0;
  m.suspended = true;
}

void cumemResume(void* p) {
  const Mapping m = suspendedMapping(p, /*imported=*/false);
  const Driver& d = Driver::get();
  const CUmemAllocationProp prop = propertiesFor(m.device);
  CUmemGenericAllocationHandle handle = 0;
  check(d.create(&handle, m.bytes, &prop, 0), "cuMemCreate");
  mapAgain(p, m, handle);
}

int cumemExport(void* p, size_t* bytes, bool peerReimports) {
  Mapping m{};
  {
    std::lock_guard<std::mutex> lock(mappings().mutex);
    auto it = mappings().live.find(p);
    if (it == mappings().live.end()) fail(ncclInternalError, "cuMem export of %p, which Braid did not map", p);
    if (it->second.suspended) fail(ncclInternalError, "cuMem export of %p, whose memory is suspended", p);
    // (another process may map these pages from now on: suspend keeps them, unless it lets go too)
    if (!peerReimports) it->second.exported = true;
    m = it->second;
  }
  int fd = -1;
  check(Driver::get().exportHandle(&fd, m.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
        "cuMemExportToShareableHandle");
  *bytes = m.bytes;
  return fd;
}

void* cumemImport(int device, int fd, size_t bytes) {
  const Driver& d = Driver::get();
  cudaFree(nullptr);
  CUmemGenericAllocationHandle handle = 0;
  check(d.importHandle(&handle, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
        "cuMemImportFromShareableHandle");
  void* p = nullptr;
  try {
    // Mapped for `device` (this rank's) and every device that reaches it, as NCCL maps what it
    // imports. Never by the memory's own device as the handle reports it: an ordinal, which
    // under CUDA_VISIBLE_DEVICES narrowed differently in the two processes may name another GPU
    // here or none. The exporter's size is a multiple of its granularity; the reservation is
    // aligned to this device's.
    p = mapHandle(device, handle, bytes, granularityOf(device));
  } catch (const Error& e) {
    d.release(handle);
    fail(ncclInvalidUsage, "CUDA device %d cannot map the memory another process shared (%s): it is on a GPU "
                           "out of this device's reach (no peer access)", device, e.what());
  } catch (...) {
    d.release(handle);
    throw;
  }
  std::lock_guard<std::mutex> lock(mappings().mutex);
  mappings().live[p].imported = true;
  return p;
}

void cumemSuspendImport(void* p) {
  std::lock_guard<std::mutex> lock(mappings().mutex);
  auto it = mappings().live.find(p);
  if (it == mappings().live.end() || !it->second.imported || it->second.suspended) {
    fail(ncclInternalError, "cuMem suspend of the import at %p, which is no live mapping of another process's memory",
         p);
  }
  Mapping& m = it->second;
  const Driver& d = Driver::get();
  check(d.unmap(static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)), m.bytes), "cuMemUnmap");
  d.release(m.handle);  // (this process's reference: the exporter's release frees the memory)
  m.handle = 0;
  m.suspended = true;
}

void cumemResumeImport(void* p, int fd, size_t bytes) {
  const Mapping m = suspendedMapping(p, /*imported=*/true);
  if (bytes != m.bytes) {
    fail(ncclSystemError, "a peer's new memory handle maps %zu bytes, but %zu are reserved for it at %p", bytes,
         m.bytes, p);
  }
  CUmemGenericAllocationHandle handle = 0;
  check(Driver::get().importHandle(&handle, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
        "cuMemImportFromShareableHandle");
  mapAgain(p, m, handle);
}

int dmabufFd(int device, void* p, size_t bytes, uint64_t* offset, std::string* why) {
  const Driver& d = Driver::get();
  int supported = 0;
  if (d.rangeHandle == nullptr || d.attribute == nullptr) {
    *why = "the driver lacks cuMemGetHandleForAddressRange";
  } else if (d.attribute(&supported, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, device) != CUDA_SUCCESS || !supported) {
    *why = "CUDA device " + std::to_string(device) + " cannot export its memory as dma-buf";
  } else {
    // The export covers whole host pages (what the driver asks): those around [p, p + bytes).
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t begin = reinterpret_cast<uintptr_t>(p) / page * page;
    const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes + page - 1) / page * page;
    int fd = -1;
    const CUresult r = d.rangeHandle(&fd, static_cast<CUdeviceptr>(begin), end - begin, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (r == CUDA_SUCCESS) {
      markExported(p);  // (a NIC maps these pages: suspend keeps them)
      *offset = reinterpret_cast<uintptr_t>(p) - begin;
      return fd;
    }
    const char* name = "unknown error";
    if (d.errorName != nullptr) d.errorName(r, &name);
    *why = std::string("cuMemGetHandleForAddressRange failed: ") + name;
  }
  return -1;
}

bool cumemFind(const void* p, size_t bytes, void** base, size_t* size) {
  std::lock_guard<std::mutex> lock(mappings().mutex);
  auto& live = mappings().live;
  auto it = live.upper_bound(p);  // the first mapping above p: the one before it may hold p
  if (it == live.begin()) return false;
  --it;
  const char* start = static_cast<const char*>(it->first);
  const char* q = static_cast<const char*>(p);
  if (it->second.imported || q >= start + it->second.bytes || static_cast<size_t>(start + it->second.bytes - q) < bytes) {
    return false;
  }
  *base = const_cast<void*>(it->first);
  *size = it->second.bytes;
  return true;
}

fds::Offer cumemShare(void* base) {
  {
    std::lock_guard<std::mutex> lock(mappings().mutex);
    auto it = mappings().live.find(base);
    if (it == mappings().live.end()) fail(ncclInternalError, "cuMem share of %p, which Braid did not map", base);
    if (!it->second.offer.token.empty()) return it->second.offer;
  }
  size_t bytes = 0;
  const int fd = cumemExport(base, &bytes);
  fds::Offer offered{};
  try {
    offered = fds::offer(fd);
  } catch (...) {
    close(fd);
    throw;
  }
  close(fd);  // (the offer keeps its own)
  std::lock_guard<std::mutex> lock(mappings().mutex);
  auto it = mappings().live.find(base);
  if (it == mappings().live.end() || !it->second.offer.token.empty()) {  // freed, or shared by another thread meanwhile
    fds::withdraw(offered.token);
    if (it == mappings().live.end()) fail(ncclInvalidArgument, "the memory at %p was freed while being shared", base);
    return it->second.offer;
  }
  it->second.offer = offered;
  return offered;
}

}  // namespace braid::runtime::cuda
