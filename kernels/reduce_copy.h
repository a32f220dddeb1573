// The GPU's element loops: one Simple step's reduce and copy over a thread group whose threads
// take strided shares (kStridedShares), written as NCCL writes them.
//
// A step reads up to two sources (the received slot, this rank's input) and writes up to two
// destinations (the output, the send slot). Where every pointer it touches sits at the same
// offset within 16 bytes, the step runs in 16-byte packs: a short scalar head up to the first
// 16-byte boundary, then packs, kUnroll of them per thread per pass, every load of the pass
// issued before any arithmetic or store (so a thread keeps 4-8 loads in flight, which is what
// memory bandwidth wants), then a scalar tail of less than a pack. Thread t of s takes packs
// t, t + s, ... within a pass, so a warp's 32 accesses are 512 contiguous bytes. Pointers at
// different offsets run element by element (a reduction) or in the widest words all of them
// allow (a copy): correct, slower, and rare, since ring chunks are cut on 512-byte boundaries
// (ring_steps.h) and channels on 64-byte ones (the planner).
//
// No __restrict__ and no read-only loads: the received slot is rewritten by the peer during
// the kernel (every kSteps steps) and an in-place collective writes the input it reads, so
// nvcc must not turn these loads into non-coherent ones (ld.global.nc). Each loop loads into
// registers explicitly before it stores, which gives what restrict would.
//
// Who calls: every thread of the group, with the same arguments and its own rank. No barrier
// inside: the caller orders the step (the tail wait before, the head/tail publish after).
// The host runs these too, in the unit tests (a group played thread by thread, since no
// thread's share depends on another's), so the GPU's loops are checked without a GPU.
#pragma once

#include <type_traits>

#include "kernels/reduce.h"

namespace braid::kernels {

/// What a step combines (see primitives.h for their meaning).
enum StepFlags : uint32_t { kRecv = 1, kSend = 2, kInput = 4, kOutput = 8, kPost = 16, kPartial = 32, kMineFirst = 64 };

/// Sixteen bytes of elements: the unit of the vector path (one 16-byte load or store).
struct alignas(16) Pack {
  uint64_t w[2];
};
static_assert(sizeof(Pack) == 16);

template <typename T>
constexpr uint64_t kPackElems = sizeof(Pack) / sizeof(T);

/// Packs a thread handles per pass of the reduce loop (two sources: 8 loads in flight) and
/// of the copy loop (one source).
constexpr int kReduceUnroll = 4;
constexpr int kCopyUnroll = 8;

/// Whether the GPU computes T two (16-bit floats) or four (fp8) to a 32-bit word: in half
/// pairs for fp8, converted both ways in hardware (platform.h).
template <typename T>
constexpr bool kPairedType = (kNativeHalfPairs && std::is_same_v<T, Half>) ||
                             (kNativeBf16Pairs && std::is_same_v<T, BFloat16>) ||
                             (kNativeFp8Pairs && (std::is_same_v<T, Fp8E4M3> || std::is_same_v<T, Fp8E5M2>));
/// Whether the op's reduce is an addition (Sum, PreMulSum, SumPostDiv) or a multiplication
/// (Prod) that the GPU computes a word at a time for T.
template <typename T, typename Red>
constexpr bool kPairedAdd = kPairedType<T> && Red::kReduceIsAdd;
template <typename T, typename Red>
constexpr bool kPairedMul = kPairedType<T> && Red::kReduceIsMul;

/// The sums (or with kMul the products) of the elements of T in two 32-bit words, a word at
/// a time: f16x2 and bf16x2 directly, fp8 as two pairs of halves. Only where kPairedType<T>.
template <typename T, bool kMul>
BRAID_INLINE uint32_t pairedWord(uint32_t a, uint32_t b) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    constexpr bool kBf16 = std::is_same_v<T, BFloat16>;
    return kMul ? pairMul<kBf16>(a, b) : pairAdd<kBf16>(a, b);
  } else {
    constexpr bool kE5m2 = std::is_same_v<T, Fp8E5M2>;
    uint32_t r = 0;
    for (int half = 0; half < 2; ++half) {
      const uint32_t x = fp8PairToHalves<kE5m2>(static_cast<uint16_t>(a >> (16 * half)));
      const uint32_t y = fp8PairToHalves<kE5m2>(static_cast<uint16_t>(b >> (16 * half)));
      const uint32_t z = kMul ? pairMul<false>(x, y) : pairAdd<false>(x, y);
      r |= static_cast<uint32_t>(halvesToFp8Pair<kE5m2>(z)) << (16 * half);
    }
    return r;
  }
}

/// A 32-bit word holding `v` (an element of T's bits) in every element.
template <typename T>
BRAID_INLINE uint32_t splatWord(const T& v) {
  uint32_t bits = 0;
  memcpy(&bits, &v, sizeof(T));
  return sizeof(T) == 1 ? bits * 0x01010101u : bits * 0x00010001u;
}

/// f(a, b) on each 32-bit half of two packs' words.
template <typename F>
BRAID_INLINE Pack mapPairs(Pack a, Pack b, F f) {
  Pack r;
  for (int i = 0; i < 2; ++i) {
    const uint64_t lo = f(static_cast<uint32_t>(a.w[i]), static_cast<uint32_t>(b.w[i]));
    const uint64_t hi = f(static_cast<uint32_t>(a.w[i] >> 32), static_cast<uint32_t>(b.w[i] >> 32));
    r.w[i] = lo | (hi << 32);
  }
  return r;
}

/// f(x) on each element of a pack of T.
template <typename T, typename F>
BRAID_INLINE Pack mapElems(Pack a, F f) {
  T e[kPackElems<T>];
  memcpy(e, &a, sizeof(a));
  for (uint64_t j = 0; j < kPackElems<T>; ++j) e[j] = f(e[j]);
  memcpy(&a, e, sizeof(a));
  return a;
}

/// red.reduce(a, b) element-wise over packs: a word at a time where the GPU has the
/// instructions for T and the op (the same bits as reduce.h's float arithmetic: platform.h).
template <typename T, typename Red>
BRAID_INLINE Pack reducePack(const Red& red, Pack a, Pack b) {
  if constexpr (kPairedAdd<T, Red>) {
    return mapPairs(a, b, [](uint32_t x, uint32_t y) { return pairedWord<T, false>(x, y); });
  } else if constexpr (kPairedMul<T, Red>) {
    return mapPairs(a, b, [](uint32_t x, uint32_t y) { return pairedWord<T, true>(x, y); });
  } else {
    T x[kPackElems<T>], y[kPackElems<T>];
    memcpy(x, &a, sizeof(a));
    memcpy(y, &b, sizeof(b));
    for (uint64_t j = 0; j < kPackElems<T>; ++j) x[j] = red.reduce(x[j], y[j]);
    memcpy(&a, x, sizeof(a));
    return a;
  }
}

/// red.pre over a pack (PreMulSum's product with the scalar, paired where reduce is).
template <typename T, typename Red>
BRAID_INLINE Pack prePack(const Red& red, Pack a) {
  if constexpr (kPairedAdd<T, Red> && Red::kHasPre) {  // PreMulSum: x * scalar
    const uint32_t scalars = splatWord(red.scalar);
    return mapPairs(a, a, [scalars](uint32_t x, uint32_t) { return pairedWord<T, true>(x, scalars); });
  } else {
    return mapElems<T>(a, [&red](T x) { return red.pre(x); });
  }
}

/// The element arithmetic of a step: v is the received value (kRecv), x this rank's (kInput:
/// the op's pre step first; kPartial: as it is). Shared by the scalar and the pack loops, for
/// V = T (red's own functions) or V = Pack (the pack functions above).
template <typename T, typename Red, typename V>
BRAID_INLINE V combineValue(const Red& red, uint32_t flags, V v, V x) {
  constexpr bool kPacked = std::is_same_v<V, Pack>;
  if (flags & (kInput | kPartial)) {
    if (Red::kHasPre && (flags & kInput)) {
      if constexpr (kPacked) x = prePack<T>(red, x);
      else x = red.pre(x);
    }
    if (flags & kRecv) {
      const V first = (flags & kMineFirst) ? x : v;
      const V second = (flags & kMineFirst) ? v : x;
      if constexpr (kPacked) v = reducePack<T>(red, first, second);
      else v = red.reduce(first, second);
    } else {
      v = x;
    }
  }
  if (Red::kHasPost && (flags & kPost)) {
    if constexpr (kPacked) v = mapElems<T>(v, [&red](T e) { return red.post(e); });
    else v = red.post(v);
  }
  return v;
}

/// Elements [begin, end) of a step, thread `rank` of `size` taking every size-th element.
template <typename T, typename Red>
BRAID_INLINE void reduceCopyElems(const Red& red, uint32_t flags, const T* recv, const T* input, T* output, T* send,
                                  uint64_t begin, uint64_t end, uint64_t rank, uint64_t size) {
  for (uint64_t i = begin + rank; i < end; i += size) {
    const T v = combineValue<T>(red, flags, recv != nullptr ? recv[i] : T{}, input != nullptr ? input[i] : T{});
    if (output != nullptr) output[i] = v;
    if (send != nullptr) send[i] = v;
  }
}

/// nPacks packs from 16-byte-aligned pointers: passes of kReduceUnroll packs per thread, all
/// loads of a pass before its stores, then the packs left over one at a time.
template <typename T, typename Red>
BRAID_INLINE void reduceCopyPacks(const Red& red, uint32_t flags, const Pack* recv, const Pack* input, Pack* output,
                                  Pack* send, uint64_t nPacks, uint64_t rank, uint64_t size) {
  constexpr int kU = kReduceUnroll;
  uint64_t p = rank;
  for (; p + (kU - 1) * size < nPacks; p += kU * size) {
    Pack v[kU] = {}, x[kU] = {};
    if (recv != nullptr) {
      for (int u = 0; u < kU; ++u) v[u] = recv[p + u * size];
    }
    if (input != nullptr) {
      for (int u = 0; u < kU; ++u) x[u] = input[p + u * size];
    }
    for (int u = 0; u < kU; ++u) v[u] = combineValue<T>(red, flags, v[u], x[u]);
    if (output != nullptr) {
      for (int u = 0; u < kU; ++u) output[p + u * size] = v[u];
    }
    if (send != nullptr) {
      for (int u = 0; u < kU; ++u) send[p + u * size] = v[u];
    }
  }
  for (; p < nPacks; p += size) {
    const Pack v = combineValue<T>(red, flags, recv != nullptr ? recv[p] : Pack{}, input != nullptr ? input[p] : Pack{});
    if (output != nullptr) output[p] = v;
    if (send != nullptr) send[p] = v;
  }
}

/// The offset within 16 bytes that every non-null pointer shares, or -1 when they differ.
BRAID_INLINE int commonOffset16(const void* a, const void* b, const void* c, const void* d) {
  const void* const pointers[4] = {a, b, c, d};
  int offset = -1;
  for (const void* p : pointers) {
    if (p == nullptr) continue;
    const int o = static_cast<int>(reinterpret_cast<uintptr_t>(p) & 15);
    if (offset >= 0 && o != offset) return -1;
    offset = o;
  }
  return offset < 0 ? 0 : offset;
}

/// p + n elements as packs (null stays null).
template <typename T>
BRAID_INLINE const Pack* packsAt(const T* p, uint64_t n) {
  return p == nullptr ? nullptr : reinterpret_cast<const Pack*>(p + n);
}
template <typename T>
BRAID_INLINE Pack* packsAt(T* p, uint64_t n) {
  return p == nullptr ? nullptr : reinterpret_cast<Pack*>(p + n);
}

/// Thread `rank` of `size`: one step's arithmetic over n elements of T (see the file's
/// comment). Null pointers are the sources and destinations the step does not use. Out of
/// line, with the flags as a value: its loops then get registers of their own (inlined into
/// a collective kernel's dozens of steps, they spilled), and one copy serves every step.
template <typename T, typename Red>
BRAID_OUTLINE void reduceCopyStrided(const Red& red, uint32_t flags, const T* recv, const T* input, T* output, T* send,
                                    uint64_t n, uint64_t rank, uint64_t size) {
  const int offset = commonOffset16(recv, input, output, send);
  if (offset < 0 || offset % sizeof(T) != 0) {
    reduceCopyElems<T>(red, flags, recv, input, output, send, 0, n, rank, size);
    return;
  }
  uint64_t head = offset == 0 ? 0 : (16 - offset) / sizeof(T);
  head = head < n ? head : n;
  reduceCopyElems<T>(red, flags, recv, input, output, send, 0, head, rank, size);
  const uint64_t nPacks = (n - head) / kPackElems<T>;
  reduceCopyPacks<T>(red, flags, packsAt(recv, head), packsAt(input, head), packsAt(output, head), packsAt(send, head),
                     nPacks, rank, size);
  reduceCopyElems<T>(red, flags, recv, input, output, send, head + nPacks * kPackElems<T>, n, rank, size);
}

/// Words of type W (1 to 16 bytes) from `from` to a and b (either may be null): passes of
/// kCopyUnroll words per thread, all loads before the stores, then the words left over.
template <typename W>
BRAID_INLINE void copyWordsStrided(const W* from, W* a, W* b, uint64_t nWords, uint64_t rank, uint64_t size) {
  constexpr int kU = kCopyUnroll;
  uint64_t i = rank;
  for (; i + (kU - 1) * size < nWords; i += kU * size) {
    W v[kU];
    for (int u = 0; u < kU; ++u) v[u] = from[i + u * size];
    if (a != nullptr) {
      for (int u = 0; u < kU; ++u) a[i + u * size] = v[u];
    }
    if (b != nullptr) {
      for (int u = 0; u < kU; ++u) b[i + u * size] = v[u];
    }
  }
  for (; i < nWords; i += size) {
    const W v = from[i];
    if (a != nullptr) a[i] = v;
    if (b != nullptr) b[i] = v;
  }
}

/// Bytes [begin, end) of a copy at the stride.
BRAID_INLINE void copyBytesStrided(const char* from, char* a, char* b, uint64_t begin, uint64_t end, uint64_t rank,
                                   uint64_t size) {
  for (uint64_t i = begin + rank; i < end; i += size) {
    if (a != nullptr) a[i] = from[i];
    if (b != nullptr) b[i] = from[i];
  }
}

/// The head-words-tail copy in words of W bytes (every pointer congruent modulo W).
template <typename W>
BRAID_INLINE void copyAlignedStrided(const char* from, char* a, char* b, uint64_t bytes, uint64_t rank, uint64_t size) {
  const uint64_t misaligned = reinterpret_cast<uintptr_t>(from) % sizeof(W);
  uint64_t head = misaligned == 0 ? 0 : sizeof(W) - misaligned;
  head = head < bytes ? head : bytes;
  copyBytesStrided(from, a, b, 0, head, rank, size);
  const uint64_t nWords = (bytes - head) / sizeof(W);
  copyWordsStrided(reinterpret_cast<const W*>(from + head), a == nullptr ? nullptr : reinterpret_cast<W*>(a + head),
                   b == nullptr ? nullptr : reinterpret_cast<W*>(b + head), nWords, rank, size);
  copyBytesStrided(from, a, b, head + nWords * sizeof(W), bytes, rank, size);
}

/// Thread `rank` of `size`: its strided share of copying `bytes` from `from` to a and b
/// (either may be null), in the widest words (16, 8, 4, 2 bytes) in which all three pointers
/// sit at the same offset, with byte heads and tails. Out of line: one copy of it serves every
/// element type and call site.
BRAID_OUTLINE void copyStrided(const char* from, char* a, char* b, uint64_t bytes, uint64_t rank, uint64_t size) {
  const uintptr_t f = reinterpret_cast<uintptr_t>(from);
  const uintptr_t differ = (a != nullptr ? f ^ reinterpret_cast<uintptr_t>(a) : 0) |
                           (b != nullptr ? f ^ reinterpret_cast<uintptr_t>(b) : 0);
  if ((differ & 15) == 0) {
    copyAlignedStrided<Pack>(from, a, b, bytes, rank, size);
  } else if ((differ & 7) == 0) {
    copyAlignedStrided<uint64_t>(from, a, b, bytes, rank, size);
  } else if ((differ & 3) == 0) {
    copyAlignedStrided<uint32_t>(from, a, b, bytes, rank, size);
  } else if ((differ & 1) == 0) {
    copyAlignedStrided<uint16_t>(from, a, b, bytes, rank, size);
  } else {
    copyBytesStrided(from, a, b, 0, bytes, rank, size);
  }
}

}  // namespace braid::kernels
