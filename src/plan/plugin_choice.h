// A tuner plugin's say in the planner's choice (plugin/tuner_plugin.h talks to the plugin).
//
// For each of NCCL's five collectives the plugin gets NCCL's cost table: Braid's predicted µs
// for Tree and Ring with LL, LL128 and Simple where Braid runs them and NCCL_ALGO/NCCL_PROTO
// allow them (each at its best channel count), NCCL_ALGO_PROTO_IGNORE everywhere else (the
// CollNet, NVLS and PAT rows included). When the plugin changes any entry, or sets nChannels,
// it has decided: the cheapest entry that was available runs, on the channels it asked for
// (within NCCL_MIN/MAX_NCHANNELS and the config's bounds) or else that entry's best count.
// When it leaves the table as it was, Braid's own choice stands, its own algorithms
// (RecDoubling, Direct, ...) included. Bad answers (NaN, infinities, channel counts beyond
// any bound, every entry ignored) are a WARN once per communicator, and Braid's choice stands.
// Beside the table the plugin gets NCCL's numPipeOps and regBuff (PluginInputs). A v5 plugin's
// init may change the latency constants it is given (fillConstants): applyConstants makes the
// communicator's own copy of Braid's table with those changes.
#pragma once

#include <cstdint>

#include "plan/algo_proto.h"
#include "topology/tuner.h"

namespace braid::plugin {
class TunerSession;
struct TunerCommInfo;
}

namespace braid::plan {

/// What NCCL tells a tuner plugin about a collective beside its function and size.
struct PluginInputs {
  /// NCCL 2.28 (enqueue.cc, ncclPrepareTasks) passes its estimate of the collectives that
  /// share a channel in the launch: the collectives of the group on this communicator (any
  /// function; sends and receives not counted) divided by the communicator's channels,
  /// rounded up. Braid passes the same, its channels being the most a collective may use
  /// (NCCL_MAX_NCHANNELS and the config's maxCTAs): 1 for a call outside a group. Every rank
  /// has the same group and bounds, so every rank passes the same.
  int numPipeOps = 1;
  /// 1 when this rank's send and receive buffers, each over the bytes the collective reads or
  /// writes there, lie in ranges registered with the communicator (ncclCommRegister), or the
  /// call is being captured into a CUDA graph (unless NCCL_GRAPH_REGISTER=0), as NCCL's
  /// getAlgoInfo has it; 0 otherwise. Like NCCL's, each rank's own.
  int regBuff = 0;
};

/// `own` is Braid's choice for `f` of `bytes` among `algos` (kernels::Algo bits) and `protos`
/// (kernels::Proto bits, `forced` those NCCL_PROTO named); returns the choice to run, which is
/// `own` unless the plugin decided.
topo::Choice pluginChoice(plugin::TunerSession& session, const topo::Tuner& tuner, kernels::Func f, uint64_t bytes,
                          uint32_t algos, uint32_t protos, uint32_t forced, const topo::Choice& own,
                          const PluginInputs& inputs);

/// NCCL's v5 constants from Braid's table: Tree's and Ring's base latencies, and their
/// per-step latencies over NVLink, PCI and the network (Braid's hopLatency plus hopShift for
/// those link classes; the host's memory link has no NCCL row).
void fillConstants(const topo::CostTable& table, plugin::TunerCommInfo* info);

/// Whether a plugin's init left `returned` other than `given`; if so, *tuned becomes `table`
/// with Tree's and Ring's base latencies replaced by the plugin's and their per-step
/// latencies moved by what it changed (hopShift). Each change is said at INFO (TUNING).
bool applyConstants(const topo::CostTable& table, const plugin::TunerCommInfo& given,
                    const plugin::TunerCommInfo& returned, int rank, topo::CostTable* tuned);

}  // namespace braid::plan
