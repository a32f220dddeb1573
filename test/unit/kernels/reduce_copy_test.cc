// The GPU's element loops (kernels/reduce_copy.h), run on the CPU: a group of `size` threads is
// played thread after thread (no thread's share depends on another's), over every element
// type and op, pointers 0..48 bytes off a 64-byte boundary in every combination the loops
// distinguish, and sizes around each boundary of the head, pack, unrolled-pass and tail
// loops. Each result is compared with a reference computed element by element from the
// functors alone, and the bytes around every destination must stay untouched.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <array>
#include <random>
#include <set>
#include <vector>

#include "kernels/algorithms/ring_steps.h"
#include "kernels/reduce_copy.h"

using namespace braid::kernels;

namespace {

/// A destination with 64 guard bytes either side, filled with a pattern.
struct Guarded {
  std::vector<unsigned char> bytes;
  size_t offset;  // of the data within bytes
  Guarded(size_t n, size_t misalign) : bytes(n + 192, 0xA5), offset(64 + misalign) {}
  void* data() { return bytes.data() + offset; }
  /// Whether every byte outside [offset, offset + used) still holds the pattern.
  bool guardsIntact(size_t used) const {
    for (size_t i = 0; i < bytes.size(); ++i) {
      if ((i < offset || i >= offset + used) && bytes[i] != 0xA5) return false;
    }
    return true;
  }
};

/// Source values of type T from 64 random bits: small integers for the integer types and
/// floats of few significant bits (so that sums and products are exact in every type that
/// does not overflow; the comparison is bitwise anyway).
template <typename T>
T valueOf(uint64_t r) {
  const int small = static_cast<int>(r % 7) - 3;
  if constexpr (std::is_same_v<T, Half>) return toHalf(static_cast<float>(small) * 0.5f);
  else if constexpr (std::is_same_v<T, BFloat16>) return toBFloat16(static_cast<float>(small) * 0.25f);
  else if constexpr (std::is_same_v<T, Fp8E4M3>) return toFp8E4M3(static_cast<float>(small));
  else if constexpr (std::is_same_v<T, Fp8E5M2>) return toFp8E5M2(static_cast<float>(small) * 2.0f);
  else if constexpr (std::is_floating_point_v<T>) return static_cast<T>(small + 0.125 * static_cast<double>(r % 5));
  else return static_cast<T>(small);  // (an int to an unsigned type wraps; a negative double would be undefined)
}

template <typename T>
bool sameBits(const T& a, const T& b) {
  return memcmp(&a, &b, sizeof(T)) == 0;
}

/// The expected element: what a step with these flags computes, written out from the functor.
template <typename T, typename Red>
T expected(const Red& red, uint32_t flags, T recv, T input) {
  T v = recv;
  if (flags & (kInput | kPartial)) {
    const T x = (flags & kInput) ? red.pre(input) : input;
    if (flags & kRecv) v = (flags & kMineFirst) ? red.reduce(x, recv) : red.reduce(recv, x);
    else v = x;
  } else if (!(flags & kRecv)) {
    v = T{};
  }
  if (flags & kPost) v = red.post(v);
  return v;
}

/// One step of reduceCopyStrided over n elements with the four pointers at the given byte
/// offsets (an offset that is not a multiple of sizeof(T) is rounded down to one), played by
/// `size` threads; checks every output element and the guards. Returns false on the first
/// difference, after reporting it.
template <typename T, typename Red>
bool checkStep(const Red& red, uint32_t flags, uint64_t n, const size_t offsets[4], uint64_t size, std::mt19937_64& rng) {
  const size_t bytes = n * sizeof(T);
  auto off = [](size_t o) { return o / sizeof(T) * sizeof(T); };
  Guarded recvBuf(bytes, off(offsets[0])), inputBuf(bytes, off(offsets[1]));
  Guarded outBuf(bytes, off(offsets[2])), sendBuf(bytes, off(offsets[3]));
  T* recv = static_cast<T*>(recvBuf.data());
  T* input = static_cast<T*>(inputBuf.data());
  for (uint64_t i = 0; i < n; ++i) {
    recv[i] = valueOf<T>(rng());
    input[i] = valueOf<T>(rng());
  }
  const bool useRecv = flags & kRecv, useInput = flags & (kInput | kPartial);
  T* output = (flags & kOutput) ? static_cast<T*>(outBuf.data()) : nullptr;
  T* send = (flags & kSend) ? static_cast<T*>(sendBuf.data()) : nullptr;
  for (uint64_t rank = 0; rank < size; ++rank) {
    reduceCopyStrided<T>(red, flags, useRecv ? recv : nullptr, useInput ? input : nullptr, output, send, n, rank, size);
  }
  for (uint64_t i = 0; i < n; ++i) {
    const T want = expected<T>(red, flags, useRecv ? recv[i] : T{}, input[i]);
    if ((output != nullptr && !sameBits(output[i], want)) || (send != nullptr && !sameBits(send[i], want))) {
      FAIL_CHECK("element " << i << " of " << n << " wrong (flags " << flags << ", " << size << " threads, offsets "
                            << offsets[0] << "/" << offsets[1] << "/" << offsets[2] << "/" << offsets[3] << ")");
      return false;
    }
  }
  if (!outBuf.guardsIntact(output != nullptr ? bytes : 0) || !sendBuf.guardsIntact(send != nullptr ? bytes : 0)) {
    FAIL_CHECK("a write outside the destination (n " << n << ", flags " << flags << ", " << size << " threads)");
    return false;
  }
  return true;
}

/// The sizes that cross each loop's boundary for T and a group of `size` threads.
template <typename T>
std::vector<uint64_t> boundarySizes(uint64_t size) {
  const uint64_t e = kPackElems<T>, pass = e * kReduceUnroll * size;
  std::vector<uint64_t> sizes = {0, 1, 2, e - 1, e, e + 1, 2 * e + 3, e * size - 1, e * size + 1};
  for (uint64_t k : {uint64_t(1), uint64_t(2), uint64_t(3)}) {
    sizes.push_back(k * pass - 1);
    sizes.push_back(k * pass);
    sizes.push_back(k * pass + e + 1);
  }
  sizes.push_back(5 * pass + 3 * e * size + 7);  // whole passes, packs left over, a tail
  return sizes;
}

/// Every flag combination a step uses, with every size and thread count, for T and Red; the
/// pointer offsets: all aligned, all equally misaligned (a head), and each pointer alone
/// misaligned (element by element).
template <typename T, typename Red>
void sweep(const Red& red) {
  const uint32_t flagSets[] = {
      kRecv | kInput | kSend,           kRecv | kInput | kPost | kOutput | kSend, kRecv | kInput | kOutput,
      kRecv | kPartial | kMineFirst | kOutput, kInput | kSend,                  kInput | kPost | kOutput,
      kPartial | kPost | kOutput,       kRecv | kPartial | kPost | kOutput | kSend,
  };
  std::mt19937_64 rng(sizeof(T) * 131 + Red::kHasPre * 7 + Red::kHasPost);
  for (uint64_t size : {uint64_t(1), uint64_t(3), uint64_t(32)}) {
    for (uint64_t n : boundarySizes<T>(size)) {
      for (uint32_t flags : flagSets) {
        std::vector<std::array<size_t, 4>> layouts = {{0, 0, 0, 0}, {48, 48, 48, 48}};
        for (size_t skew : std::set<size_t>{sizeof(T), size_t(8), size_t(4)}) {
          if (skew % sizeof(T) != 0 || skew == 16) continue;
          layouts.push_back({skew, skew, skew, skew});  // a common offset below 16: head and packs
          for (int which = 0; which < 4; ++which) {
            std::array<size_t, 4> l = {16, 32, 0, 48};
            l[which] += skew;  // one pointer off the others: element by element
            layouts.push_back(l);
          }
        }
        for (const auto& l : layouts) {
          if (!checkStep<T>(red, flags, n, l.data(), size, rng)) return;
        }
      }
    }
  }
}

template <typename T>
void sweepOps(uint64_t scalarBits) {
  RedOpArgs args{scalarBits, 5, 0};
  sweep<T>(FuncSum<T>(args));
  sweep<T>(FuncProd<T>(args));
  sweep<T>(FuncMax<T>(args));
  sweep<T>(FuncMin<T>(args));
  sweep<T>(FuncPreMulSum<T>(args));
}

template <typename T>
uint64_t bitsOf(T v) {
  uint64_t b = 0;
  memcpy(&b, &v, sizeof(T));
  return b;
}

}  // namespace

TEST_CASE("reduceCopyStrided: every type and op, aligned, equally misaligned and mixed pointers", "[unit][kernels]") {
  SECTION("float") { sweepOps<float>(bitsOf(1.5f)); }
  SECTION("double") { sweepOps<double>(bitsOf(-2.0)); }
  SECTION("int32 and its average") {
    sweepOps<int32_t>(bitsOf<int32_t>(3));
    sweep<int32_t>(FuncSumPostDiv<int32_t>(RedOpArgs{0, 3, 0}));
  }
  SECTION("uint8") { sweepOps<uint8_t>(bitsOf<uint8_t>(2)); }
  SECTION("int64") { sweep<int64_t>(FuncSumPostDiv<int64_t>(RedOpArgs{0, 7, 0})); }
  SECTION("half") { sweepOps<Half>(bitsOf(toHalf(0.5f))); }
  SECTION("bfloat16") { sweepOps<BFloat16>(bitsOf(toBFloat16(-0.75f))); }
  SECTION("fp8") {
    sweepOps<Fp8E4M3>(bitsOf(toFp8E4M3(2.0f)));
    sweep<Fp8E5M2>(FuncSum<Fp8E5M2>(RedOpArgs{}));
  }
}

namespace {

/// The sizes that cross each narrower pack loop's boundaries (packs of 8, 4, 2 and 1 bytes, as
/// wide as T or wider) for T and a group of `size` threads.
template <typename T>
std::vector<uint64_t> narrowPackSizes(uint64_t size) {
  std::vector<uint64_t> sizes = {0, 1, 7};
  auto add = [&](uint64_t perPack, int unroll) {
    const uint64_t pass = perPack * unroll * size;
    for (uint64_t s : {pass - 1, pass, pass + 1, 2 * pass + perPack + 1, 3 * pass + 5}) sizes.push_back(s);
  };
  if (sizeof(T) <= 8) add(8 / sizeof(T), kUnrollFor<8>);
  if (sizeof(T) <= 4) add(4 / sizeof(T), kUnrollFor<4>);
  if (sizeof(T) <= 2) add(2 / sizeof(T), kUnrollFor<2>);
  if (sizeof(T) == 1) add(1, kUnrollFor<1>);
  return sizes;
}

/// Pointers that differ modulo 16 by each skew of 1 to 15 bytes: one source, one destination,
/// both sources against both destinations, and all four apart (offsets are rounded down to
/// whole elements by checkStep: a pointer off its element's alignment is not a GPU's).
template <typename T, typename Red>
void sweepSkewed(const Red& red) {
  const uint32_t flagSets[] = {kRecv | kInput | kOutput | kSend, kRecv | kPartial | kMineFirst | kPost | kOutput,
                               kInput | kSend};
  std::mt19937_64 rng(sizeof(T) * 17 + Red::kReduceIsMax);
  for (uint64_t size : {uint64_t(1), uint64_t(3), uint64_t(32)}) {
    for (uint64_t n : narrowPackSizes<T>(size)) {
      for (uint32_t flags : flagSets) {
        for (size_t skew = 1; skew < 16; ++skew) {
          const size_t base = (skew * 5) % 16;  // (a different head for each skew)
          const std::array<size_t, 4> layouts[] = {
              {base + skew, base, base, base}, {base, base, base + 16 + skew, base},
              {base, base + skew, base, base + 32}, {base + skew, base + skew, base, base},
              {base, base + skew, base + 2 * skew % 16, base + 3 * skew % 16}};
          for (const auto& l : layouts) {
            if (!checkStep<T>(red, flags, n, l.data(), size, rng)) return;
          }
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("reduceCopyStrided: pointers that differ modulo 16 by 1 to 15 bytes, in packs of 8, 4, 2 or 1 bytes",
          "[unit][kernels]") {
  RedOpArgs args{0, 3, 0};
  SECTION("float") {
    sweepSkewed<float>(FuncSum<float>(args));
    sweepSkewed<float>(FuncMax<float>(args));
    sweepSkewed<float>(FuncPreMulSum<float>(RedOpArgs{bitsOf(1.5f), 3, 0}));
  }
  SECTION("double, int32, int64, uint8") {
    sweepSkewed<double>(FuncSum<double>(args));
    sweepSkewed<int32_t>(FuncSumPostDiv<int32_t>(args));
    sweepSkewed<int64_t>(FuncProd<int64_t>(args));
    sweepSkewed<uint8_t>(FuncSum<uint8_t>(args));
    sweepSkewed<uint8_t>(FuncMin<uint8_t>(args));
  }
  SECTION("half and bfloat16, every op") {
    sweepSkewed<Half>(FuncSum<Half>(args));
    sweepSkewed<Half>(FuncProd<Half>(args));
    sweepSkewed<Half>(FuncMax<Half>(args));
    sweepSkewed<Half>(FuncMin<Half>(args));
    sweepSkewed<Half>(FuncPreMulSum<Half>(RedOpArgs{bitsOf(toHalf(0.5f)), 3, 0}));
    sweepSkewed<BFloat16>(FuncSum<BFloat16>(args));
    sweepSkewed<BFloat16>(FuncMax<BFloat16>(args));
    sweepSkewed<BFloat16>(FuncMin<BFloat16>(args));
    sweepSkewed<BFloat16>(FuncPreMulSum<BFloat16>(RedOpArgs{bitsOf(toBFloat16(-0.75f)), 3, 0}));
  }
  SECTION("fp8") {
    sweepSkewed<Fp8E4M3>(FuncSum<Fp8E4M3>(args));
    sweepSkewed<Fp8E5M2>(FuncMax<Fp8E5M2>(args));
  }
}

namespace {

/// Max (or Min) of two 16-bit float codes by the hardware's rules, written out case by case.
template <typename T>
uint16_t hardwareMinMax(bool isMin, uint16_t a, uint16_t b) {
  const float x = toFloat(T{a}), y = toFloat(T{b});
  if (x != x && y != y) return 0x7fff;
  if (x != x) return b;
  if (y != y) return a;
  if (x == 0 && y == 0) return isMin ? (a | b) : (a & b);  // -0 below +0
  return (isMin ? x < y : x > y) ? a : b;
}

template <typename T>
void checkMinMaxRules() {
  const bool bf16 = std::is_same_v<T, BFloat16>;
  const uint16_t one = bf16 ? 0x3f80 : 0x3c00, minusTwo = bf16 ? 0xc000 : 0xc000;
  const uint16_t inf = bf16 ? 0x7f80 : 0x7c00, nan = bf16 ? 0x7fc1 : 0x7e01, negNan = bf16 ? 0xffc0 : 0xfe00;
  const uint16_t codes[] = {0x0000, 0x8000, one, minusTwo, inf, static_cast<uint16_t>(inf | 0x8000), nan, negNan, 0x0001};
  RedOpArgs args{};
  for (uint16_t a : codes) {
    for (uint16_t b : codes) {
      INFO((bf16 ? "bfloat16 " : "half ") << std::hex << a << ", " << b);
      CHECK(FuncMax<T>(args).reduce(T{a}, T{b}).bits == hardwareMinMax<T>(false, a, b));
      CHECK(FuncMin<T>(args).reduce(T{a}, T{b}).bits == hardwareMinMax<T>(true, a, b));
    }
  }
  // The same through the pack loops, 16-byte and narrower: a NaN or a zero at every place.
  const size_t count = sizeof(codes) / sizeof(codes[0]), n = count * count;
  for (size_t skew : {size_t(0), size_t(2), size_t(4), size_t(8)}) {
    std::vector<T> recv(n + 8), input(n + 8), out(n + 8);
    for (size_t i = 0; i < n; ++i) {
      recv[i] = T{codes[i / count]};
      input[i + skew / 2] = T{codes[i % count]};
    }
    for (bool isMin : {false, true}) {
      for (uint64_t rank = 0; rank < 4; ++rank) {
        if (isMin) reduceCopyStrided<T>(FuncMin<T>(args), kRecv | kInput | kOutput, recv.data(), input.data() + skew / 2,
                                        out.data(), nullptr, n, rank, 4);
        else reduceCopyStrided<T>(FuncMax<T>(args), kRecv | kInput | kOutput, recv.data(), input.data() + skew / 2,
                                  out.data(), nullptr, n, rank, 4);
      }
      for (size_t i = 0; i < n; ++i) {
        INFO("skew " << skew << (isMin ? " min " : " max ") << std::hex << codes[i / count] << ", " << codes[i % count]);
        CHECK(out[i].bits == hardwareMinMax<T>(isMin, codes[i / count], codes[i % count]));
      }
    }
  }
}

}  // namespace

// What max/min .f16x2 and .bf16x2 give (the GPU's instructions: platform.h) and what the host
// computes for half and bfloat16 Max and Min: a NaN loses to a number, two NaNs give the
// canonical NaN 0x7fff, +0 counts above -0; NCCL's __hmax2/__hmin2 do the same.
TEST_CASE("half and bfloat16 Max and Min: NaN loses to a number, two NaNs give 0x7fff, +0 above -0", "[unit][kernels]") {
  checkMinMaxRules<Half>();
  checkMinMaxRules<BFloat16>();
}

TEST_CASE("copyStrided: every relative alignment of source and destinations, sizes around each word", "[unit][kernels]") {
  std::mt19937_64 rng(7);
  for (uint64_t size : {uint64_t(1), uint64_t(5), uint64_t(64)}) {
    const uint64_t pass = 16 * kCopyUnroll * size;
    for (uint64_t bytes : {uint64_t(0), uint64_t(1), uint64_t(15), uint64_t(17), pass - 1, pass + 33, 3 * pass + 16 * size + 5}) {
      for (size_t fromOff = 0; fromOff < 16; fromOff += 3) {
        for (size_t aOff = 0; aOff < 16; ++aOff) {
          for (int bMode = 0; bMode < 3; ++bMode) {  // b: absent, congruent with a, or 8 bytes off it
            std::vector<unsigned char> src(bytes + 32);
            for (auto& c : src) c = static_cast<unsigned char>(rng());
            Guarded a(bytes, aOff), b(bytes, (aOff + (bMode == 2 ? 8 : 0)) % 16);
            const char* from = reinterpret_cast<const char*>(src.data()) + fromOff;
            char* bPtr = bMode == 0 ? nullptr : static_cast<char*>(b.data());
            for (uint64_t rank = 0; rank < size; ++rank)
              copyStrided(from, static_cast<char*>(a.data()), bPtr, bytes, rank, size);
            INFO(bytes << " bytes, " << size << " threads, from +" << fromOff << ", a +" << aOff << ", b mode " << bMode);
            REQUIRE(memcmp(a.data(), from, bytes) == 0);
            REQUIRE(a.guardsIntact(bytes));
            if (bPtr != nullptr) REQUIRE(memcmp(bPtr, from, bytes) == 0);
            REQUIRE(b.guardsIntact(bPtr != nullptr ? bytes : 0));
          }
        }
      }
    }
  }
}

TEST_CASE("ringChunk: whole 512-byte runs, within one slice, covering the pass", "[unit][kernels]") {
  CHECK(ringChunk<float>(131072, 1000, 4) == 256);     // 250 rounded up to 128-float runs
  CHECK(ringChunk<float>(131072, 1 << 20, 8) == 131072);  // the slice (already whole runs)
  CHECK(ringChunk<float>(131000, 1 << 20, 8) == 130944);  // a slice cut down to whole runs
  CHECK(ringChunk<double>(65536, 3, 3) == 64);
  CHECK(ringChunk<uint8_t>(100, 1000, 2) == 100);        // a slice below one run stays as it is
  for (int n : {1, 2, 3, 7, 8}) {
    for (uint64_t rest : {uint64_t(1), uint64_t(127), uint64_t(129), uint64_t(100003), uint64_t(1) << 22}) {
      const uint64_t per = ringChunk<float>(131072, rest, n);
      CHECK(per % 128 == 0);
      CHECK(per <= 131072);
      CHECK((per * n >= rest || per == 131072));
    }
  }
}

namespace {

/// The 16-bit float (a Half or BFloat16 code, by toFloat/toX) nearest to `exact`, ties to the
/// even code: found among the neighbours of the float-rounded guess, comparing in double
/// (exact for these values). Infinity past the largest finite value's rounding range.
template <typename T, typename From>
T nearestOf(double exact, From fromF) {
  const T guess = fromF(static_cast<float>(exact));
  uint16_t g;
  memcpy(&g, &guess, 2);
  T best = guess;
  double bestErr = -1;
  for (int d = -1; d <= 1; ++d) {
    const uint16_t c = static_cast<uint16_t>(g + d);
    T cand;
    memcpy(&cand, &c, 2);
    const double v = static_cast<double>(toFloat(cand));
    if (v != v) continue;
    const double err = v > exact ? v - exact : exact - v;
    uint16_t bc;
    memcpy(&bc, &best, 2);
    if (bestErr < 0 || err < bestErr || (err == bestErr && (c & 1) == 0 && (bc & 1) == 1)) {
      best = cand;
      bestErr = err;
    }
  }
  return best;
}

// The conversions as callables (they are always inlined: no function pointers to them).
const auto kToHalf = [](float f) { return toHalf(f); };
const auto kToBFloat16 = [](float f) { return toBFloat16(f); };

}  // namespace

// Why the GPU may add and multiply half, bfloat16 and fp8 a word at a time (reduce_copy.h,
// platform.h): rounding the exact result once (the hardware) gives the bits that reduce.h's
// float arithmetic gives by rounding twice. Checked exhaustively for fp8 through half (the
// hardware's route) and on 2 million random pairs for half and bfloat16 (those whose exact
// result float holds as a normal number).
TEST_CASE("paired 16-bit and fp8 arithmetic: one rounding gives reduce.h's bits", "[unit][kernels]") {
  for (int e5m2 = 0; e5m2 < 2; ++e5m2) {
    int differ = 0;
    for (int a = 0; a < 256; ++a) {
      for (int b = 0; b < 256; ++b) {
        const float x = e5m2 ? toFloat(Fp8E5M2{uint8_t(a)}) : toFloat(Fp8E4M3{uint8_t(a)});
        const float y = e5m2 ? toFloat(Fp8E5M2{uint8_t(b)}) : toFloat(Fp8E4M3{uint8_t(b)});
        if (x != x || y != y) continue;
        for (int mul = 0; mul < 2; ++mul) {
          const float exact = mul ? x * y : x + y;  // exact in float for two fp8 values
          const float viaHalf = toFloat(nearestOf<Half>(static_cast<double>(exact), kToHalf));
          const uint8_t direct = e5m2 ? toFp8E5M2(exact).bits : toFp8E4M3(exact).bits;
          const uint8_t twice = e5m2 ? toFp8E5M2(viaHalf).bits : toFp8E4M3(viaHalf).bits;
          if (direct != twice && ++differ <= 3)
            FAIL_CHECK("fp8 " << (e5m2 ? "e5m2" : "e4m3") << " codes " << a << (mul ? " * " : " + ") << b);
        }
      }
    }
    CHECK(differ == 0);
  }
  std::mt19937_64 rng(11);
  int differ = 0;
  for (int i = 0; i < 2000000 && differ < 3; ++i) {
    const uint64_t r = rng();
    const Half ha{uint16_t(r)}, hb{uint16_t(r >> 16)};
    const BFloat16 ba{uint16_t(r >> 32)}, bb{uint16_t(r >> 48)};
    for (int mul = 0; mul < 2; ++mul) {
      const double hx = toFloat(ha), hy = toFloat(hb), bx = toFloat(ba), by = toFloat(bb);
      if (hx == hx && hy == hy) {  // half: exact in double
        const Half once = nearestOf<Half>(mul ? hx * hy : hx + hy, kToHalf);
        const Half twice = toHalf(static_cast<float>(mul ? hx * hy : hx + hy));
        if (std::abs(mul ? hx * hy : hx + hy) < 65520.0 && once.bits != twice.bits && ++differ)
          FAIL_CHECK("half " << ha.bits << (mul ? " * " : " + ") << hb.bits);
      }
      const double bExact = mul ? bx * by : bx + by;
      if (bx == bx && by == by && std::abs(bExact) < 3.3e38 && (bExact == 0 || std::abs(bExact) > 1.2e-38)) {
        // bfloat16, whose results in double are exact and, here, within float's normal range
        // (beyond it float rounds to infinity, or below it to fewer bits: see platform.h)
        const BFloat16 once = nearestOf<BFloat16>(bExact, kToBFloat16);
        const BFloat16 twice = toBFloat16(static_cast<float>(mul ? bx * by : bx + by));
        if (once.bits != twice.bits && ++differ) FAIL_CHECK("bfloat16 " << ba.bits << (mul ? " * " : " + ") << bb.bits);
      }
    }
  }
  CHECK(differ == 0);
}
