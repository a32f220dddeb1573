// ReduceScatter whose per-rank count is not a multiple of 16 bytes, so that every rank but the
// first reads its share of the input at an offset within 16 bytes other than the FIFO slots':
// the case in which the GPU's Simple loop runs in 8-, 4- or 2-byte packs (kernels/reduce_copy.h).
// On the host backend and on the CPU-played GPU, over float Sum and half and bfloat16 Sum, Max
// and Min, every protocol and both ReduceScatter algorithms, exact to the bit. Max and Min see
// NaNs and zeros of both signs, and must follow the GPU's max/min .f16x2 rules (a NaN loses to
// a number, NaNs only give the canonical NaN, +0 counts above -0). The CPU runs its own loops
// (contiguous shares, not the GPU's strided packs: those are reduce_copy_test.cc's), so this
// checks what the planner, the algorithms and the arithmetic make of such counts.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/init.h"
#include "harness/ranks.h"
#include "integration/emulated_device.h"
#include "integration/test_env.h"
#include "kernels/types.h"
#include "plan/algo_proto.h"
#include "datapath/data_path.h"
#include "runtime/host/kernel_table.h"

using namespace braid;
using braid::test::expect;

namespace {

struct Case {
  ncclDataType_t dtype;
  ncclRedOp_t op;
  kernels::RedKind red;
  const char* name;
};

const Case kCases[] = {
    {ncclFloat32, ncclSum, kernels::RedKind::kSum, "float sum"},   {ncclFloat16, ncclSum, kernels::RedKind::kSum, "half sum"},
    {ncclFloat16, ncclMax, kernels::RedKind::kMax, "half max"},    {ncclFloat16, ncclMin, kernels::RedKind::kMin, "half min"},
    {ncclBfloat16, ncclSum, kernels::RedKind::kSum, "bf16 sum"},   {ncclBfloat16, ncclMax, kernels::RedKind::kMax, "bf16 max"},
    {ncclBfloat16, ncclMin, kernels::RedKind::kMin, "bf16 min"},
};

/// Rank `rank`'s element i as a 16-bit code: small multiples of 0.5 (sums exact in every type),
/// and for Max/Min (`special`) NaNs in every rank or in one, and zeros of both signs.
uint16_t codeOf(bool bf16, bool special, int rank, size_t i) {
  const size_t k = i % 61;
  if (special && k == 0) return static_cast<uint16_t>((bf16 ? 0x7fc0 : 0x7e00) | rank);  // NaN everywhere
  if (special && k == 1 && rank == 1) return bf16 ? 0xffc0 : 0xfe00;                       // one rank's NaN
  if (special && k == 2) return rank % 2 ? 0x8000 : 0x0000;                                // -0 and +0
  if (special && k == 3) return 0x8000;                                                    // -0 only
  const float v = static_cast<float>(static_cast<int>((rank * 7 + i) % 5) - 2) * 0.5f;
  return bf16 ? kernels::toBFloat16(v).bits : kernels::toHalf(v).bits;
}

float toFloat16(bool bf16, uint16_t code) {
  return bf16 ? kernels::toFloat(kernels::BFloat16{code}) : kernels::toFloat(kernels::Half{code});
}

/// Max (or Min) by the GPU's rules, written out case by case.
uint16_t minMaxRule(bool bf16, bool isMin, uint16_t a, uint16_t b) {
  const float x = toFloat16(bf16, a), y = toFloat16(bf16, b);
  if (x != x && y != y) return 0x7fff;
  if (x != x) return b;
  if (y != y) return a;
  if (x == 0 && y == 0) return isMin ? (a | b) : (a & b);
  return (isMin ? x < y : x > y) ? a : b;
}

/// One ReduceScatter of `count` a rank on every rank (run by each), checked to the bit:
/// returns what was wrong ("" when nothing), so that a rank with a wrong result still takes
/// part in the collectives that follow (its peers would wait for it).
std::string reduceScatterOnce(ncclComm_t comm, int rank, int n, const Case& c, size_t count, cudaStream_t stream,
                       bool emulated, const std::string& what) {
  const bool half = c.dtype != ncclFloat32, bf16 = c.dtype == ncclBfloat16;
  const bool special = c.op != ncclSum;
  const size_t elem = half ? 2 : 4;
  std::vector<unsigned char> in(count * n * elem), out(count * elem + 16, 0xA5);
  for (size_t i = 0; i < count * n; ++i) {
    if (half) {
      const uint16_t code = codeOf(bf16, special, rank, i);
      memcpy(&in[i * elem], &code, 2);
    } else {
      const float v = static_cast<float>((rank * 7 + i) % 5);
      memcpy(&in[i * elem], &v, 4);
    }
  }
  expect(ncclReduceScatter(in.data(), out.data(), count, c.dtype, c.op, comm, stream) == ncclSuccess, what);
  if (emulated) comm->dataPath().synchronize();
  long wrong = 0;
  for (size_t j = 0; j < count; ++j) {
    const size_t i = rank * count + j;
    if (half) {
      uint16_t want = codeOf(bf16, special, 0, i);
      float sum = toFloat16(bf16, want);
      for (int r = 1; r < n; ++r) {
        const uint16_t code = codeOf(bf16, special, r, i);
        want = minMaxRule(bf16, c.op == ncclMin, want, code);
        sum += toFloat16(bf16, code);
      }
      if (c.op == ncclSum) want = bf16 ? kernels::toBFloat16(sum).bits : kernels::toHalf(sum).bits;
      uint16_t got;
      memcpy(&got, &out[j * 2], 2);
      wrong += got != want;
    } else {
      float want = 0, got;
      for (int r = 0; r < n; ++r) want += static_cast<float>((r * 7 + i) % 5);
      memcpy(&got, &out[j * 4], 4);
      wrong += got != want;
    }
  }
  for (size_t b = count * elem; b < out.size(); ++b) wrong += out[b] != 0xA5;  // nothing past the share
  return wrong == 0 ? "" : what + ": " + std::to_string(wrong) + " wrong";
}

/// Every case, algorithm, protocol and count on 3 ranks as threads (`emulated`: each
/// communicator on the CPU-played GPU).
void sweep(bool emulated) {
  const int n = 3;
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  REQUIRE(test::runThreads(n, [&](int rank) {
    ncclComm_t comm = nullptr;
    EXPECT_OK(ncclCommInitRank(&comm, n, id, rank));
    std::string firstWrong;
    // (the host backend runs a collective within the call; the emulated device wants a stream
    // of the rank's own and a synchronize, as a GPU would)
    const cudaStream_t stream =
        emulated ? reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(0x1000 + 16 * rank)) : nullptr;
    for (const Case& c : kCases) {
      if (runtime::host::kReductionTable[static_cast<int>(c.red)][c.dtype] == nullptr) {
        if (rank == 0) WARN("skipped " << c.name << ": not instantiated in this build (-Donly_funcs)");
        continue;
      }
      for (plan::EnvAlgo algo : {plan::EnvAlgo::kRing, plan::EnvAlgo::kHalvingDoubling}) {
        for (kernels::Proto proto : {kernels::Proto::kLL, kernels::Proto::kLL128, kernels::Proto::kSimple}) {
          plan::PlanLimits& limits = comm->dataPath().limits();
          for (auto& a : limits.mask.algos) a = 1u << static_cast<int>(algo);
          for (auto& p : limits.mask.protos) p = 1u << static_cast<int>(proto);
          limits.minChannels = limits.maxChannels = 2;
          // Per-rank shares of 2, 10, 6002 and 200006 bytes (half) or twice that (float).
          for (size_t count : {size_t(1), size_t(5), size_t(3001), size_t(100003)}) {
            const std::string what = std::string(emulated ? "emulated GPU, " : "host, ") + c.name + ", algorithm " +
                                     std::to_string(static_cast<int>(algo)) + ", protocol " +
                                     std::to_string(static_cast<int>(proto)) + ", count " + std::to_string(count);
            const std::string wrong = reduceScatterOnce(comm, rank, n, c, count, stream, emulated, what);
            if (firstWrong.empty()) firstWrong = wrong;
          }
        }
      }
    }
    EXPECT_OK(ncclCommDestroy(comm));
    expect(firstWrong.empty(), firstWrong);
  }, std::chrono::seconds(120)) == "");
}

}  // namespace

TEST_CASE("ReduceScatter with per-rank shares off 16 bytes: float, half, bfloat16, NaNs and zeros, exact",
          "[integration][collectives][emulated]") {
  SECTION("host") { sweep(false); }
  SECTION("emulated GPU") {
    struct Emulated {  // (every communicator made while it lives is on the emulated device)
      Emulated() { comm::setTestDeviceFactory([](int) { return std::make_unique<test::EmulatedDevice>(); }); }
      ~Emulated() { comm::setTestDeviceFactory(nullptr); }
    } emulated;
    sweep(true);
  }
}
