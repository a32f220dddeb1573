// Which peers are one process, which may share memory, and whose pids mean something here.
#include <catch2/catch.hpp>

#include <cstring>

#include "comm/peer_info.h"

using namespace braid;

namespace {
PeerInfo peer(uint64_t host, int pid, uint64_t processId, uint64_t pidNamespace, uint64_t shmDevice, uint64_t shmInode) {
  PeerInfo p;
  std::memset(&p, 0, sizeof p);
  p.hostHash = host;
  p.pid = pid;
  p.processId = processId;
  p.pidNamespace = pidNamespace;
  p.shmDevice = shmDevice;
  p.shmInode = shmInode;
  p.cudaDevice = -1;
  p.busId = -1;
  return p;
}
}  // namespace

TEST_CASE("one process: the same host and process id, whatever the pids", "[unit][comm]") {
  const PeerInfo a = peer(7, 1, 0xaaaa, 100, 27, 1);
  CHECK(sameProcess(a, a));
  CHECK(sameProcess(a, peer(7, 1, 0xaaaa, 100, 27, 1)));
  // Two containers on one host (same hostname and boot id), each rank pid 1 of its namespace.
  CHECK_FALSE(sameProcess(a, peer(7, 1, 0xbbbb, 200, 27, 1)));
  CHECK_FALSE(sameProcess(a, peer(7, 1, 0xbbbb, 100, 27, 1)));  // (a fork: a new id, pid aside)
  CHECK_FALSE(sameProcess(a, peer(8, 1, 0xaaaa, 100, 27, 1)));  // another host
}

TEST_CASE("shared memory between processes of one host only through the same /dev/shm", "[unit][comm]") {
  const PeerInfo a = peer(7, 10, 0xaaaa, 100, 27, 1);
  CHECK(shareMemory(a, peer(7, 11, 0xbbbb, 100, 27, 1)));
  CHECK(shareMemory(a, peer(7, 1, 0xbbbb, 200, 27, 1)));       // other pid namespace, host's /dev/shm mounted in
  CHECK_FALSE(shareMemory(a, peer(7, 1, 0xbbbb, 200, 40, 1)));  // a private tmpfs
  CHECK_FALSE(shareMemory(a, peer(7, 1, 0xbbbb, 200, 27, 9)));  // another directory of the same filesystem
  CHECK_FALSE(shareMemory(a, peer(8, 11, 0xbbbb, 100, 27, 1)));  // another host
  CHECK_FALSE(shareMemory(peer(7, 10, 0xaaaa, 100, 0, 0), peer(7, 11, 0xbbbb, 100, 0, 0)));  // unknown: never
}

TEST_CASE("a peer's pid is watched only from its own pid namespace", "[unit][comm]") {
  const PeerInfo a = peer(7, 10, 0xaaaa, 100, 27, 1);
  CHECK(samePidNamespace(a, peer(7, 11, 0xbbbb, 100, 27, 1)));
  CHECK_FALSE(samePidNamespace(a, peer(7, 11, 0xbbbb, 200, 27, 1)));
  CHECK_FALSE(samePidNamespace(a, peer(8, 11, 0xbbbb, 100, 27, 1)));
  CHECK_FALSE(samePidNamespace(peer(7, 10, 0xaaaa, 0, 27, 1), peer(7, 11, 0xbbbb, 0, 27, 1)));  // unknown: never
}

TEST_CASE("one GPU: by bus id, or one process and one ordinal when a bus id is unknown", "[unit][comm]") {
  PeerInfo a = peer(7, 1, 0xaaaa, 100, 27, 1);
  PeerInfo b = peer(7, 1, 0xbbbb, 200, 27, 1);
  a.cudaDevice = b.cudaDevice = 0;
  CHECK_FALSE(sameGpu(a, b));  // both pid 1, other processes: ordinal 0 may be different GPUs
  b.processId = a.processId;
  CHECK(sameGpu(a, b));
  a.busId = 0x1000;
  b.busId = 0x1000;
  b.processId = 0xbbbb;
  CHECK(sameGpu(a, b));
}

namespace {
/// Rank r: process `processId` of host 7, on the GPU at PCI bus `busId` (its own ordinal aside).
PeerInfo onGpu(int r, uint64_t processId, int64_t busId, int ordinal) {
  PeerInfo p = peer(7, 10 + static_cast<int>(processId), processId, 100, 27, 1);
  p.rank = r;
  p.busId = busId;
  p.cudaDevice = ordinal;
  return p;
}
}  // namespace

TEST_CASE("sharing a GPU: time-sliced processes without MPS, threads beyond the hardware queues", "[unit][comm]") {
  // Ranks 0-2 threads of process 1; rank 3 process 2 on the same GPU (bus 0x1b) under a narrowed
  // CUDA_VISIBLE_DEVICES (its ordinal 0 where process 1 says 1); rank 4 process 2 on another GPU.
  const std::vector<PeerInfo> peers = {onGpu(0, 1, 0x1b, 1), onGpu(1, 1, 0x1b, 1), onGpu(2, 1, 0x1b, 1),
                                       onGpu(3, 2, 0x1b, 0), onGpu(4, 2, 0x3d, 1)};
  GpuSharing s = gpuSharing(peers, 0, /*mpsRunning=*/false, /*queues=*/8);
  CHECK(s.inProcess == 2);
  CHECK(s.otherProcesses == 1);
  CHECK(s.timeSliced);
  CHECK_FALSE(s.tooFewQueues);
  CHECK(s.queuesNeeded == 3);
  CHECK_FALSE(gpuSharing(peers, 0, /*mpsRunning=*/true, 8).timeSliced);  // MPS: kernels run together
  s = gpuSharing(peers, 1, false, /*queues=*/2);
  CHECK(s.tooFewQueues);  // three ranks of one process, two queues
  CHECK(s.queuesNeeded == 3);
  CHECK_FALSE(gpuSharing(peers, 1, false, 3).tooFewQueues);
  s = gpuSharing(peers, 3, false, 1);  // alone in its process on the GPU: one queue does
  CHECK(s.inProcess == 0);
  CHECK(s.otherProcesses == 3);
  CHECK(s.timeSliced);
  CHECK_FALSE(s.tooFewQueues);
  s = gpuSharing(peers, 4, false, 1);  // alone on its GPU (the same ordinal as ranks 0-2: another bus)
  CHECK(s.inProcess + s.otherProcesses == 0);
  CHECK_FALSE(s.timeSliced);
  // 40 threads on one GPU: CUDA gives at most 32 queues.
  std::vector<PeerInfo> many;
  for (int r = 0; r < 40; ++r) many.push_back(onGpu(r, 1, 0x1b, 0));
  s = gpuSharing(many, 0, false, 32);
  CHECK(s.tooFewQueues);
  CHECK(s.queuesNeeded == 32);
}

TEST_CASE("CUDA_DEVICE_MAX_CONNECTIONS read as CUDA reads it: 8 unless 1..32", "[unit][comm]") {
  CHECK(deviceConnections(nullptr) == 8);
  CHECK(deviceConnections("") == 8);
  CHECK(deviceConnections("1") == 1);
  CHECK(deviceConnections("32") == 32);
  CHECK(deviceConnections("33") == 8);
  CHECK(deviceConnections("0") == 8);
  CHECK(deviceConnections("16x") == 8);
  CHECK(deviceConnections("-4") == 8);
}
