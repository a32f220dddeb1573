// Tuner plugins (NCCL's ncclTuner_v2..v5, include/nccl_tuner.h): loading, one context per
// communicator, and the getCollInfo call in NCCL's cost-table form.
//
// The library is found once (plugin::open: NCCL_TUNER_PLUGIN, else libnccl-tuner.so, else the
// net plugin's library, as NCCL 2.28.9 does) and shared by every communicator; it is closed
// when the last communicator using it ends, and looked for again by the next one (a variable
// changed in between is honoured; a value that failed before is not tried again, so its WARN
// is said once). The newest symbol wins: v5, v4, v3, v2. Every version is driven through the
// v5 form here: older inits get their own arguments, v3 has no regBuff, and v2's answer (an
// algorithm and a protocol) becomes a zero cost in the table, as NCCL adapts it. What a v5
// init changed in the constants it was given comes back to the caller (open).
//
// What the plugin's answer means for Braid's choice is the planner's business
// (plan/plugin_choice.h); this file only talks to the plugin and checks what it returns.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/work.h"

namespace braid::plugin {

/// NCCL's cost table dimensions (NCCL_NUM_ALGORITHMS x NCCL_NUM_PROTOCOLS of nccl_tuner.h).
constexpr int kNcclAlgorithms = 7;
constexpr int kNcclProtocols = 3;
/// NCCL_ALGO_PROTO_IGNORE: an entry that is not available.
constexpr float kIgnore = -1.0f;
using CostTable = float[kNcclAlgorithms][kNcclProtocols];

/// What a communicator tells its tuner plugin at init (NCCL's v5 arguments).
struct TunerCommInfo {
  uint64_t commId = 0;  ///< the communicator's hash, the same on every rank
  int rank = 0;         ///< for messages
  int nRanks = 1;
  int nNodes = 1;
  int nvlDomains = 1;  ///< Braid counts a node as an NVLink domain
  int minRanksPerNvlDomain = 1;
  int maxRanksPerNvlDomain = 1;
  /// Braid's latencies (µs) as NCCL's v5 constants give them, for Tree and Ring (NCCL's
  /// algorithms 0 and 1): once per operation [algorithm][protocol], and per step over NVLink,
  /// PCI and the network [link][algorithm][protocol] (plan/plugin_choice.h fills them).
  double baseLatency[2][kNcclProtocols] = {};
  double hwLatency[3][2][kNcclProtocols] = {};
};

struct LoadedTuner;

/// One communicator's context in the tuner plugin: init when opened, finalize (destroy for
/// v2-v4) when destroyed.
class TunerSession {
 public:
  /// The plugin's session for this communicator, loading the library first if no live
  /// communicator holds it; nullptr when there is no plugin, or it cannot be used (said at
  /// INFO when absent, WARN when it exists but fails). Never throws.
  /// A v5 plugin's init may change the constants it is given: `info`'s latencies come back as
  /// it left them (a value that is not a finite time >= 0 is a WARN and stays Braid's); a
  /// change to the bandwidth constants, which Braid's model has no place for, is said at INFO.
  static std::unique_ptr<TunerSession> open(TunerCommInfo& info);
  ~TunerSession();
  TunerSession(const TunerSession&) = delete;
  TunerSession& operator=(const TunerSession&) = delete;

  const std::string& name() const;
  int version() const;

  /// Asks the plugin about a collective of NCCL's five (f before kAlltoAll) of `bytes`:
  /// `table` holds Braid's predictions (kIgnore where unavailable) and comes back as the plugin
  /// left it; *nChannels comes back as the plugin set it (0: unset). numPipeOps and regBuff
  /// are NCCL's (plan/plugin_choice.h's PluginInputs; v2 and v3 get no regBuff). False when
  /// the plugin returned an error (a WARN the first time). Calls of one session come from one
  /// thread at a time (the communicator's).
  bool getCollInfo(kernels::Func f, uint64_t bytes, int numPipeOps, int regBuff, CostTable& table, int* nChannels);

  /// A WARN about this session's answers, said the first time each `what` happens (then at
  /// TRACE): a plugin asked for every collective must not flood the log.
  void warnOnce(int what, const char* format, ...) __attribute__((format(printf, 3, 4)));

 private:
  TunerSession(std::shared_ptr<LoadedTuner> tuner, void* context, int rank);
  std::shared_ptr<LoadedTuner> tuner_;
  void* context_;
  int rank_;
  uint32_t warned_ = 0;
};

}  // namespace braid::plugin
