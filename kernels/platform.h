// The one file that knows which compiler reads the kernels.
//
// Kernel code is written once and compiled twice: by nvcc for the GPU, and by the host C++
// compiler for the host executor. Everything that differs between the two lives here: the
// function qualifiers, atomics (acquire/release, system scope), fences, and how a waiting
// thread backs off. Nothing else in kernels/ may test __CUDACC__ or __CUDA_ARCH__.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <atomic>

// BRAID_OUTLINE: compiled once and called rather than inlined into every instantiation (which
// costs build time, not speed): once-per-operation code and the slow half of waits. Not
// "cold": that would compile the spin loops for size and slow the wake-up.
#if defined(__CUDACC__)
#define BRAID_HOST_DEVICE __host__ __device__
#define BRAID_INLINE __host__ __device__ __forceinline__
#define BRAID_OUTLINE inline __host__ __device__ __noinline__
#else
#define BRAID_HOST_DEVICE
#define BRAID_INLINE inline __attribute__((always_inline))
#define BRAID_OUTLINE inline __attribute__((noinline))
#endif

/// Before a loop of a constant count (at most 16): unrolled, so that arrays indexed by its
/// counter stay in registers, on a GPU and on the host alike.
#if defined(__CUDA_ARCH__)
#define BRAID_UNROLL _Pragma("unroll")
#elif defined(__CUDACC__)
#define BRAID_UNROLL  // (nvcc's host pass: that code never runs, and nvcc knows no GCC pragma)
#else
#define BRAID_UNROLL _Pragma("GCC unroll 16")
#endif

#if defined(__CUDACC__) || defined(BRAID_KERNELS_USE_CCCL)
#include <cuda/atomic>
#define BRAID_ATOMIC_REF(T) cuda::atomic_ref<T, cuda::thread_scope_system>
#define BRAID_ORDER(o) cuda::std::memory_order_##o
#else
#include <sched.h>
#include <time.h>
#define BRAID_ATOMIC_REF(T) std::atomic_ref<T>
#define BRAID_ORDER(o) std::memory_order_##o
#endif

namespace braid::kernels {

/// How the threads of a group split a range of work: by stride on the GPU (neighbouring threads
/// touch neighbouring words, so a warp's accesses coalesce), in contiguous runs on the host
/// (each thread its own cache lines).
#if defined(__CUDA_ARCH__)
constexpr bool kStridedShares = true;
#else
constexpr bool kStridedShares = false;
#endif

/// Paired arithmetic on two 16-bit floats in one 32-bit word (the low half the first element),
/// rounded to nearest even: add.rn / mul.rn .f16x2 (sm_53 on) and .bf16x2 (sm_90 on). Callers
/// test kNativeHalfPairs / kNativeBf16Pairs (with `if constexpr`) before calling; elsewhere
/// the functions are declared only. Their results are the bits reduce.h's float arithmetic
/// gives (a sum or product of two such floats rounded to float and then to 16 bits is rounded
/// once: float's 24 bits are at least twice 11, plus 2), but for the bits of a NaN and for
/// bfloat16 products outside float's normal range (where float itself rounds to infinity or to
/// fewer bits). test/unit/kernels/reduce_copy_test.cc checks the claim.
#if defined(__CUDA_ARCH__)
constexpr bool kNativeHalfPairs = __CUDA_ARCH__ >= 530;
constexpr bool kNativeBf16Pairs = __CUDA_ARCH__ >= 900;
template <bool kBf16>
__device__ __forceinline__ uint32_t pairAdd(uint32_t a, uint32_t b) {
  uint32_t r;
  if constexpr (kBf16) {
    asm("add.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  } else {
    asm("add.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  }
  return r;
}
template <bool kBf16>
__device__ __forceinline__ uint32_t pairMul(uint32_t a, uint32_t b) {
  uint32_t r;
  if constexpr (kBf16) {
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  } else {
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  }
  return r;
}
/// Per element, the larger (kMin: the smaller) of two 16-bit floats, f16x2 or bf16x2, in one
/// instruction (sm_80 on: kNativeHalfMinMax). A NaN loses to a number, two NaNs give the
/// canonical NaN 0x7fff, and +0 counts above -0 (as NCCL's __hmax2/__hmin2); reduce.h's
/// Arith gives the same bits where the instruction is absent.
constexpr bool kNativeHalfMinMax = __CUDA_ARCH__ >= 800;
template <bool kBf16, bool kMin>
__device__ __forceinline__ uint32_t pairMinMax(uint32_t a, uint32_t b) {
  uint32_t r;
  if constexpr (kBf16 && kMin) {
    asm("min.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  } else if constexpr (kBf16) {
    asm("max.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  } else if constexpr (kMin) {
    asm("min.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  } else {
    asm("max.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  }
  return r;
}
/// Two fp8 values (e4m3, or e5m2 with kE5m2) in 16 bits to two halves in 32 bits, and back
/// rounded to nearest even, saturating to the largest finite value (sm_89 on: kNativeFp8Pairs).
/// A sum or product of two fp8 values computed in half and rounded to fp8 is the one computed
/// in float (half's 11 bits are at least twice fp8's 4, plus 2), so fp8 reduces through these.
constexpr bool kNativeFp8Pairs = __CUDA_ARCH__ >= 890;
template <bool kE5m2>
__device__ __forceinline__ uint32_t fp8PairToHalves(uint16_t v) {
  uint32_t r;
  if constexpr (kE5m2) {
    asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(r) : "h"(v));
  } else {
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(v));
  }
  return r;
}
template <bool kE5m2>
__device__ __forceinline__ uint16_t halvesToFp8Pair(uint32_t v) {
  uint16_t r;
  if constexpr (kE5m2) {
    asm("cvt.rn.satfinite.e5m2x2.f16x2 %0, %1;" : "=h"(r) : "r"(v));
  } else {
    asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(r) : "r"(v));
  }
  return r;
}
#else
// Without the instructions: never called (callers test the constants), defined only so that
// every compiler pass sees a body; they stop the program if that rule is ever broken.
constexpr bool kNativeHalfPairs = false;
constexpr bool kNativeBf16Pairs = false;
constexpr bool kNativeFp8Pairs = false;
constexpr bool kNativeHalfMinMax = false;
template <bool kBf16>
BRAID_INLINE uint32_t pairAdd(uint32_t, uint32_t) { __builtin_trap(); }
template <bool kBf16, bool kMin>
BRAID_INLINE uint32_t pairMinMax(uint32_t, uint32_t) { __builtin_trap(); }
template <bool kBf16>
BRAID_INLINE uint32_t pairMul(uint32_t, uint32_t) { __builtin_trap(); }
template <bool kE5m2>
BRAID_INLINE uint32_t fp8PairToHalves(uint16_t) { __builtin_trap(); }
template <bool kE5m2>
BRAID_INLINE uint16_t halvesToFp8Pair(uint32_t) { __builtin_trap(); }
#endif

/// Atomic accesses to memory another rank (thread, process or GPU) reads or writes.
/// Every flag and counter shared between ranks goes through these.
template <typename T>
BRAID_INLINE T loadAcquire(T* p) {
  return BRAID_ATOMIC_REF(T)(*p).load(BRAID_ORDER(acquire));
}
template <typename T>
BRAID_INLINE T loadRelaxed(T* p) {
  return BRAID_ATOMIC_REF(T)(*p).load(BRAID_ORDER(relaxed));
}
template <typename T>
BRAID_INLINE void storeRelease(T* p, T v) {
  BRAID_ATOMIC_REF(T)(*p).store(v, BRAID_ORDER(release));
}
template <typename T>
BRAID_INLINE void storeRelaxed(T* p, T v) {
  BRAID_ATOMIC_REF(T)(*p).store(v, BRAID_ORDER(relaxed));
}

/// Orders this thread's accesses to shared memory before the fence before those after it
/// (a seqlock writer's between marking its words as changing and changing them).
BRAID_INLINE void fenceFull() {
#if defined(__CUDACC__) || defined(BRAID_KERNELS_USE_CCCL)
  cuda::atomic_thread_fence(BRAID_ORDER(seq_cst), cuda::thread_scope_system);
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

/// Orders this thread's earlier accesses before its later stores, as a release store would
/// (a relaxed store after it that an acquire load reads synchronises with that load): one fence
/// for several words published together (primitives.h, publish: head and tail).
BRAID_INLINE void fenceRelease() {
#if defined(__CUDACC__) || defined(BRAID_KERNELS_USE_CCCL)
  cuda::atomic_thread_fence(BRAID_ORDER(release), cuda::thread_scope_system);
#else
  std::atomic_thread_fence(std::memory_order_release);
#endif
}

/// 16 bytes at p (16-byte aligned) as two 64-bit words: on the GPU one volatile 16-byte access
/// (polled memory, never cached stale); on the host two relaxed atomic 8-byte ones. For LL
/// lines, whose words each carry their own flag: a reader sees each word whole either way.
BRAID_INLINE void loadPair(const void* p, uint64_t* lo, uint64_t* hi) {
#if defined(__CUDA_ARCH__)
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(*lo), "=l"(*hi) : "l"(p) : "memory");
#else
  uint64_t* words = static_cast<uint64_t*>(const_cast<void*>(p));
  *lo = loadRelaxed(words);
  *hi = loadRelaxed(words + 1);
#endif
}
BRAID_INLINE void storePair(void* p, uint64_t lo, uint64_t hi) {
#if defined(__CUDA_ARCH__)
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(lo), "l"(hi) : "memory");
#else
  uint64_t* words = static_cast<uint64_t*>(p);
  storeRelaxed(words, lo);
  storeRelaxed(words + 1, hi);
#endif
}

/// LL128 (primitives.h, stepLL128): whether the 16-byte volatile stores a warp issues together
/// for one 128-byte line reach every reader whole, and a warp's 16-byte loads of it read it
/// whole, so that a line's flag can travel in the same instruction as its data with no fence
/// between. NCCL's LL128 rests on the same property of NVIDIA GPUs and their links (it turns
/// LL128 off where they lack it). The host has no such thing: its lanes are threads, and a
/// line's flag is stored with release after they all wrote, and loaded with acquire.
#if defined(__CUDA_ARCH__)
constexpr bool kLinesLandWhole = true;
#else
constexpr bool kLinesLandWhole = false;
#endif

#if !defined(__CUDACC__)
/// Pause-spins a host wait makes before it yields its core (backOff): 64, or a few once this
/// host's ranks outnumber its CPUs (setHostOversubscribed), where a spinning rank holds a core
/// that the rank it waits for needs (Open MPI likewise yields at once when oversubscribed).
inline std::atomic<uint32_t> hostSpinsBeforeYield{64};
/// Called as a host communicator learns that its host's ranks outnumber the CPUs (process-wide,
/// never undone: another communicator of the process shares the same CPUs).
inline void setHostOversubscribed() { hostSpinsBeforeYield.store(8, std::memory_order_relaxed); }
#endif

/// Called by a thread that found nothing to do `spins` times in a row: spins at first,
/// then yields, then sleeps briefly, so that many ranks on few cores still progress.
BRAID_INLINE void backOff(uint32_t spins) {
#if defined(__CUDA_ARCH__)
  if (spins > 64) __nanosleep(spins > 4096 ? 1000 : 100);
#elif defined(__CUDACC__)
  (void)spins;  // host side of a host-device function compiled by nvcc: never waits here
#else
  if (spins < hostSpinsBeforeYield.load(std::memory_order_relaxed)) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();  // tells the core this is a spin: cheaper exit, kinder to a sibling thread
#endif
    return;
  }
  if (spins < 2048) {
    sched_yield();
    return;
  }
  const timespec pause = {0, spins < 16384 ? 2000 : 50000};
  nanosleep(&pause, nullptr);
#endif
}

/// The result of a bounded wait.
enum class WaitResult : int { kReady = 0, kAborted = 1 };

/// How many passes a waiting thread makes between polls of the abort word (a power of 2): on
/// the host a look at the word itself, which is local; on a GPU a look at the block's
/// AbortWatch in shared memory, and at the word only when the watch says it is the block's
/// turn (blockAbortRaised). Either way a pass past the 64th sleeps (backOff), so every 64th
/// pass sees an abort within about 100 us on a GPU.
constexpr uint32_t kAbortPollEvery = 64;

/// A thread block's shared view of the abort word, so that its waiting threads do not each
/// read host memory across the bus (the word is host memory on a GPU): `seen` is set once any
/// of them read the word raised, and `nextLook` is the time (ns) from which the next thread to
/// poll reads the word, claimed by a compare-and-swap so that one thread a period reads it,
/// whichever threads wait then. An abort is seen by every polling thread at most `period`
/// after it is raised, plus its poll interval. Zeroed by thread 0 before the block's first wait.
struct AbortWatch {
  uint32_t seen;
  uint64_t nextLook;
};

#if defined(__CUDACC__) || defined(BRAID_KERNELS_USE_CCCL)
#define BRAID_BLOCK_ATOMIC_REF(T) cuda::atomic_ref<T, cuda::thread_scope_block>
#else
#define BRAID_BLOCK_ATOMIC_REF(T) std::atomic_ref<T>
#endif

/// Any thread of the group that owns `watch`, in a wait, every kAbortPollEvery passes: whether
/// the communicator was aborted, reading *abortFlag only when `now` has reached the watch's
/// next look and this thread won it (the next one is then `period` later).
BRAID_INLINE bool pollAbortWatch(AbortWatch& watch, const uint32_t* abortFlag, uint64_t now, uint64_t period) {
  if (BRAID_BLOCK_ATOMIC_REF(uint32_t)(watch.seen).load(BRAID_ORDER(relaxed)) != 0) return true;
  BRAID_BLOCK_ATOMIC_REF(uint64_t) next(watch.nextLook);
  uint64_t due = next.load(BRAID_ORDER(relaxed));
  if (now < due || !next.compare_exchange_strong(due, now + period, BRAID_ORDER(relaxed))) return false;
  if (loadRelaxed(const_cast<uint32_t*>(abortFlag)) == 0) return false;
  BRAID_BLOCK_ATOMIC_REF(uint32_t)(watch.seen).store(1, BRAID_ORDER(relaxed));
  return true;
}

#if defined(__CUDACC__)
/// The GPU's global timer, in nanoseconds. (Declared in nvcc's host pass too, where the
/// __device__ code that calls it is parsed though never compiled.)
__device__ inline uint64_t globalTimer() {
#if defined(__CUDA_ARCH__)
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#else
  return 0;
#endif
}
#endif

#if defined(__CUDA_ARCH__)
/// The block's AbortWatch (one per block: shared memory), and how often its threads read the
/// abort word between them: once in 20 us, where each waiting thread had read it (a few
/// hundred threads of an LL step a block, every 1024 passes).
static __shared__ AbortWatch blockAbortWatch;
constexpr uint64_t kAbortLookNs = 20000;
#endif

/// Thread 0, as a kernel's block starts (before the barrier that precedes any wait): clears
/// the block's AbortWatch. Nothing on the host, whose waits read the word themselves.
BRAID_INLINE void resetAbortWatch() {
#if defined(__CUDA_ARCH__)
  blockAbortWatch.seen = 0;
  blockAbortWatch.nextLook = 0;
#endif
}

/// Any waiting thread, every kAbortPollEvery passes: whether the communicator was aborted. On a
/// GPU through the block's AbortWatch (one read of host memory a block in kAbortLookNs); on the
/// host the word itself.
BRAID_INLINE bool abortRaised(const uint32_t* abortFlag) {
#if defined(__CUDA_ARCH__)
  return pollAbortWatch(blockAbortWatch, abortFlag, globalTimer(), kAbortLookNs);
#else
  return loadRelaxed(const_cast<uint32_t*>(abortFlag)) != 0;
#endif
}

/// Spins until ready() holds or *abortFlag becomes non-zero. All threads that call it see
/// the same outcome only if they also synchronise; callers check the result.
template <typename Ready>
BRAID_INLINE WaitResult waitUntil(Ready ready, const uint32_t* abortFlag) {
  for (uint32_t spins = 0;; ++spins) {
    if (ready()) return WaitResult::kReady;
    if ((spins & (kAbortPollEvery - 1)) == kAbortPollEvery - 1 && abortRaised(abortFlag)) return WaitResult::kAborted;
    backOff(spins);
  }
}

}  // namespace braid::kernels
