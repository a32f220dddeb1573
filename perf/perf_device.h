// The *_perf tools' view of a GPU: device buffers, copies and a stream, through the CUDA runtime
// where the tools were built with CUDA (perf_cuda.cc), and nothing otherwise (perf_no_cuda.cc).
#pragma once

#include <cstddef>

namespace braid::perf::device {

/// Whether the ranks run on CUDA device 0 (as the library would choose): built with CUDA, an
/// NVIDIA driver present and BRAID_BACKEND not "host". Makes no CUDA call (ranks fork after
/// it). `why` says why not.
bool usable(const char** why);
/// On the calling thread: makes device `ordinal` current.
void select(int ordinal);
/// Device memory; call before the ranks start their kernels (cudaMalloc and cudaFree may wait
/// for the whole device).
void* allocate(size_t bytes);
void release(void* p);
/// Copies on `stream` (the rank's own) and waits for it: a copy on the legacy stream would not
/// be ordered with the rank's non-blocking stream, and the device-wide waits of cudaMemcpy's
/// could wait for other ranks' kernels that wait for this rank.
void toDevice(void* dst, const void* src, size_t bytes, void* stream);
void toHost(void* dst, const void* src, size_t bytes, void* stream);
/// A stream of its own (non-blocking), for one rank.
void* newStream();
void deleteStream(void* stream);
void synchronize(void* stream);
/// The device's name and its device-to-device copy bandwidth (GB/s, cudaMemcpy of `bytes`).
const char* name();
double copyBandwidth(size_t bytes);

}  // namespace braid::perf::device
