// Who waits before a step's data move (kernels/primitives.h, waitCredits): thread 0 for the
// received step, another thread (the send waiter) for a free slot, both at once, each noting
// its wait in the channel's status; a group of one thread does both in turn. And the credits
// a sender saw last stay with the connection (kCreditsSeenWord), so that the next operation
// does not read the receiver's head while they last.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "kernels/primitives.h"
#include "runtime/host/host_group.h"

using namespace braid::kernels;
using braid::runtime::host::SpinBarrier;

namespace {

/// A group of `size` threads, one lane a line (the host's).
class Group {
 public:
  static constexpr int kLineLanes = 1;
  Group(int rank, int size, SpinBarrier* all) : rank_(rank), size_(size), all_(all) {}
  int rank() const { return rank_; }
  int size() const { return size_; }
  void sync() { all_->wait(); }
  bool syncAny(bool flag) { return all_->wait(flag); }
  void lineSync() {}
  bool lineAny(bool flag) { return flag; }

 private:
  int rank_, size_;
  SpinBarrier* all_;
};

constexpr uint32_t kStepBytes = 64;

/// One connection's words and Simple slots in this process (a GPU peer's, as the kernels see
/// it: no step sizes read).
struct Connection {
  uint64_t tail = 0, head = 0;
  uint64_t sendLine[8] = {}, recvLine[8] = {};  // (each end's step line)
  SigSlot sigs[kSteps] = {};
  uint64_t sizes[kSteps] = {};
  OpSignature announce{};
  uint64_t offer[16] = {};
  float slots[kSteps * kStepBytes / sizeof(float)] = {};
  ConnHandle end(uint64_t* line) {
    ConnHandle h{};
    h.simple = reinterpret_cast<char*>(slots);
    h.simpleStepBytes = h.simpleStride = kStepBytes;
    h.tail = &tail;
    h.head = &head;
    h.step = line;
    h.sigs = sigs;
    h.sizes = sizes;
    h.announce = &announce;
    h.offer = offer;
    h.transport = 1;  // (p2p)
    return h;
  }
};

uint32_t load(const uint32_t& w) { return loadAcquire(const_cast<uint32_t*>(&w)); }

bool eventually(const std::function<bool()>& what) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!what()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

/// Runs one step with `flags` over `n` floats in a group of `threads`, each thread's result in ok.
std::vector<std::thread> runStep(int threads, SpinBarrier* all, const ConnHandle* send, const ConnHandle* recv,
                                 const CollWork* work, const uint32_t* abortFlag, uint32_t flags, const float* in,
                                 float* out, uint64_t n, std::vector<int>* ok) {
  ok->assign(threads, -1);
  std::vector<std::thread> running;
  for (int t = 0; t < threads; ++t) {
    running.emplace_back([=] {
      Group g(t, threads, all);
      Primitives<float, FuncSum<float>, Group> p(g, send, recv, Proto::kSimple, FuncSum<float>(RedOpArgs{}), abortFlag,
                                                 work);
      const bool done = p.step(flags, in, out, n);
      p.finish();
      (*ok)[t] = done ? 1 : 0;
    });
  }
  return running;
}

}  // namespace

TEST_CASE("Simple step: thread 0 waits for data while the send waiter waits for credits; one thread waits for both in turn",
          "[unit][kernels]") {
  for (int threads : {1, 2, 4, 40}) {
    INFO(threads << " threads");
    Connection from, to;  // (this rank receives on `from`, sends on `to`)
    to.sendLine[0] = kSteps;  // every slot of `to` used, none freed yet
    const ConnHandle recv = from.end(from.recvLine), send = to.end(to.sendLine);
    ChannelStatus status{};
    CollWork work{};
    work.status = &status;
    const uint32_t abortFlag = 0;
    std::vector<float> mine(16, 1.0f), out(16, 0.0f);
    for (int i = 0; i < 16; ++i) from.slots[i] = static_cast<float>(i);
    SpinBarrier all(threads);
    std::vector<int> ok;
    std::vector<std::thread> running =
        runStep(threads, &all, &send, &recv, &work, &abortFlag, kRecv | kInput | kOutput | kSend, mine.data(),
                out.data(), 16, &ok);
    CHECK(eventually([&] { return load(status.waitKind) == kWaitData; }));
    if (threads > 1) {  // both waits at once
      CHECK(eventually([&] { return load(status.creditWait.kind) == kWaitCredits; }));
      CHECK(load(status.waitKind) == kWaitData);
      CHECK(status.creditWait.peer == send.peer);
      CHECK(status.creditWait.step == kSteps);
    } else {  // the credits only once the data is there
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      CHECK(load(status.creditWait.kind) == kWaitNone);
    }
    storeRelease(&from.tail, uint64_t{1});
    CHECK(eventually([&] { return load(status.waitKind) == kWaitNone; }));
    CHECK(eventually([&] { return load(status.creditWait.kind) == kWaitCredits; }));
    storeRelease(&to.head, uint64_t{1});
    for (auto& t : running) t.join();
    CHECK(ok == std::vector<int>(threads, 1));
    CHECK(load(status.creditWait.kind) == kWaitNone);
    for (int i = 0; i < 16; ++i) {
      CHECK(out[i] == static_cast<float>(i) + 1.0f);
      CHECK(to.slots[i] == static_cast<float>(i) + 1.0f);  // (slot 8 % kSteps = 0)
    }
    CHECK(to.tail == kSteps + 1);
    CHECK(from.head == 1);
    CHECK(to.sendLine[0] == kSteps + 1);
    CHECK(from.recvLine[0] == 1);
    CHECK(to.sendLine[kCreditsSeenWord] == 1);  // (head as the send waiter read it)
  }
}

TEST_CASE("Simple step: an operation's sender keeps the credits it saw last and does not read head while they last",
          "[unit][kernels]") {
  for (int threads : {1, 3, 64}) {
    INFO(threads << " threads");
    Connection to;
    to.sendLine[0] = 10;
    to.sendLine[kCreditsSeenWord] = 5;  // slots up to step 12 free as last seen
    to.head = 0;  // (never so low really: read, it would hold the step)
    const ConnHandle send = to.end(to.sendLine);
    ChannelStatus status{};
    CollWork work{};
    work.status = &status;
    uint32_t abortFlag = 0;
    std::vector<float> mine(16, 2.0f);
    SpinBarrier all(threads);
    std::vector<int> ok;
    std::vector<std::thread> running = runStep(threads, &all, &send, nullptr, &work, &abortFlag, kPartial | kSend,
                                               mine.data(), nullptr, 16, &ok);
    // (bounded: a step that waits after all is aborted, and fails below)
    if (!eventually([&] { return loadAcquire(&to.tail) == 11; })) storeRelease(&abortFlag, 1u);
    for (auto& t : running) t.join();
    CHECK(ok == std::vector<int>(threads, 1));
    CHECK(to.sendLine[0] == 11);
    CHECK(to.sendLine[kCreditsSeenWord] == 5);
    CHECK(load(status.creditWait.kind) == kWaitNone);
  }
}

TEST_CASE("Simple step: both waiters leave on abort, and the whole group stops", "[unit][kernels]") {
  for (int threads : {1, 2, 40}) {
    INFO(threads << " threads");
    Connection from, to;
    to.sendLine[0] = kSteps;
    const ConnHandle recv = from.end(from.recvLine), send = to.end(to.sendLine);
    ChannelStatus status{};
    CollWork work{};
    work.status = &status;
    uint32_t abortFlag = 0;
    std::vector<float> mine(16, 1.0f), out(16, 0.0f);
    SpinBarrier all(threads);
    std::vector<int> ok;
    std::vector<std::thread> running = runStep(threads, &all, &send, &recv, &work, &abortFlag,
                                               kRecv | kInput | kOutput | kSend, mine.data(), out.data(), 16, &ok);
    CHECK(eventually([&] { return load(status.waitKind) == kWaitData; }));
    if (threads > 1) CHECK(eventually([&] { return load(status.creditWait.kind) == kWaitCredits; }));
    storeRelease(&abortFlag, 1u);
    for (auto& t : running) t.join();
    CHECK(ok == std::vector<int>(threads, 0));
    CHECK(to.tail == 0);
    CHECK(from.head == 0);
  }
}
