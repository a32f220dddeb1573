// Reduction functors: every op on every element type.
//
// A functor has three steps, so that one algorithm serves all ops:
//   pre(x)      applied once to this rank's own input before it enters a reduction
//   reduce(a,b) combines two partial results
//   post(x)     applied once to the final result
// Sum, Prod, Max and Min use only reduce. PreMulSum multiplies each rank's input by that
// rank's scalar first (it also implements Avg on floating types, with scalar 1/nranks).
// SumPostDiv divides the final sum by nranks (Avg on integer types, truncating as NCCL does).
// Signed integers add and multiply as their unsigned twins (two's complement wrap, no UB);
// half, bfloat16 and fp8 compute in float and round once per operation, or on a GPU in the
// hardware's 16-bit instructions, which give the same bits (platform.h). kReduceIsAdd,
// kReduceIsMul, kReduceIsMax and kReduceIsMin say what reduce is, for the GPU's paired
// instructions (reduce_copy.h).
#pragma once

#include <type_traits>

#include "kernels/types.h"

namespace braid::kernels {

/// Arithmetic on one element type. The generic version is native arithmetic.
template <typename T>
struct Arith {
  BRAID_INLINE static T add(T a, T b) { return a + b; }
  BRAID_INLINE static T mul(T a, T b) { return a * b; }
  BRAID_INLINE static T max(T a, T b) { return a < b ? b : a; }
  BRAID_INLINE static T min(T a, T b) { return b < a ? b : a; }
  BRAID_INLINE static T div(T a, int n) { return a / static_cast<T>(n); }
};

/// Signed integers wrap through their unsigned twin.
template <typename S, typename U>
struct WrappingArith {
  BRAID_INLINE static S add(S a, S b) { return static_cast<S>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b))); }
  BRAID_INLINE static S mul(S a, S b) { return static_cast<S>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b))); }
  BRAID_INLINE static S max(S a, S b) { return a < b ? b : a; }
  BRAID_INLINE static S min(S a, S b) { return b < a ? b : a; }
  BRAID_INLINE static S div(S a, int n) { return static_cast<S>(a / n); }
};
template <>
struct Arith<int8_t> : WrappingArith<int8_t, uint8_t> {};
template <>
struct Arith<int32_t> : WrappingArith<int32_t, uint32_t> {};
template <>
struct Arith<int64_t> : WrappingArith<int64_t, uint64_t> {};
template <>
struct Arith<uint8_t> {
  BRAID_INLINE static uint8_t add(uint8_t a, uint8_t b) { return static_cast<uint8_t>(a + b); }
  BRAID_INLINE static uint8_t mul(uint8_t a, uint8_t b) { return static_cast<uint8_t>(a * b); }
  BRAID_INLINE static uint8_t max(uint8_t a, uint8_t b) { return a < b ? b : a; }
  BRAID_INLINE static uint8_t min(uint8_t a, uint8_t b) { return b < a ? b : a; }
  BRAID_INLINE static uint8_t div(uint8_t a, int n) { return static_cast<uint8_t>(a / n); }
};

/// The small floating types: through float.
template <typename T>
struct FloatThroughArith {
  BRAID_INLINE static T add(T a, T b) { return fromFloat<T>(toFloat(a) + toFloat(b)); }
  BRAID_INLINE static T mul(T a, T b) { return fromFloat<T>(toFloat(a) * toFloat(b)); }
  BRAID_INLINE static T max(T a, T b) { return toFloat(a) < toFloat(b) ? b : a; }
  BRAID_INLINE static T min(T a, T b) { return toFloat(b) < toFloat(a) ? b : a; }
  BRAID_INLINE static T div(T a, int n) { return fromFloat<T>(toFloat(a) / static_cast<float>(n)); }
};
/// half and bfloat16: on a GPU with the instructions, each operation is one paired instruction
/// with the element in the low half of the word (platform.h: the bits the float route gives,
/// but for a NaN's), so that the line protocols' element-by-element arithmetic (primitives.h)
/// and the pack loops' heads and tails convert nothing in software; elsewhere through float.
/// Max and Min follow the hardware's rules on every compiler: a NaN loses to a number, two
/// NaNs give the canonical NaN, +0 counts above -0 (NCCL's __hmax/__hmin; the float route
/// would keep whichever NaN came first and the first of two zeros).
template <typename T>
struct Float16Arith : FloatThroughArith<T> {
  static constexpr bool kBf16 = std::is_same_v<T, BFloat16>;
  static constexpr bool kNativeAddMul = kBf16 ? kNativeBf16Pairs : kNativeHalfPairs;
  BRAID_INLINE static T add(T a, T b) {
    if constexpr (kNativeAddMul) return T{static_cast<uint16_t>(pairAdd<kBf16>(a.bits, b.bits))};
    else return FloatThroughArith<T>::add(a, b);
  }
  BRAID_INLINE static T mul(T a, T b) {
    if constexpr (kNativeAddMul) return T{static_cast<uint16_t>(pairMul<kBf16>(a.bits, b.bits))};
    else return FloatThroughArith<T>::mul(a, b);
  }
  BRAID_INLINE static T max(T a, T b) { return minMax<false>(a, b); }
  BRAID_INLINE static T min(T a, T b) { return minMax<true>(a, b); }

  template <bool kMin>
  BRAID_INLINE static T minMax(T a, T b) {
    if constexpr (kNativeHalfMinMax) {
      return T{static_cast<uint16_t>(pairMinMax<kBf16, kMin>(a.bits, b.bits))};
    } else {
      const float x = toFloat(a), y = toFloat(b);
      if (x != x) return y != y ? T{0x7fff} : b;
      if (y != y) return a;
      if (x == y) return ((a.bits & 0x8000) != 0) == kMin ? a : b;  // equal values differ only in a zero's sign
      return (kMin ? y < x : x < y) ? b : a;
    }
  }
};
template <>
struct Arith<Half> : Float16Arith<Half> {};
template <>
struct Arith<BFloat16> : Float16Arith<BFloat16> {};
template <>
struct Arith<Fp8E4M3> : FloatThroughArith<Fp8E4M3> {};
template <>
struct Arith<Fp8E5M2> : FloatThroughArith<Fp8E5M2> {};

/// Per-operation arguments, filled by the planner: the PreMulSum scalar (as the element
/// type's bits) and the rank count for SumPostDiv.
struct RedOpArgs {
  uint64_t scalarBits;
  int32_t nRanks;
  int32_t reserved;
};

template <typename T>
struct FuncSum {
  BRAID_INLINE explicit FuncSum(const RedOpArgs&) {}
  BRAID_INLINE T pre(T x) const { return x; }
  BRAID_INLINE T reduce(T a, T b) const { return Arith<T>::add(a, b); }
  BRAID_INLINE T post(T x) const { return x; }
  static constexpr bool kHasPre = false, kHasPost = false;
  static constexpr bool kReduceIsAdd = true, kReduceIsMul = false;
  static constexpr bool kReduceIsMax = false, kReduceIsMin = false;
};

template <typename T>
struct FuncProd {
  BRAID_INLINE explicit FuncProd(const RedOpArgs&) {}
  BRAID_INLINE T pre(T x) const { return x; }
  BRAID_INLINE T reduce(T a, T b) const { return Arith<T>::mul(a, b); }
  BRAID_INLINE T post(T x) const { return x; }
  static constexpr bool kHasPre = false, kHasPost = false;
  static constexpr bool kReduceIsAdd = false, kReduceIsMul = true;
  static constexpr bool kReduceIsMax = false, kReduceIsMin = false;
};

template <typename T>
struct FuncMax {
  BRAID_INLINE explicit FuncMax(const RedOpArgs&) {}
  BRAID_INLINE T pre(T x) const { return x; }
  BRAID_INLINE T reduce(T a, T b) const { return Arith<T>::max(a, b); }
  BRAID_INLINE T post(T x) const { return x; }
  static constexpr bool kHasPre = false, kHasPost = false;
  static constexpr bool kReduceIsAdd = false, kReduceIsMul = false;
  static constexpr bool kReduceIsMax = true, kReduceIsMin = false;
};

template <typename T>
struct FuncMin {
  BRAID_INLINE explicit FuncMin(const RedOpArgs&) {}
  BRAID_INLINE T pre(T x) const { return x; }
  BRAID_INLINE T reduce(T a, T b) const { return Arith<T>::min(a, b); }
  BRAID_INLINE T post(T x) const { return x; }
  static constexpr bool kHasPre = false, kHasPost = false;
  static constexpr bool kReduceIsAdd = false, kReduceIsMul = false;
  static constexpr bool kReduceIsMax = false, kReduceIsMin = true;
};

template <typename T>
struct FuncPreMulSum {
  T scalar;
  BRAID_INLINE explicit FuncPreMulSum(const RedOpArgs& args) { memcpy(&scalar, &args.scalarBits, sizeof(T)); }
  BRAID_INLINE T pre(T x) const { return Arith<T>::mul(x, scalar); }
  BRAID_INLINE T reduce(T a, T b) const { return Arith<T>::add(a, b); }
  BRAID_INLINE T post(T x) const { return x; }
  static constexpr bool kHasPre = true, kHasPost = false;
  static constexpr bool kReduceIsAdd = true, kReduceIsMul = false;
  static constexpr bool kReduceIsMax = false, kReduceIsMin = false;
};

template <typename T>
struct FuncSumPostDiv {
  int nRanks;
  BRAID_INLINE explicit FuncSumPostDiv(const RedOpArgs& args) : nRanks(args.nRanks) {}
  BRAID_INLINE T pre(T x) const { return x; }
  BRAID_INLINE T reduce(T a, T b) const { return Arith<T>::add(a, b); }
  BRAID_INLINE T post(T x) const { return Arith<T>::div(x, nRanks); }
  static constexpr bool kHasPre = false, kHasPost = true;
  static constexpr bool kReduceIsAdd = true, kReduceIsMul = false;
  static constexpr bool kReduceIsMax = false, kReduceIsMin = false;
};


}  // namespace braid::kernels
