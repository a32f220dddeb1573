#include "comm/peer_info.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "core/status.h"

namespace braid {

const char* backendName(Backend b) { return b == Backend::kCuda ? "CUDA" : "host"; }

uint64_t hashString(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

std::string hostIdentity(const std::string& hostIdOverride) {
  if (!hostIdOverride.empty()) return hostIdOverride;
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  std::string bootId;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> bootId;
  return std::string(name) + "/" + bootId;
}

void checkPeers(const std::vector<PeerInfo>& peers) {
  const PeerInfo& first = peers.front();
  for (const PeerInfo& p : peers) {
    if (p.abiVersion != first.abiVersion || std::strncmp(p.braidVersion, first.braidVersion, 16) != 0) {
      fail(ncclInvalidUsage, "rank %d runs Braid %.16s (NCCL ABI %u) but rank %d runs Braid %.16s (NCCL ABI %u); "
                             "all ranks must use the same library",
           first.rank, first.braidVersion, first.abiVersion, p.rank, p.braidVersion, p.abiVersion);
    }
    if (p.backend != first.backend) {
      fail(ncclInvalidUsage, "rank %d uses the %s backend but rank %d the %s backend; all ranks of a communicator "
                             "must use the same one (BRAID_BACKEND)",
           first.rank, backendName(first.backend), p.rank, backendName(p.backend));
    }
  }
}

bool sameGpu(const PeerInfo& a, const PeerInfo& b) {
  if (a.hostHash != b.hostHash || a.cudaDevice < 0 || b.cudaDevice < 0) return false;
  if (a.busId >= 0 && b.busId >= 0) return a.busId == b.busId;
  return sameProcess(a, b) && a.cudaDevice == b.cudaDevice;
}

bool sameProcess(const PeerInfo& a, const PeerInfo& b) {
  return a.hostHash == b.hostHash && a.processId == b.processId;
}

bool shareMemory(const PeerInfo& a, const PeerInfo& b) {
  return a.hostHash == b.hostHash && (a.shmDevice != 0 || a.shmInode != 0) && a.shmDevice == b.shmDevice &&
         a.shmInode == b.shmInode;
}

bool samePidNamespace(const PeerInfo& a, const PeerInfo& b) {
  return a.hostHash == b.hostHash && a.pidNamespace != 0 && a.pidNamespace == b.pidNamespace;
}

void localPosition(const std::vector<PeerInfo>& peers, int rank, int* localRank, int* localRanks) {
  *localRank = 0;
  *localRanks = 0;
  for (const PeerInfo& p : peers) {
    if (p.hostHash != peers[rank].hostHash) continue;
    if (p.rank < rank) ++*localRank;
    ++*localRanks;
  }
}

GpuSharing gpuSharing(const std::vector<PeerInfo>& peers, int rank, bool mpsRunning, int queues) {
  GpuSharing s;
  const PeerInfo& mine = peers[rank];
  for (const PeerInfo& p : peers) {
    if (p.rank == mine.rank || !sameGpu(p, mine)) continue;
    (sameProcess(p, mine) ? s.inProcess : s.otherProcesses) += 1;
  }
  s.timeSliced = s.otherProcesses > 0 && !mpsRunning;
  s.queuesNeeded = std::min(32, s.inProcess + 1);
  s.tooFewQueues = s.inProcess + 1 > queues;
  return s;
}

int deviceConnections(const char* text) {
  if (text == nullptr) return 8;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  return end != text && *end == '\0' && v >= 1 && v <= 32 ? static_cast<int>(v) : 8;
}

}  // namespace braid
