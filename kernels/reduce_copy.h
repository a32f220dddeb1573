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
// different offsets within 16 bytes run the same loop in the widest packs in which they all
// sit at one offset (8, 4 or 2 bytes, or one element), with more packs a pass (8 to 32 loads
// in flight): a ReduceScatter whose per-rank count is not a multiple of 16 bytes reads its
// input at such offsets from the 16-byte-aligned slots, so this is not rare there, although
// ring chunks are cut on 512-byte boundaries (ring_steps.h) and channels on 64-byte ones.
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

/// kBytes of elements (16, 8, 4, 2 or 1): the unit of the pack loops, one load or store each.
/// Words of 8 bytes where they fit (a 16-byte pack is then one ld/st.v2.u64), else one word.
template <int kBytes>
struct alignas(kBytes) BytePack {
  using Word = std::conditional_t<(kBytes >= 8), uint64_t,
                                  std::conditional_t<kBytes == 4, uint32_t, std::conditional_t<kBytes == 2, uint16_t, uint8_t>>>;
  Word w[kBytes / sizeof(Word)];
};
using Pack = BytePack<16>;
static_assert(sizeof(Pack) == 16 && sizeof(BytePack<2>) == 2);

/// The bytes of V if it is a pack, else 0 (V is an element).
template <typename V>
constexpr int kPackBytes = 0;
template <int kBytes>
constexpr int kPackBytes<BytePack<kBytes>> = kBytes;

template <typename T>
constexpr uint64_t kPackElems = sizeof(Pack) / sizeof(T);

/// 16-byte packs a thread handles per pass of the reduce loop (two sources: 8 loads in flight)
/// and words per pass of the copy loop (one source).
constexpr int kReduceUnroll = 4;
constexpr int kCopyUnroll = 8;
/// Packs per pass for packs of kBytes: narrower packs (pointers that differ modulo 16) take
/// more of them, half as many bytes a pass as 16-byte packs and at most 16, so that a thread
/// still has 8 to 32 loads in flight with two sources (NCCL's element-sized packs take as
/// many for 4- and 2-byte elements: 4 * 16 / size / 2).
template <int kBytes>
constexpr int kUnrollFor = kBytes == 16 ? kReduceUnroll
                           : kReduceUnroll * 8 / kBytes < kReduceUnroll ? kReduceUnroll
                           : kReduceUnroll * 8 / kBytes > 16            ? 16
                                                                        : kReduceUnroll * 8 / kBytes;

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
/// Whether the op is Max or Min on a 16-bit float and the GPU has max/min .f16x2/.bf16x2.
template <typename T, typename Red>
constexpr bool kPairedMinMax = kNativeHalfMinMax && (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) &&
                               (Red::kReduceIsMax || Red::kReduceIsMin);

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

/// f(a, b) on each 32-bit word of two packs of 4 bytes or more.
template <int kBytes, typename F>
BRAID_INLINE BytePack<kBytes> mapPairs(BytePack<kBytes> a, BytePack<kBytes> b, F f) {
  static_assert(kBytes >= 4);
  BytePack<kBytes> r;
  for (size_t i = 0; i < sizeof(a.w) / sizeof(a.w[0]); ++i) {
    if constexpr (kBytes >= 8) {
      const uint64_t lo = f(static_cast<uint32_t>(a.w[i]), static_cast<uint32_t>(b.w[i]));
      const uint64_t hi = f(static_cast<uint32_t>(a.w[i] >> 32), static_cast<uint32_t>(b.w[i] >> 32));
      r.w[i] = lo | (hi << 32);
    } else {
      r.w[i] = f(a.w[i], b.w[i]);
    }
  }
  return r;
}

/// f(x) on each element of a pack of T.
template <typename T, int kBytes, typename F>
BRAID_INLINE BytePack<kBytes> mapElems(BytePack<kBytes> a, F f) {
  T e[kBytes / sizeof(T)];
  memcpy(e, &a, sizeof(a));
  for (size_t j = 0; j < kBytes / sizeof(T); ++j) e[j] = f(e[j]);
  memcpy(&a, e, sizeof(a));
  return a;
}

/// red.reduce(a, b) element-wise over packs: a word at a time where the GPU has the
/// instructions for T and the op (the same bits as reduce.h's arithmetic: platform.h), else
/// element by element (still in hardware instructions for 16-bit floats: reduce.h).
template <typename T, typename Red, int kBytes>
BRAID_INLINE BytePack<kBytes> reducePack(const Red& red, BytePack<kBytes> a, BytePack<kBytes> b) {
  constexpr bool kWords = kBytes >= 4;
  if constexpr (kWords && kPairedAdd<T, Red>) {
    return mapPairs(a, b, [](uint32_t x, uint32_t y) { return pairedWord<T, false>(x, y); });
  } else if constexpr (kWords && kPairedMul<T, Red>) {
    return mapPairs(a, b, [](uint32_t x, uint32_t y) { return pairedWord<T, true>(x, y); });
  } else if constexpr (kWords && kPairedMinMax<T, Red>) {
    return mapPairs(a, b, [](uint32_t x, uint32_t y) {
      return pairMinMax<std::is_same_v<T, BFloat16>, Red::kReduceIsMin>(x, y);
    });
  } else {
    T x[kBytes / sizeof(T)], y[kBytes / sizeof(T)];
    memcpy(x, &a, sizeof(a));
    memcpy(y, &b, sizeof(b));
    for (size_t j = 0; j < kBytes / sizeof(T); ++j) x[j] = red.reduce(x[j], y[j]);
    memcpy(&a, x, sizeof(a));
    return a;
  }
}

/// red.pre over a pack (PreMulSum's product with the scalar, paired where reduce is).
template <typename T, typename Red, int kBytes>
BRAID_INLINE BytePack<kBytes> prePack(const Red& red, BytePack<kBytes> a) {
  if constexpr (kBytes >= 4 && kPairedAdd<T, Red> && Red::kHasPre) {  // PreMulSum: x * scalar
    const uint32_t scalars = splatWord(red.scalar);
    return mapPairs(a, a, [scalars](uint32_t x, uint32_t) { return pairedWord<T, true>(x, scalars); });
  } else {
    return mapElems<T>(a, [&red](T x) { return red.pre(x); });
  }
}

/// The element arithmetic of a step: v is the received value (kRecv), x this rank's (kInput:
/// the op's pre step first; kPartial: as it is). Shared by the scalar and the pack loops, for
/// V = T (red's own functions) or V = a BytePack (the pack functions above).
template <typename T, typename Red, typename V>
BRAID_INLINE V combineValue(const Red& red, uint32_t flags, V v, V x) {
  constexpr bool kPacked = kPackBytes<V> != 0;
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

/// nPacks packs P from pointers aligned to them: passes of kUnrollFor packs per thread, all
/// loads of a pass before its stores, then the packs left over one at a time.
template <typename T, typename Red, typename P>
BRAID_INLINE void reduceCopyPacks(const Red& red, uint32_t flags, const P* recv, const P* input, P* output, P* send,
                                  uint64_t nPacks, uint64_t rank, uint64_t size) {
  constexpr int kU = kUnrollFor<kPackBytes<P>>;
  uint64_t p = rank;
  for (; p + (kU - 1) * size < nPacks; p += kU * size) {
    P v[kU] = {}, x[kU] = {};
    if (recv != nullptr) {
      BRAID_UNROLL
      for (int u = 0; u < kU; ++u) v[u] = recv[p + u * size];
    }
    if (input != nullptr) {
      BRAID_UNROLL
      for (int u = 0; u < kU; ++u) x[u] = input[p + u * size];
    }
    BRAID_UNROLL
    for (int u = 0; u < kU; ++u) v[u] = combineValue<T>(red, flags, v[u], x[u]);
    if (output != nullptr) {
      BRAID_UNROLL
      for (int u = 0; u < kU; ++u) output[p + u * size] = v[u];
    }
    if (send != nullptr) {
      BRAID_UNROLL
      for (int u = 0; u < kU; ++u) send[p + u * size] = v[u];
    }
  }
  for (; p < nPacks; p += size) {
    const P v = combineValue<T>(red, flags, recv != nullptr ? recv[p] : P{}, input != nullptr ? input[p] : P{});
    if (output != nullptr) output[p] = v;
    if (send != nullptr) send[p] = v;
  }
}

/// p + n elements as packs P (null stays null).
template <typename P, typename T>
BRAID_INLINE const P* packsAt(const T* p, uint64_t n) {
  return p == nullptr ? nullptr : reinterpret_cast<const P*>(p + n);
}
template <typename P, typename T>
BRAID_INLINE P* packsAt(T* p, uint64_t n) {
  return p == nullptr ? nullptr : reinterpret_cast<P*>(p + n);
}

/// The step in packs of kBytes, every pointer at the same offset `at` (its address) modulo
/// kBytes: elements up to the first kBytes boundary, packs, then the elements left over.
template <typename T, typename Red, int kBytes>
BRAID_INLINE void reduceCopyHeadPacksTail(const Red& red, uint32_t flags, const T* recv, const T* input, T* output,
                                          T* send, uint64_t n, uint64_t rank, uint64_t size, uintptr_t at) {
  using P = BytePack<kBytes>;
  constexpr uint64_t kElems = kBytes / sizeof(T);
  const uint64_t offset = at % kBytes;
  uint64_t head = offset == 0 ? 0 : (kBytes - offset) / sizeof(T);
  head = head < n ? head : n;
  if constexpr (kElems > 1) reduceCopyElems<T>(red, flags, recv, input, output, send, 0, head, rank, size);
  const uint64_t nPacks = (n - head) / kElems;
  reduceCopyPacks<T>(red, flags, packsAt<P>(recv, head), packsAt<P>(input, head), packsAt<P>(output, head),
                     packsAt<P>(send, head), nPacks, rank, size);
  if constexpr (kElems > 1) reduceCopyElems<T>(red, flags, recv, input, output, send, head + nPacks * kElems, n, rank, size);
}

/// The widest packs, from kBytes down to one element, in which every pointer sits at the same
/// offset: `differ` has a bit set where two pointers' addresses differ.
template <typename T, typename Red, int kBytes>
BRAID_INLINE void reduceCopyWidest(const Red& red, uint32_t flags, const T* recv, const T* input, T* output, T* send,
                                   uint64_t n, uint64_t rank, uint64_t size, uintptr_t at, uintptr_t differ) {
  if constexpr (static_cast<size_t>(kBytes) > sizeof(T)) {
    if ((differ & (kBytes - 1)) != 0) {
      reduceCopyWidest<T, Red, kBytes / 2>(red, flags, recv, input, output, send, n, rank, size, at, differ);
      return;
    }
  }
  reduceCopyHeadPacksTail<T, Red, kBytes>(red, flags, recv, input, output, send, n, rank, size, at);
}

/// Thread `rank` of `size`: one step's arithmetic over n elements of T (see the file's
/// comment). Null pointers are the sources and destinations the step does not use. Out of
/// line, with the flags as a value: its loops then get registers of their own (inlined into
/// a collective kernel's dozens of steps, they spilled), and one copy serves every step.
template <typename T, typename Red>
BRAID_OUTLINE void reduceCopyStrided(const Red& red, uint32_t flags, const T* recv, const T* input, T* output, T* send,
                                    uint64_t n, uint64_t rank, uint64_t size) {
  const void* const pointers[4] = {recv, input, output, send};
  uintptr_t at = 0, differ = 0;
  bool first = true;
  for (const void* p : pointers) {
    if (p == nullptr) continue;
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    differ |= first ? 0 : a ^ at;
    at = first ? a : at;
    first = false;
  }
  if (((at | differ) % sizeof(T)) != 0) {  // a pointer off T's alignment (the host's tests only)
    reduceCopyElems<T>(red, flags, recv, input, output, send, 0, n, rank, size);
    return;
  }
  reduceCopyWidest<T, Red, 16>(red, flags, recv, input, output, send, n, rank, size, at, differ);
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
