// LL128 steps moved by several threads a line (kernels/primitives.h, stepLL128), as the GPU
// moves them with 8 lanes of a warp: here real CPU threads in groups of 8 or 16 (2 or 4
// lanes a line), whose line barrier and vote are spin barriers of the line's threads. A
// sending group and a receiving group run at once over one connection in host memory, for
// many steps (more than the FIFO's 8 slots), every element type size and sizes around the
// line and lane boundaries; the receiver's output must be the sender's input, or their sum.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "kernels/primitives.h"
#include "runtime/host/host_group.h"

using namespace braid::kernels;
using braid::runtime::host::SpinBarrier;

namespace {

/// A group of `size` threads whose lines are moved by L consecutive threads each.
template <int L>
class LanedGroup {
 public:
  static constexpr int kLineLanes = L;
  LanedGroup(int rank, int size, SpinBarrier* all, SpinBarrier* line)
      : rank_(rank), size_(size), all_(all), line_(line) {}
  int rank() const { return rank_; }
  int size() const { return size_; }
  void sync() { all_->wait(); }
  bool syncAny(bool flag) { return all_->wait(flag); }
  void lineSync() { line_->wait(); }
  bool lineAny(bool flag) { return line_->wait(flag); }

 private:
  int rank_, size_;
  SpinBarrier* all_;
  SpinBarrier* line_;
};

/// One connection's memory in this process: LL128 slots of `lines` lines a step and the words
/// around them; send() and recv() are its two ends.
struct Connection {
  explicit Connection(uint32_t lines) : lines(lines) {
    slots = static_cast<LL128Line*>(std::aligned_alloc(128, sizeof(LL128Line) * kSteps * lines));
    std::memset(slots, 0, sizeof(LL128Line) * kSteps * lines);
  }
  ~Connection() { std::free(slots); }
  ConnHandle end(uint64_t* step) {
    ConnHandle h{};
    h.ll128 = slots;
    h.ll128StepLines = lines;
    h.tail = &tail;
    h.head = &head;
    h.step = step;
    h.sigs = sigs;
    h.sizes = sizes;
    h.announce = &announce;
    h.offer = offer;
    return h;
  }
  uint32_t lines;
  LL128Line* slots;
  uint64_t tail = 0, head = 0;
  uint64_t sendStep[8] = {}, recvStep[8] = {};  // (each end's step line: the sender's keeps its credits seen)
  SigSlot sigs[kSteps] = {};
  uint64_t sizes[kSteps] = {};
  OpSignature announce{};
  uint64_t offer[16] = {};
};

/// Runs `threads` threads of a LanedGroup<L>, thread t calling body(group).
template <int L, typename Body>
std::vector<std::thread> runGroup(int threads, Body body, std::vector<std::unique_ptr<SpinBarrier>>& barriers) {
  barriers.push_back(std::make_unique<SpinBarrier>(threads));
  SpinBarrier* all = barriers.back().get();
  std::vector<SpinBarrier*> lines;
  for (int k = 0; k < threads / L; ++k) {
    barriers.push_back(std::make_unique<SpinBarrier>(L));
    lines.push_back(barriers.back().get());
  }
  std::vector<std::thread> running;
  for (int t = 0; t < threads; ++t) {
    running.emplace_back([=] {
      LanedGroup<L> g(t, threads, all, lines[t / L]);
      body(g);
    });
  }
  return running;
}

/// Sends n elements of T (values from `seed`) through `steps`-long slices of one connection
/// from a group of `threads` threads to another; the receiver adds its own input when `sum`.
/// Returns the number of wrong output elements.
template <typename T, int L>
long roundTrip(uint64_t n, int threads, bool sum, uint32_t linesPerStep) {
  Connection c(linesPerStep);
  std::vector<T> in(n), mine(n), out(n, T{});
  for (uint64_t i = 0; i < n; ++i) {
    in[i] = static_cast<T>((i * 7 + 3) % 23);
    mine[i] = static_cast<T>((i * 5 + 1) % 19);
  }
  const uint32_t zero = 0;
  const FuncSum<T> red(RedOpArgs{});
  const ConnHandle send = c.end(c.sendStep), recv = c.end(c.recvStep);
  std::vector<std::unique_ptr<SpinBarrier>> barriers;
  auto run = [&](bool sender) {
    return [&, sender](LanedGroup<L>& g) {
      Primitives<T, FuncSum<T>, LanedGroup<L>> p(g, sender ? &send : nullptr, sender ? nullptr : &recv, Proto::kLL128,
                                                  red, &zero);
      const uint64_t slice = p.sliceElements();
      for (uint64_t at = 0; at == 0 || at < n; at += slice) {
        const uint64_t k = n - at < slice ? n - at : slice;
        if (sender) {
          p.step(kInput | kSend, in.data() + at, nullptr, k);
        } else {
          p.step(kRecv | kOutput | (sum ? kInput : 0u), mine.data() + at, out.data() + at, k);
        }
      }
      p.finish();
    };
  };
  std::vector<std::thread> senders = runGroup<L>(threads, run(true), barriers);
  std::vector<std::thread> receivers = runGroup<L>(threads, run(false), barriers);
  for (auto& t : senders) t.join();
  for (auto& t : receivers) t.join();
  long wrong = 0;
  for (uint64_t i = 0; i < n; ++i) wrong += out[i] != static_cast<T>(sum ? in[i] + mine[i] : in[i]);
  return wrong;
}

template <typename T, int L>
void sweep(int threads) {
  constexpr uint64_t kPerLine = kLL128DataWords * 8 / sizeof(T);
  constexpr uint64_t kPerLane = 16 / L * 8 / sizeof(T);
  for (uint64_t n : {uint64_t{1}, kPerLane - 1, kPerLane + 1, kPerLine - 1, kPerLine, kPerLine + 1, 3 * kPerLine + 5,
                     41 * kPerLine + 3}) {
    if (n == 0) continue;
    for (bool sum : {false, true}) {
      INFO(sizeof(T) << "-byte elements, " << L << " lanes a line, " << threads << " threads, " << n
                     << " elements, " << (sum ? "summed" : "copied"));
      CHECK(roundTrip<T, L>(n, threads, sum, 4) == 0);  // (4 lines a step: many steps, the FIFO wraps)
    }
  }
}

}  // namespace

TEST_CASE("LL128 with several threads a line: every lane's words, the last lane's flag, exact", "[unit][kernels]") {
  sweep<float, 8>(8);
  sweep<float, 8>(16);
  sweep<double, 8>(16);
  sweep<uint8_t, 8>(8);
  sweep<float, 4>(8);
  sweep<int64_t, 2>(4);
  sweep<int32_t, 1>(2);  // (the host's own: a thread a line)
}
