// What every rank learns about every other rank at init.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace braid {

enum class Backend : int32_t { kHost = 0, kCuda = 1 };
const char* backendName(Backend b);

/// One rank's description, exchanged by allgather during init.
struct PeerInfo {
  int32_t rank;
  uint32_t abiVersion;     ///< NCCL_VERSION_CODE
  char braidVersion[16];
  uint64_t hostHash;       ///< hostname + boot id, or NCCL_HOSTID
  int32_t pid;
  int32_t cudaDevice;      ///< -1 on the host backend
  int64_t busId;           ///< PCI bus id of the CUDA device, -1 when none
  Backend backend;
  int32_t cpus;            ///< CPUs this process may run on (its affinity), 0 when unknown
};
static_assert(std::is_trivially_copyable_v<PeerInfo> && sizeof(PeerInfo) == 56);

/// This process's host identity: NCCL_HOSTID when set, else hostname + boot id.
std::string hostIdentity(const std::string& hostIdOverride);
uint64_t hashString(const std::string& s);

/// Checks that all ranks can form one communicator (same ABI and Braid version, same backend);
/// throws ncclInvalidUsage naming both ranks and what differs.
void checkPeers(const std::vector<PeerInfo>& peers);

/// Whether ranks a and b run on one GPU: one host and the same PCI bus id (whatever each
/// process numbers the device), or, where a bus id is unknown, one process and one ordinal.
bool sameGpu(const PeerInfo& a, const PeerInfo& b);

/// This rank's index among the ranks on its host, and how many ranks that host has.
void localPosition(const std::vector<PeerInfo>& peers, int rank, int* localRank, int* localRanks);

}  // namespace braid
