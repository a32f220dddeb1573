#include "datapath/signature.h"

#include <cstdio>

#include "topology/tuner.h"

namespace braid::datapath {

namespace {

// words[0]: func (bits 0-7), type (8-15), op class (16-23; 0xff where no op applies),
// has-root (24), root (32-63). words[1]: count.
constexpr uint64_t kNoOp = 0xff;

bool hasRoot(kernels::Func f) { return f == kernels::Func::kBroadcast || f == kernels::Func::kReduce; }
bool reduces(kernels::Func f) {
  return f == kernels::Func::kAllReduce || f == kernels::Func::kReduce || f == kernels::Func::kReduceScatter;
}

const char* funcName(unsigned f) {
  return f < static_cast<unsigned>(kernels::Func::kCount) ? topo::funcName(static_cast<kernels::Func>(f)) : "unknown";
}

const char* typeName(unsigned t) {
  static const char* const names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                      "half", "float", "double", "bfloat16", "fp8e4m3", "fp8e5m2"};
  return t < 12 ? names[t] : "unknown type";
}

const char* opName(unsigned op) {
  static const char* const names[] = {"sum", "prod", "max", "min", "avg", "premulsum"};
  return op < 6 ? names[op] : "unknown op";
}

}  // namespace

kernels::OpSignature makeSignature(uint64_t seq, const plan::Task& task) {
  kernels::OpSignature s{};
  s.seq = seq;
  const uint64_t op = reduces(task.func) ? static_cast<uint64_t>(task.userOp < 0 ? 0 : (task.userOp > 5 ? 5 : task.userOp)) : kNoOp;
  s.words[0] = static_cast<uint64_t>(task.func) | (static_cast<uint64_t>(task.dtype) & 0xff) << 8 | op << 16;
  if (hasRoot(task.func)) s.words[0] |= uint64_t(1) << 24 | static_cast<uint64_t>(static_cast<uint32_t>(task.root)) << 32;
  s.words[1] = task.count;
  return s;
}

std::string describeSignature(const kernels::OpSignature& sig) {
  const unsigned func = sig.words[0] & 0xff;
  const unsigned type = (sig.words[0] >> 8) & 0xff;
  const unsigned op = (sig.words[0] >> 16) & 0xff;
  char buf[160];
  int n = snprintf(buf, sizeof buf, "%s(count=%llu, %s", funcName(func), static_cast<unsigned long long>(sig.words[1]),
                   typeName(type));
  if (op != kNoOp) n += snprintf(buf + n, sizeof buf - n, ", %s", opName(op));
  if ((sig.words[0] >> 24) & 1) n += snprintf(buf + n, sizeof buf - n, ", root=%u", static_cast<unsigned>(sig.words[0] >> 32));
  snprintf(buf + n, sizeof buf - n, ")");
  return buf;
}

std::string mismatchText(int myRank, const kernels::OpSignature& mine, int peer, const kernels::OpSignature& theirs) {
  return "rank " + std::to_string(myRank) + " called " + describeSignature(mine) + " as op #" +
         std::to_string(mine.seq) + " but rank " + std::to_string(peer) + " called " + describeSignature(theirs) +
         " as op #" + std::to_string(theirs.seq);
}

std::string stepSizeText(int myRank, int peer, const char* transport, uint64_t step, uint64_t wanted, uint64_t got) {
  const uint64_t flags = got & ~uint64_t{0xffffffff};
  std::string carried = std::to_string(got & 0xffffffffu) + " bytes";
  if (flags & kernels::kStepLL) carried += " of LL lines";
  if (flags & kernels::kStepLL128) carried += " of LL128 lines";
  if (flags & (kernels::kStepDirect | kernels::kStepReference)) carried += " by reference";
  return "rank " + std::to_string(myRank) + " received step " + std::to_string(step) + " from rank " +
         std::to_string(peer) + " over " + transport + " with " + carried + " where its kernel expected " +
         std::to_string(wanted) + " bytes: a protocol error (the connection's framing is broken); the step's "
         "data was not used";
}

}  // namespace braid::datapath
