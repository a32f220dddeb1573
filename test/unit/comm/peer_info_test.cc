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
