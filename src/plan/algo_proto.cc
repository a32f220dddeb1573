#include "plan/algo_proto.h"

#include <strings.h>

#include <vector>

#include "core/status.h"

namespace braid::plan {

namespace {

constexpr const char* kFuncNames[] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce", "AlltoAll"};
static_assert(sizeof(kFuncNames) / sizeof(kFuncNames[0]) == static_cast<size_t>(EnvFunc::kCount));
constexpr const char* kAlgoNames[] = {"Tree",        "Ring",     "CollNetDirect",   "CollNetChain", "NVLS",
                                      "NVLSTree",    "PAT",      "Direct",          "RecDoubling",  "HalvingDoubling",
                                      "Binomial",    "Hier2D",   "Pairwise",        "Bruck"};
static_assert(sizeof(kAlgoNames) / sizeof(kAlgoNames[0]) == static_cast<size_t>(EnvAlgo::kCount));
constexpr const char* kProtoNames[] = {"LL", "LL128", "Simple"};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string::npos) end = s.size();
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

template <size_t N>
int lookup(const char* const (&names)[N], const std::string& token) {
  for (size_t i = 0; i < N; ++i) {
    if (strcasecmp(names[i], token.c_str()) == 0) return static_cast<int>(i);
  }
  return -1;
}

/// One "elems" list as a bit mask over `names`; *named gets the names listed to be used (none
/// for a '^' list).
template <size_t N>
uint32_t parseElems(const char* variable, const char* const (&names)[N], std::string elems, uint32_t* named) {
  bool invert = false;
  if (!elems.empty() && elems[0] == '^') {
    invert = true;
    elems.erase(0, 1);
  }
  uint32_t mask = 0;
  for (const std::string& token : split(elems, ',')) {
    if (token.empty()) continue;
    const int bit = lookup(names, token);
    if (bit < 0) fail(ncclInvalidUsage, "%s: unknown name '%s'", variable, token.c_str());
    mask |= 1u << bit;
  }
  const uint32_t all = (1u << N) - 1;
  *named = invert ? 0 : mask;
  return invert ? all & ~mask : mask;
}

template <size_t N>
void parseVariable(const char* variable, const char* const (&names)[N], const std::string& text, uint32_t* perFunc,
                   uint32_t* namedPerFunc) {
  if (text.empty()) return;
  uint32_t named = 0;
  bool first = true;
  for (const std::string& entry : split(text, ';')) {
    const auto colon = entry.find(':');
    if (colon == std::string::npos) {
      if (!first) fail(ncclInvalidUsage, "%s: only the first entry may omit 'function:' (in '%s')", variable, entry.c_str());
      const uint32_t mask = parseElems(variable, names, entry, &named);
      for (int f = 0; f < kNcclEnvFuncs; ++f) {
        perFunc[f] = mask;
        namedPerFunc[f] = named;
      }
    } else {
      const int f = lookup(kFuncNames, entry.substr(0, colon));
      if (f < 0) fail(ncclInvalidUsage, "%s: unknown function '%s'", variable, entry.substr(0, colon).c_str());
      perFunc[f] = parseElems(variable, names, entry.substr(colon + 1), &named);
      namedPerFunc[f] = named;
    }
    first = false;
  }
}

}  // namespace

AlgoProtoMask AlgoProtoMask::all() {
  AlgoProtoMask m;
  for (int f = 0; f < static_cast<int>(EnvFunc::kCount); ++f) {
    m.algos[f] = (1u << static_cast<int>(EnvAlgo::kCount)) - 1;
    m.protos[f] = (1u << static_cast<int>(kernels::Proto::kCount)) - 1;
    m.namedAlgos[f] = 0;
  }
  return m;
}

AlgoProtoMask parseAlgoProto(const std::string& algo, const std::string& proto) {
  AlgoProtoMask m = AlgoProtoMask::all();
  uint32_t namedProtos[static_cast<int>(EnvFunc::kCount)] = {};
  parseVariable("NCCL_ALGO", kAlgoNames, algo, m.algos, m.namedAlgos);
  parseVariable("NCCL_PROTO", kProtoNames, proto, m.protos, namedProtos);
  return m;
}

EnvFunc envFuncOf(kernels::Func f) {
  switch (f) {
    case kernels::Func::kBroadcast: return EnvFunc::kBroadcast;
    case kernels::Func::kReduce: return EnvFunc::kReduce;
    case kernels::Func::kAllGather: return EnvFunc::kAllGather;
    case kernels::Func::kReduceScatter: return EnvFunc::kReduceScatter;
    case kernels::Func::kAlltoAll: return EnvFunc::kAlltoAll;
    default: return EnvFunc::kAllReduce;
  }
}

const char* envFuncName(EnvFunc f) { return kFuncNames[static_cast<int>(f)]; }

}  // namespace braid::plan
