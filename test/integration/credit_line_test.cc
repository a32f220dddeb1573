// Where a connection's head (the step its receiver freed last) lives, and that it stays exact.
// Between ranks of one host head is the sender's credit line: memory the sender allocated,
// never the receiver's FIFO, so that the sender's credit wait polls its own memory and the
// receiver's release is the remote write. Threads (transport/p2p): its heap, or its device's
// through its allocator; processes (transport/shm): its device's memory exported where the
// receiver's slots are device memory, else a segment of its own.
// After 1000 small operations (AllReduce and a ring of sends) every connection between ranks
// of one host is at rest: head, the sender's step counter and the receiver's are one number.
// Threads and processes, on the host and on the emulated GPU; the threads-per-channel suite
// runs the host case with 3 threads a channel.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "datapath/data_path.h"
#include "harness/ranks.h"
#include "plan/planner.h"
#include "integration/emulated_scope.h"
#include "integration/test_env.h"
#include "transport/connector.h"

using namespace braid;
using braid::test::expect;

namespace {

bool inside(const void* p, const void* begin, uint64_t bytes) {
  const char* c = static_cast<const char*>(p);
  const char* b = static_cast<const char*>(begin);
  return c >= b && c < b + bytes;
}

/// What is wrong with where this rank's send ends keep head, and with their counters at rest.
std::string checkEnds(ncclComm_t comm, bool threads, bool onDevice) {
  std::string wrong;
  int p2pEnds = 0, busy = 0;
  comm->dataPath().connector().forEachEnd([&](const transport::Connector::End& e) {
    if (!e.isSend || (e.kind != transport::Kind::kP2p && e.kind != transport::Kind::kShm)) return;
    const transport::FifoMemory& m = *e.memory;
    const uint64_t* head = m.creditWord();
    const std::string who = "send end to rank " + std::to_string(e.peer) + ": ";
    if (m.handle(true).head != head) wrong += who + "the kernels' head is not the end's credit word\n";
    p2pEnds += e.kind == transport::Kind::kP2p;
    // (p2p's block starts a page before base(): the prefix)
    const uint64_t before = e.kind == transport::Kind::kP2p ? 4096 : 0;
    if (inside(head, m.base() - before, m.hostBytes() + before)) wrong += who + "head is in the receiver's FIFO\n";
    if (m.countersOnDevice() && inside(head, m.counters(), transport::deviceDataBytes(m.sizes()))) {
      wrong += who + "head is in the receiver's device memory\n";
    }
    // On a device, the sender's own device memory: from its allocator between threads, exported
    // between processes whose slots are device memory; else a segment of the sender's.
    const bool deviceLine = onDevice && (e.kind == transport::Kind::kP2p || m.slotsShared());
    if ((m.creditData().at == reinterpret_cast<const char*>(head)) != deviceLine) {
      wrong += who + (deviceLine ? "head is not device memory of the sender's allocator\n"
                                 : "head is device memory where it should be the host's\n");
    }
    // (this rank's last sends may still be on their way: the peer frees them in a moment)
    uint64_t sent = 0, received = 0, freed = 0;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    do {
      sent = kernels::loadAcquire(m.stepWord(true));
      received = kernels::loadAcquire(m.stepWord(false));
      freed = kernels::loadAcquire(const_cast<uint64_t*>(head));
    } while ((sent != received || received != freed) && std::chrono::steady_clock::now() < until);
    busy += sent != 0;
    if (sent != received || received != freed) {
      wrong += who + "at rest, sent " + std::to_string(sent) + ", received " + std::to_string(received) + ", freed " +
               std::to_string(freed) + "\n";
    }
  });
  if (threads && p2pEnds == 0) wrong += "no connection between threads was checked\n";
  if (busy == 0) wrong += "no connection has carried a step\n";
  return wrong;
}

/// 1000 operations of a few floats, each checked, then the counters.
void runAndCheck(int rank, int n, ncclComm_t comm, bool threads, bool onDevice) {
  const size_t count = 7;
  std::vector<float> in(count), out(count), got(count);
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  for (int op = 0; op < 1000; ++op) {
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((rank * 3 + op + i) % 11);
    if (op % 2 == 0) {
      EXPECT_OK(ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comm, test::streamOf(rank)));
    } else {
      EXPECT_OK(ncclGroupStart());
      EXPECT_OK(ncclSend(in.data(), count, ncclFloat, next, comm, test::streamOf(rank)));
      EXPECT_OK(ncclRecv(got.data(), count, ncclFloat, prev, comm, test::streamOf(rank)));
      EXPECT_OK(ncclGroupEnd());
    }
    test::sync(comm);
    for (size_t i = 0; i < count; ++i) {
      float want = 0;
      if (op % 2 == 0) {
        for (int r = 0; r < n; ++r) want += static_cast<float>((r * 3 + op + i) % 11);
      } else {
        want = static_cast<float>((prev * 3 + op + i) % 11);
      }
      const float have = op % 2 == 0 ? out[i] : got[i];
      if (have != want) {
        expect(false, "op " + std::to_string(op) + " element " + std::to_string(i) + ": " + std::to_string(have) +
                          ", expected " + std::to_string(want));
        return;
      }
    }
  }
  const std::string wrong = checkEnds(comm, threads, onDevice);
  expect(wrong.empty(), "rank " + std::to_string(rank) + ":\n" + wrong);
}

}  // namespace

TEST_CASE("credit line: head is the sender's memory, and every counter is exact after 1000 operations",
          "[integration][collectives][credit]") {
  const int n = 3;
  CHECK(test::withCommunicators(n, [n](int rank, ncclComm_t comm, bool threads) { runAndCheck(rank, n, comm, threads, false); }) == "");
}

TEST_CASE("emulated GPU: head is the sender's device memory; counters exact after 1000 operations",
          "[integration][emulated][credit]") {
  test::Emulated emulated;
  const int n = 3;
  CHECK(test::withCommunicators(n, [n](int rank, ncclComm_t comm, bool threads) { runAndCheck(rank, n, comm, threads, true); }) == "");
}

TEST_CASE("emulated GPU: ring senders that end before their receivers map the senders' exported lines, 20 times",
          "[integration][emulated][credit]") {
  // As the host case in collective_test.cc: a Reduce of 7 floats on one Simple channel, whose
  // senders may destroy their communicator (and free the credit line they exported) while the
  // next rank is still taking hold of it.
  test::Emulated emulated;
  const int n = 4;
  for (int round = 0; round < 20; ++round) {
    INFO("round " << round);
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    REQUIRE(test::runProcesses(n, [n, id](int rank) {
              ncclComm_t comm = nullptr;
              EXPECT_OK(ncclCommInitRank(&comm, n, id, rank));
              plan::PlanLimits& limits = comm->dataPath().limits();
              for (auto& p : limits.mask.protos) p = 1u << 2;  // (Simple)
              limits.minChannels = limits.maxChannels = 1;
              std::vector<float> in(7, static_cast<float>(rank + 1)), out(7, 0.0f);
              EXPECT_OK(ncclReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, 0, comm, test::streamOf(rank)));
              test::sync(comm);
              if (rank == 0) expect(out[6] == 10.0f, "the Reduce's result at the root: " + std::to_string(out[6]));
              EXPECT_OK(ncclCommDestroy(comm));
            }, std::chrono::seconds(60)) == "");
  }
}
