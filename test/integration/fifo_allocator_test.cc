// The backends' FIFO memory (transport::FifoAllocator): what the CUDA backend passes so that its
// kernels reach every FIFO, played here by an allocator of host memory that keeps the slots
// apart from the control part and counts every call. Ranks as threads take their FIFOs from it
// (the slots, with the words only kernels touch in front of them, apart from the control part,
// as device memory would be; each sender's credit line is data memory of its own); ranks as
// processes and over sockets register
// their shared or staged memory with it; everything is given back when the ranks are destroyed.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "harness/ranks.h"
#include "datapath/data_path.h"
#include "test_env.h"
#include "transport/fifo.h"

using namespace braid;
using braid::test::expect;

namespace {

class CountingAllocator final : public transport::FifoAllocator {
 public:
  void* allocateControl(size_t bytes) override { return take(bytes, &controls); }
  void freeControl(void* p) override { give(p, &controls); }
  void* allocateData(size_t bytes, bool) override { return take(bytes, &datas); }
  void freeData(void* p) override { give(p, &datas); }
  void registerHost(void* p, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    expect(bytes > 0 && registered_.insert(p).second, "registerHost twice or of 0 bytes");
    ++registrations;
  }
  void unregisterHost(void* p) override {
    std::lock_guard<std::mutex> lock(mutex_);
    expect(registered_.erase(p) == 1, "unregisterHost of memory never registered");
  }
  /// Allocations and registrations still outstanding.
  size_t live() {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_.size() + registered_.size();
  }
  std::atomic<int> controls{0}, datas{0}, registrations{0};

 private:
  void* take(size_t bytes, std::atomic<int>* count) {
    void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    std::memset(p, 0, bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    live_.insert(p);
    ++*count;
    return p;
  }
  void give(void* p, std::atomic<int>*) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      expect(live_.erase(p) == 1, "a FIFO freed memory the allocator never gave");
    }
    std::free(p);
  }
  std::mutex mutex_;
  std::set<void*> live_, registered_;
};

/// 3 ranks with the allocator: AllReduce (ring, LL and Simple sizes), AlltoAll and a send/recv
/// ring, checked exactly; `networkOnly`: every connection over sockets.
void collectivesWith(CountingAllocator& allocator, const ncclUniqueId& id, int rank, bool networkOnly) {
  const int n = 3;
  ncclComm_t comm = nullptr;
  EXPECT_OK(ncclCommInitRank(&comm, n, id, rank));
  transport::ConnectorOptions& options = comm->dataPath().connectorOptions();
  options.allocator = &allocator;
  options.networkOnly = networkOnly;
  for (size_t count : {size_t(1000), size_t(1) << 20}) {
    std::vector<float> x(count, static_cast<float>(rank + 1));
    EXPECT_OK(ncclAllReduce(x.data(), x.data(), count, ncclFloat, ncclSum, comm, nullptr));
    expect(x[0] == 6.0f && x[count - 1] == 6.0f, "AllReduce of " + std::to_string(count) + " gave " + std::to_string(x[0]));
  }
  std::vector<int32_t> in(3 * 500), out(3 * 500, -1);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int32_t>(rank * 10000 + i);
  EXPECT_OK(ncclAlltoAll(in.data(), out.data(), 500, ncclInt32, comm, nullptr));
  for (int p = 0; p < n; ++p)
    expect(out[p * 500 + 7] == p * 10000 + rank * 500 + 7, "AlltoAll from rank " + std::to_string(p));
  std::vector<int32_t> got(70000, -1), mine(70000, rank);
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclSend(mine.data(), mine.size(), ncclInt32, (rank + 1) % n, comm, nullptr));
  EXPECT_OK(ncclRecv(got.data(), got.size(), ncclInt32, (rank + n - 1) % n, comm, nullptr));
  EXPECT_OK(ncclGroupEnd());
  expect(got[69999] == (rank + n - 1) % n, "send/recv ring");
  EXPECT_OK(ncclCommDestroy(comm));
}

}  // namespace

TEST_CASE("FIFO allocator: threads take slots apart from the control part; all given back", "[integration][allocator]") {
  static CountingAllocator allocator;  // outlives every FIFO made from it
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  const std::string failures = test::runThreads(3, [&](int rank) { collectivesWith(allocator, id, rank, false); });
  CHECK(failures == "");
  CHECK(allocator.controls.load() > 0);
  // Every in-process FIFO's slots (and counters) apart, and its sender's credit line (head) in
  // the sender's own data memory.
  CHECK(allocator.datas.load() == 2 * allocator.controls.load());
  CHECK(allocator.registrations.load() == 0);                  // nothing else to register
  CHECK(allocator.live() == 0);
}

TEST_CASE("FIFO allocator: shared and network memory registered and unregistered", "[integration][allocator]") {
  static CountingAllocator sockets;
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  CHECK(test::runThreads(3, [&](int rank) { collectivesWith(sockets, id, rank, true); }) == "");
  CHECK(sockets.controls.load() == 0);
  CHECK(sockets.registrations.load() > 0);
  CHECK(sockets.live() == 0);
  // Processes: shared memory; each child checks its own allocator.
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  CHECK(test::runProcesses(3, [&](int rank) {
          static CountingAllocator shm;
          collectivesWith(shm, id, rank, false);
          expect(shm.controls.load() == 0 && shm.registrations.load() > 0,
                 "rank " + std::to_string(rank) + ": " + std::to_string(shm.registrations.load()) + " registrations");
          expect(shm.live() == 0, "memory left registered");
        }) == "");
}
