/*
 * A stand-in for libcudart.so on a machine without a GPU, for test/netns/third_party_plugins.sh:
 * aws-ofi-nccl builds only against CUDA (or Neuron), and its init (built with
 * --enable-cudart-dynamic) dlopens "libcudart.so", asks it for the driver's entry points and
 * fails when there is no driver. Braid's CPU build hands the plugin host memory only
 * (NCCL_PTR_HOST), so the plugin needs the CUDA calls to answer, not to do anything:
 *   - the runtime and driver versions are 13.0;
 *   - the current device is 0, a context is current (null), and every device attribute is 0
 *     (so no GPUDirect RDMA, no dma-buf: the plugin offers host memory only);
 *   - a pointer's memory type is host;
 *   - every other driver call fails with CUDA_ERROR_NOT_SUPPORTED (801), so a plugin path
 *     that needed GPU memory fails loudly instead of pretending.
 * Nothing here is Braid: it only lets that plugin start here. Built by the script with cc.
 */
#include <stddef.h>
#include <string.h>

typedef int Result;  /* cudaError_t and CUresult: 0 is success */
enum { kSuccess = 0, kNotSupported = 801 };

Result cudaRuntimeGetVersion(int* version) {
  *version = 13000;
  return kSuccess;
}

static Result driverGetVersion(int* version) {
  *version = 13000;
  return kSuccess;
}

static Result errorText(Result code, const char** text) {
  *text = code == kSuccess ? "CUDA_SUCCESS (host shim)" : "not supported by the host-only CUDA shim";
  return kSuccess;
}

static Result ctxGetDevice(int* device) {
  *device = 0;
  return kSuccess;
}

static Result ctxGetCurrent(void** context) {
  *context = NULL;
  return kSuccess;
}

static Result ctxSetCurrent(void* context) {
  (void)context;
  return kSuccess;
}

static Result deviceGetAttribute(int* value, int attribute, int device) {
  (void)attribute;
  (void)device;
  *value = 0;
  return kSuccess;
}

/* CU_POINTER_ATTRIBUTE_MEMORY_TYPE (2) is CU_MEMORYTYPE_HOST (1); other attributes read 0. */
static Result pointerGetAttributes(unsigned count, const int* attributes, void** data, unsigned long long pointer) {
  (void)pointer;
  for (unsigned i = 0; i < count; ++i) {
    if (attributes[i] == 2) {
      *(unsigned*)data[i] = 1;
    } else {
      memset(data[i], 0, sizeof(int));
    }
  }
  return kSuccess;
}

static Result notSupported(void) { return kNotSupported; }

static void* entryPoint(const char* symbol) {
  static const struct {
    const char* name;
    void* function;
  } known[] = {
      {"cuDriverGetVersion", (void*)driverGetVersion},
      {"cuGetErrorString", (void*)errorText},
      {"cuGetErrorName", (void*)errorText},
      {"cuCtxGetDevice", (void*)ctxGetDevice},
      {"cuCtxGetCurrent", (void*)ctxGetCurrent},
      {"cuCtxSetCurrent", (void*)ctxSetCurrent},
      {"cuDeviceGetAttribute", (void*)deviceGetAttribute},
      {"cuPointerGetAttributes", (void*)pointerGetAttributes},
  };
  for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); ++i) {
    if (strcmp(known[i].name, symbol) == 0) return known[i].function;
  }
  return (void*)notSupported;
}

Result cudaGetDriverEntryPointByVersion(const char* symbol, void** function, unsigned version, unsigned long long flags,
                                        int* status) {
  (void)version;
  (void)flags;
  *function = entryPoint(symbol);
  if (status != NULL) *status = 0; /* cudaDriverEntryPointSuccess */
  return kSuccess;
}

Result cudaGetDriverEntryPoint(const char* symbol, void** function, unsigned long long flags, int* status) {
  return cudaGetDriverEntryPointByVersion(symbol, function, 13000, flags, status);
}
