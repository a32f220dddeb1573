// Creating communicators: unique ids, the per-rank init work, and the settings it reads.
#pragma once

#include <vector>

#include <nccl.h>

#include <functional>
#include <memory>
#include <string>

#include "bootstrap/bootstrap.h"
#include "comm/communicator.h"
#include "core/params.h"
#include "runtime/device.h"

namespace braid::comm {

/// Everything init reads from the environment, gathered once so that tests can vary it.
struct InitSettings {
  bootstrap::NetSettings net;
  std::string commIdEnv;  ///< NCCL_COMM_ID
  std::string commSecret;  ///< BRAID_COMM_SECRET: every rank must present the same
  std::string hostId;     ///< NCCL_HOSTID
  bool defaultBlocking = true;
  std::string backend;  ///< BRAID_BACKEND: auto, host or cuda

  /// From the parameter registry (environment and config files). A value out of range is
  /// replaced, with one WARN a store naming the variable, the value given and the value used.
  static InitSettings fromParams();
  static InitSettings fromParams(params::Store& store);
};

/// A new unique id: a random secret and the address of a root started in this process, or,
/// with NCCL_COMM_ID, the fixed id naming that address (rank 0 starts the root in init).
/// rootTicket, when given, receives the started root's ticket (bootstrap::stopRoot; 0: none).
ncclUniqueId makeUniqueId(const InitSettings& settings, uint64_t* rootTicket = nullptr);

/// The CUDA device a new rank runs on: `requested` (ncclCommInitAll's devlist entry), or with
/// -1 the calling thread's current device; -1 when BRAID_BACKEND=host or no device is usable.
int deviceOfNewRank(const InitSettings& settings, int requested);

/// Tests only: while set, every communicator this process (or a child forked after) creates
/// takes the CUDA backend's path above the runtime (device 0, asynchronous launches on the
/// given streams) on the device `factory` makes, which runs the kernels on the CPU; an empty
/// factory restores the normal choice. Set it before creating communicators.
using TestDeviceFactory = std::function<std::unique_ptr<runtime::Device>(int threadsPerBlock)>;
void setTestDeviceFactory(TestDeviceFactory factory);

/// Allocates the communicator for `rank` of `nRanks` with its validated configuration.
std::unique_ptr<ncclComm> newCommunicator(int rank, int nRanks, const CommConfig& config, int cudaDevice);

/// The init work of one rank: rendezvous, peer exchange and checks. Throws on failure.
void initRank(Communicator& comm, const ncclUniqueId& id, const InitSettings& settings);
/// The same with the unique ids of ncclCommInitRankScalable: the rank meets the others at
/// its share of the ids' roots (Bootstrap::join). Ids that all name one root count as one.
void initRank(Communicator& comm, const std::vector<ncclUniqueId>& ids, const InitSettings& settings);

/// Checks the arguments common to every init call (names the offending argument).
void checkInitArguments(int nRanks, int rank);

}  // namespace braid::comm
