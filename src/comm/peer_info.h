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
  int32_t pid;             ///< in its own pid namespace (containers may each have a pid 1)
  int32_t cudaDevice;      ///< -1 on the host backend
  int64_t busId;           ///< PCI bus id of the CUDA device, -1 when none
  Backend backend;
  int32_t cpus;            ///< CPUs this process may run on (its affinity), 0 when unknown
  uint64_t processId;      ///< process::randomId(): tells processes apart where pids do not
  uint64_t pidNamespace;   ///< inode of the process's pid namespace, 0 when unknown
  uint64_t shmDevice;      ///< st_dev and st_ino of its /dev/shm (both 0 when unknown)
  uint64_t shmInode;
};
static_assert(std::is_trivially_copyable_v<PeerInfo> && sizeof(PeerInfo) == 88);

/// This process's host identity: NCCL_HOSTID when set, else hostname + boot id.
std::string hostIdentity(const std::string& hostIdOverride);
uint64_t hashString(const std::string& s);

/// Checks that all ranks can form one communicator (same ABI and Braid version, same backend);
/// throws ncclInvalidUsage naming both ranks and what differs.
void checkPeers(const std::vector<PeerInfo>& peers);

/// Whether ranks a and b are threads of one process: one host and one process id (never the
/// pid alone, which containers sharing a host repeat).
bool sameProcess(const PeerInfo& a, const PeerInfo& b);

/// Whether ranks a and b, processes of one host, can share POSIX shared memory: their /dev/shm
/// is the same directory of the same filesystem (containers may each mount their own).
bool shareMemory(const PeerInfo& a, const PeerInfo& b);

/// Whether a's pid names b's process from a's side: one host and one (known) pid namespace.
bool samePidNamespace(const PeerInfo& a, const PeerInfo& b);

/// Whether ranks a and b run on one GPU: one host and the same PCI bus id (whatever each
/// process numbers the device), or, where a bus id is unknown, one process and one ordinal.
bool sameGpu(const PeerInfo& a, const PeerInfo& b);

/// How rank `rank` shares its GPU with the communicator's other ranks, and the two ways that
/// runs badly or not at all. Ranks of other processes without MPS are time-sliced: correct,
/// but each wait on one costs a context switch. Ranks of one process need a hardware queue a
/// stream: beyond `queues` (CUDA_DEVICE_MAX_CONNECTIONS) streams share queues, and a rank's
/// kernel queued behind another's that waits for it hangs.
struct GpuSharing {
  int inProcess = 0;          ///< other ranks of this process on the GPU
  int otherProcesses = 0;     ///< ranks of other processes on it
  bool timeSliced = false;    ///< other processes share it and no MPS daemon serves it
  bool tooFewQueues = false;  ///< this process's ranks on it outnumber the hardware queues
  int queuesNeeded = 1;       ///< the queues this process's ranks on it need (at most 32)
};
GpuSharing gpuSharing(const std::vector<PeerInfo>& peers, int rank, bool mpsRunning, int queues);

/// The hardware queues CUDA gives a process's streams per device, from the text of
/// CUDA_DEVICE_MAX_CONNECTIONS (null: unset) as CUDA reads it: 8 unless it is 1..32.
int deviceConnections(const char* text);

/// This rank's index among the ranks on its host, and how many ranks that host has.
void localPosition(const std::vector<PeerInfo>& peers, int rank, int* localRank, int* localRanks);

}  // namespace braid
