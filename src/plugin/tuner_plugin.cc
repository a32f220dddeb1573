#include "plugin/tuner_plugin.h"

#include <nccl_tuner.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <sstream>
#include <vector>

#include "core/log.h"
#include "core/params.h"
#include "core/plugin_library.h"
#include "plugin/plugin_log.h"
#include "topology/tuner.h"

namespace braid::plugin {

static_assert(kNcclAlgorithms == NCCL_NUM_ALGORITHMS && kNcclProtocols == NCCL_NUM_PROTOCOLS);
static_assert(static_cast<int>(kernels::Func::kAllReduce) == ncclFuncAllReduce &&
              static_cast<int>(kernels::Func::kBroadcast) == ncclFuncBroadcast);
static_assert(static_cast<int>(kernels::Algo::kTree) == NCCL_ALGO_TREE &&
              static_cast<int>(kernels::Algo::kRing) == NCCL_ALGO_RING);
static_assert(static_cast<int>(kernels::Proto::kLL) == NCCL_PROTO_LL &&
              static_cast<int>(kernels::Proto::kLL128) == NCCL_PROTO_LL128 &&
              static_cast<int>(kernels::Proto::kSimple) == NCCL_PROTO_SIMPLE);

/// The library and the symbol found in it, shared by the communicators using it.
struct LoadedTuner {
  Library library;
  int version = 0;                         ///< 5, 4, 3 or 2
  const void* symbol = nullptr;            ///< the ncclTuner_vN_t
  std::string name;
};

namespace {

const std::vector<std::string> kSymbols = {"ncclTunerPlugin_v5", "ncclTunerPlugin_v4", "ncclTunerPlugin_v3",
                                           "ncclTunerPlugin_v2"};

/// The functions a version needs; the name of the first missing one, or nullptr.
const char* missingFunction(int version, const void* symbol) {
  switch (version) {
    case 5: {
      auto* t = static_cast<const ncclTuner_v5_t*>(symbol);
      return t->init == nullptr ? "init" : t->getCollInfo == nullptr ? "getCollInfo" : t->finalize == nullptr ? "finalize" : nullptr;
    }
    case 4: {
      auto* t = static_cast<const ncclTuner_v4_t*>(symbol);
      return t->init == nullptr ? "init" : t->getCollInfo == nullptr ? "getCollInfo" : t->destroy == nullptr ? "destroy" : nullptr;
    }
    case 3: {
      auto* t = static_cast<const ncclTuner_v3_t*>(symbol);
      return t->init == nullptr ? "init" : t->getCollInfo == nullptr ? "getCollInfo" : t->destroy == nullptr ? "destroy" : nullptr;
    }
    default: {
      auto* t = static_cast<const ncclTuner_v2_t*>(symbol);
      return t->init == nullptr ? "init" : t->getCollInfo == nullptr ? "getCollInfo" : t->destroy == nullptr ? "destroy" : nullptr;
    }
  }
}

/// Finds and opens the library; nullptr when there is none to use (said in the log).
std::shared_ptr<LoadedTuner> load(const std::string& value, const std::string& netValue) {
  Opened o = openBesideNet("tuner", "TUNER", value, netValue, kSymbols, log::kTuning);
  if (o.symbol == nullptr) return nullptr;
  Library library = std::move(o.library);
  const void* symbol = o.symbol;
  const int index = o.index;
  auto tuner = std::make_shared<LoadedTuner>();
  tuner->version = 5 - index;
  tuner->symbol = symbol;
  const char* name = *static_cast<const char* const*>(symbol);  // every version starts with its name
  tuner->name = name != nullptr ? name : "(unnamed)";
  if (const char* missing = missingFunction(tuner->version, symbol); missing != nullptr) {
    BRAID_WARN("TUNER/Plugin: %s: %s (%s) has no %s function; going on without a tuner plugin",
               library.path().c_str(), tuner->name.c_str(), kSymbols[index].c_str(), missing);
    return nullptr;
  }
  BRAID_INFO(log::kInit | log::kTuning, "TUNER/Plugin: Loaded tuner plugin %s (v%d) from %s", tuner->name.c_str(),
             tuner->version, library.path().c_str());
  tuner->library = std::move(library);
  return tuner;
}

struct Registry {
  std::mutex mutex;
  std::weak_ptr<LoadedTuner> current;  ///< alive while a communicator uses it
  std::string failedFor;               ///< the variables' values that found no usable plugin
  bool failed = false;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: communicators may end during exit
  return *r;
}

/// The library in use, or a new one (nullptr: none).
std::shared_ptr<LoadedTuner> acquire() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (auto live = r.current.lock()) return live;
  params::Store& p = params::process();
  const std::string value = p.lookup("NCCL_TUNER_PLUGIN").text;  // (not cached: read anew each load)
  const std::string netValue = p.lookup("NCCL_NET_PLUGIN").text;
  const std::string key = value + '\n' + netValue;
  if (r.failed && r.failedFor == key) return nullptr;
  std::shared_ptr<LoadedTuner> tuner;
  if (disabled(value)) {
    BRAID_INFO(log::kInit | log::kTuning, "TUNER/Plugin: disabled by NCCL_TUNER_PLUGIN=%s", value.c_str());
  } else {
    tuner = load(value, netValue);
  }
  r.failed = tuner == nullptr;
  r.failedFor = key;
  r.current = tuner;
  return tuner;
}

void fillConstants(const TunerCommInfo& info, ncclTunerConstants_v5_t* c) {
  std::memset(c, 0, sizeof *c);  // (the algorithms Braid does not run, and the bandwidths: 0)
  for (int a = 0; a < 2; ++a) {
    for (int p = 0; p < kNcclProtocols; ++p) {
      c->baseLatencies[a][p] = info.baseLatency[a][p];
      for (int link = 0; link < NCCL_NUM_HW_LINKS; ++link) c->hwLatencies[link][a][p] = info.hwLatency[link][a][p];
    }
  }
}

const char* const kAlgoNames[] = {"Tree", "Ring"};
const char* const kProtoNames[] = {"LL", "LL128", "Simple"};
const char* const kLinkNames[] = {"NVLink", "PCI", "network"};

/// Whether any of the n values at `left` differs from those at `given`.
bool changed(const double* given, const double* left, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!(left[i] == given[i])) return true;  // (a NaN left there counts as a change)
  return false;
}

/// What a v5 init left in the constants: Tree's and Ring's latencies into `info` (a value that
/// is not a time >= 0 is a WARN, and Braid's stays); a change to what Braid's model has no
/// place for, said at INFO once.
void readConstants(const ncclTunerConstants_v5_t& given, const ncclTunerConstants_v5_t& left, const LoadedTuner& tuner,
                   TunerCommInfo& info) {
  auto take = [&](double value, double* into, const char* what) {
    if (value == *into) return;
    if (!std::isfinite(value) || value < 0) {
      BRAID_WARN("TUNER/Plugin: rank %d: tuner plugin %s set the %s latency to %g at init: not a time; Braid's %g "
                 "kept", info.rank, tuner.name.c_str(), what, value, *into);
      return;
    }
    *into = value;
  };
  char what[64];
  for (int a = 0; a < 2; ++a) {
    for (int p = 0; p < kNcclProtocols; ++p) {
      snprintf(what, sizeof what, "%s/%s base", kAlgoNames[a], kProtoNames[p]);
      take(left.baseLatencies[a][p], &info.baseLatency[a][p], what);
      for (int link = 0; link < NCCL_NUM_HW_LINKS; ++link) {
        snprintf(what, sizeof what, "%s/%s %s", kAlgoNames[a], kProtoNames[p], kLinkNames[link]);
        take(left.hwLatencies[link][a][p], &info.hwLatency[link][a][p], what);
      }
    }
  }
  std::string unused;
  auto note = [&](bool differs, const char* name) {
    if (differs) unused += (unused.empty() ? "" : ", ") + std::string(name);
  };
  constexpr size_t kOthers = (NCCL_NUM_ALGORITHMS - 2) * NCCL_NUM_PROTOCOLS;  // CollNet, NVLS, PAT
  bool otherLatencies = changed(&given.baseLatencies[2][0], &left.baseLatencies[2][0], kOthers);
  for (int link = 0; link < NCCL_NUM_HW_LINKS; ++link)
    otherLatencies |= changed(&given.hwLatencies[link][2][0], &left.hwLatencies[link][2][0], kOthers);
  note(otherLatencies, "latencies of CollNet, NVLS or PAT");
  constexpr size_t kBws = NCCL_NUM_COMPCAPS * NCCL_NUM_TUNING_SCALES;
  note(changed(&given.llMaxBws[0][0], &left.llMaxBws[0][0], kBws), "llMaxBws");
  note(changed(&given.perChMaxRingLL128Bws[0][0], &left.perChMaxRingLL128Bws[0][0], kBws), "perChMaxRingLL128Bws");
  note(changed(&given.perChMaxTreeLL128Bws[0][0], &left.perChMaxTreeLL128Bws[0][0], kBws), "perChMaxTreeLL128Bws");
  note(changed(&given.perChMaxTreeBws[0][0], &left.perChMaxTreeBws[0][0], kBws), "perChMaxTreeBws");
  note(changed(&given.perChMaxNVLSTreeBws[0][0], &left.perChMaxNVLSTreeBws[0][0], kBws), "perChMaxNVLSTreeBws");
  if (!unused.empty()) {
    BRAID_INFO(log::kTuning, "TUNER/Plugin: rank %d: tuner plugin %s changed constants Braid's cost model does not "
               "use (%s); they are ignored (Braid uses Tree's and Ring's base and NVLink, PCI and network latencies)",
               info.rank, tuner.name.c_str(), unused.c_str());
  }
}

}  // namespace

std::unique_ptr<TunerSession> TunerSession::open(TunerCommInfo& info) {
  std::shared_ptr<LoadedTuner> tuner;
  try {
    tuner = acquire();
  } catch (const std::exception& e) {
    BRAID_WARN("TUNER/Plugin: %s; going on without a tuner plugin", e.what());
  }
  if (tuner == nullptr) return nullptr;
  void* context = nullptr;
  ncclResult_t r = ncclSuccess;
  const size_t nRanks = static_cast<size_t>(info.nRanks), nNodes = static_cast<size_t>(info.nNodes);
  switch (tuner->version) {
    case 5: {
      ncclNvlDomainInfo_v5_t domains{info.nvlDomains, info.minRanksPerNvlDomain, info.maxRanksPerNvlDomain};
      ncclTunerConstants_v5_t given, constants;
      fillConstants(info, &given);
      constants = given;
      r = static_cast<const ncclTuner_v5_t*>(tuner->symbol)->init(&context, info.commId, nRanks, nNodes, pluginLog,
                                                                   &domains, &constants);
      if (r == ncclSuccess) readConstants(given, constants, *tuner, info);
      break;
    }
    case 4: r = static_cast<const ncclTuner_v4_t*>(tuner->symbol)->init(nRanks, nNodes, pluginLog, &context); break;
    case 3: r = static_cast<const ncclTuner_v3_t*>(tuner->symbol)->init(nRanks, nNodes, pluginLog, &context); break;
    default: r = static_cast<const ncclTuner_v2_t*>(tuner->symbol)->init(nRanks, nNodes, pluginLog, &context); break;
  }
  if (r != ncclSuccess) {
    BRAID_WARN("TUNER/Plugin: %s: tuner plugin %s (v%d) init failed with %d on rank %d of communicator %#llx; going "
               "on without a tuner plugin", tuner->library.path().c_str(), tuner->name.c_str(), tuner->version,
               static_cast<int>(r), info.rank, static_cast<unsigned long long>(info.commId));
    return nullptr;
  }
  BRAID_INFO(log::kTuning, "TUNER/Plugin: rank %d: %s (v%d) initialised for communicator %#llx (%d ranks, %d nodes)",
             info.rank, tuner->name.c_str(), tuner->version, static_cast<unsigned long long>(info.commId), info.nRanks,
             info.nNodes);
  return std::unique_ptr<TunerSession>(new TunerSession(std::move(tuner), context, info.rank));
}

TunerSession::TunerSession(std::shared_ptr<LoadedTuner> tuner, void* context, int rank)
    : tuner_(std::move(tuner)), context_(context), rank_(rank) {}

TunerSession::~TunerSession() {
  ncclResult_t r = ncclSuccess;
  switch (tuner_->version) {
    case 5: r = static_cast<const ncclTuner_v5_t*>(tuner_->symbol)->finalize(context_); break;
    case 4: r = static_cast<const ncclTuner_v4_t*>(tuner_->symbol)->destroy(context_); break;
    case 3: r = static_cast<const ncclTuner_v3_t*>(tuner_->symbol)->destroy(context_); break;
    default: r = static_cast<const ncclTuner_v2_t*>(tuner_->symbol)->destroy(context_); break;
  }
  if (r != ncclSuccess) {
    BRAID_WARN("TUNER/Plugin: rank %d: tuner plugin %s (v%d) %s returned %d", rank_, tuner_->name.c_str(),
               tuner_->version, tuner_->version == 5 ? "finalize" : "destroy", static_cast<int>(r));
  }
  // (the library closes when the last session lets tuner_ go)
}

const std::string& TunerSession::name() const { return tuner_->name; }
int TunerSession::version() const { return tuner_->version; }

bool TunerSession::getCollInfo(kernels::Func f, uint64_t bytes, int numPipeOps, int regBuff, CostTable& table,
                               int* nChannels) {
  const auto func = static_cast<ncclFunc_t>(f);
  auto** costs = reinterpret_cast<float**>(&table[0][0]);  // NCCL passes the 2-D array so
  *nChannels = 0;
  ncclResult_t r = ncclSuccess;
  switch (tuner_->version) {
    case 5:
      r = static_cast<const ncclTuner_v5_t*>(tuner_->symbol)
              ->getCollInfo(context_, func, bytes, numPipeOps, costs, kNcclAlgorithms, kNcclProtocols, regBuff,
                            nChannels);
      break;
    case 4:
      r = static_cast<const ncclTuner_v4_t*>(tuner_->symbol)
              ->getCollInfo(context_, func, bytes, numPipeOps, costs, kNcclAlgorithms, kNcclProtocols, regBuff,
                            nChannels);
      break;
    case 3:
      r = static_cast<const ncclTuner_v3_t*>(tuner_->symbol)
              ->getCollInfo(context_, func, bytes, numPipeOps, costs, kNcclAlgorithms, kNcclProtocols, nChannels);
      break;
    default: {
      // Braid runs neither CollNet nor NVLS; the answer becomes a zero cost, if available.
      int algorithm = NCCL_ALGO_UNDEF, protocol = NCCL_PROTO_UNDEF;
      r = static_cast<const ncclTuner_v2_t*>(tuner_->symbol)
              ->getCollInfo(context_, func, bytes, 0, 0, numPipeOps, &algorithm, &protocol, nChannels);
      if (r == ncclSuccess && algorithm >= 0 && algorithm < kNcclAlgorithms && protocol >= 0 &&
          protocol < kNcclProtocols && table[algorithm][protocol] != kIgnore) {
        table[algorithm][protocol] = 0.0f;
      }
      break;
    }
  }
  if (r != ncclSuccess) {
    warnOnce(0, "TUNER/Plugin: rank %d: tuner plugin %s getCollInfo for %s of %llu bytes returned %d; Braid chooses "
             "(said once)", rank_, tuner_->name.c_str(), topo::funcName(f), static_cast<unsigned long long>(bytes),
             static_cast<int>(r));
    return false;
  }
  return true;
}

void TunerSession::warnOnce(int what, const char* format, ...) {
  const uint32_t bit = 1u << (what & 31);
  const bool first = (warned_ & bit) == 0;
  warned_ |= bit;
  const log::Level level = first ? log::Level::Warn : log::Level::Trace;
  if (!log::enabled(level, log::kTuning)) return;
  char text[1024];
  va_list args;
  va_start(args, format);
  vsnprintf(text, sizeof text, format, args);
  va_end(args);
  log::write(level, first ? log::kAll : log::kTuning, __FILE__, __LINE__, "%s", text);
}

}  // namespace braid::plugin
