// What the network transports' unit tests share: a connection's two ends with the test playing
// both kernels (filling the sender's slots and publishing steps, draining the receiver's),
// while the real proxy thread carries the steps.
#pragma once

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "kernels/primitives.h"
#include "transport/fifo.h"

namespace braid::test {

/// Waits up to 10 s for ready(); false when it never held.
template <typename Ready>
bool eventually(Ready ready) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!ready()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return true;
}

/// The two ends of one connection and the test's step counters on them.
struct StepPair {
  std::unique_ptr<transport::FifoMemory> recv, send;
  uint64_t recvStep = 0, sendStep = 0;
  kernels::ConnHandle r{}, s{};

  /// After recv and send are made.
  void bind() {
    r = recv->handle(false);
    s = send->handle(true);
  }
};

/// The sender's side of one Simple step of `bytes` bytes, filled with a pattern of the step.
inline bool sendSimple(StepPair& p, uint32_t bytes) {
  const uint64_t step = p.sendStep;
  if (!eventually([&] { return kernels::loadAcquire(p.s.head) + kernels::kSteps > step; })) return false;
  char* slot = kernels::simpleSlot(p.s, step);
  for (uint32_t i = 0; i < bytes; ++i) slot[i] = static_cast<char>(step * 31 + i);
  kernels::publishStep(p.s, step, kernels::stepInfo(bytes, false));
  ++p.sendStep;
  return true;
}

/// The receiver's side: waits for the step, checks every byte, frees the slot.
inline std::string recvSimple(StepPair& p, uint32_t bytes) {
  const uint64_t step = p.recvStep;
  if (!eventually([&] { return kernels::loadAcquire(p.r.tail) > step; })) return "step " + std::to_string(step) + " never came";
  const char* slot = kernels::simpleSlot(p.r, step);
  for (uint32_t i = 0; i < bytes; ++i) {
    if (slot[i] != static_cast<char>(step * 31 + i)) return "step " + std::to_string(step) + " byte " + std::to_string(i) + " wrong";
  }
  kernels::storeRelease(p.r.head, step + 1);
  ++p.recvStep;
  return "";
}

/// `steps` Simple steps cycling through `sizes`, the receiver draining in a thread while the
/// sender runs ahead by up to the FIFO's depth; "" or the first failure.
inline std::string roundTrip(StepPair& p, const std::vector<uint32_t>& sizes, int steps) {
  std::string failure;
  std::thread receiver([&] {
    for (int i = 0; i < steps && failure.empty(); ++i) failure = recvSimple(p, sizes[i % sizes.size()]);
  });
  bool sent = true;
  for (int i = 0; i < steps && sent; ++i) sent = sendSimple(p, sizes[i % sizes.size()]);
  receiver.join();
  return sent ? failure : "the sender never got a free slot";
}

/// 40 LL steps of various lengths with their signatures: each line lands with its flag, each
/// signature is seen; then a signature that differs is seen as a mismatch.
inline void checkLLWithSignatures(StepPair& p) {
  for (uint64_t step = 0; step < 40; ++step) {
    const uint64_t lines = step % 5 == 0 ? p.s.llStepLines : step * 3 + 1;
    const kernels::OpSignature sig{step + 100, {step * 7, ~step}};
    REQUIRE(eventually([&] { return kernels::loadAcquire(p.s.head) + kernels::kSteps > step; }));
    kernels::writeSignature(p.s, step, sig);
    kernels::LLLine* out = p.s.ll + (step % kernels::kSteps) * p.s.llStepLines;
    const uint32_t flag = static_cast<uint32_t>(step + 1);
    for (uint64_t l = 0; l < lines; ++l) out[l] = {static_cast<uint32_t>(l), flag, static_cast<uint32_t>(l * step), flag};
    kernels::publishStep(p.s, step, kernels::stepInfo(lines * sizeof(kernels::LLLine), true));
    p.sendStep = step + 1;

    kernels::ChannelStatus status{};
    const uint32_t noAbort = 0;
    REQUIRE(kernels::checkSignature(p.r, step, sig, &status, &noAbort) == kernels::WaitResult::kReady);
    kernels::LLLine* in = p.r.ll + (step % kernels::kSteps) * p.r.llStepLines;
    for (uint64_t l = 0; l < lines; ++l) {
      uint64_t* halves = reinterpret_cast<uint64_t*>(in + l);
      REQUIRE(eventually([&] { return static_cast<uint32_t>(kernels::loadAcquire(halves + 1) >> 32) == flag; }));
      REQUIRE(in[l].flag1 == flag);
      REQUIRE(in[l].data1 == static_cast<uint32_t>(l));
      REQUIRE(in[l].data2 == static_cast<uint32_t>(l * step));
    }
    kernels::storeRelease(p.r.head, step + 1);
  }
  kernels::writeSignature(p.s, 40, kernels::OpSignature{9, {1, 2}});
  kernels::publishStep(p.s, 40, kernels::stepInfo(0, true));
  kernels::ChannelStatus status{};
  const uint32_t noAbort = 0;
  CHECK(kernels::checkSignature(p.r, 40, kernels::OpSignature{9, {1, 3}}, &status, &noAbort) == kernels::WaitResult::kAborted);
  CHECK(status.mismatch == 1);
  CHECK(status.peerSig.words[1] == 2);
}

/// 30 LL128 steps of various lengths: each line's data words land before its flag (the last
/// word), which the receiver waits for with acquire.
inline void checkLL128(StepPair& p) {
  REQUIRE(p.s.ll128StepLines > 0);
  for (uint64_t step = 0; step < 30; ++step) {
    const uint64_t lines = step % 5 == 0 ? p.s.ll128StepLines : (step * 3 + 1) % p.s.ll128StepLines + 1;
    REQUIRE(eventually([&] { return kernels::loadAcquire(p.s.head) + kernels::kSteps > step; }));
    kernels::LL128Line* out = p.s.ll128 + (step % kernels::kSteps) * p.s.ll128StepLines;
    for (uint64_t l = 0; l < lines; ++l) {
      for (int w = 0; w < kernels::kLL128DataWords; ++w) out[l].words[w] = step * 1000003 + l * 16 + w;
      kernels::storeRelease(out[l].words + kernels::kLL128FlagWord, step + 1);
    }
    kernels::publishStep(p.s, step, (lines * sizeof(kernels::LL128Line)) | kernels::kStepLL128);
    p.sendStep = step + 1;
    kernels::LL128Line* in = p.r.ll128 + (step % kernels::kSteps) * p.r.ll128StepLines;
    for (uint64_t l = 0; l < lines; ++l) {
      REQUIRE(eventually([&] { return kernels::loadAcquire(in[l].words + kernels::kLL128FlagWord) == step + 1; }));
      for (int w = 0; w < kernels::kLL128DataWords; ++w) REQUIRE(in[l].words[w] == step * 1000003 + l * 16 + w);
    }
    kernels::storeRelease(p.r.head, step + 1);
  }
}

/// The sender's announcement reaches the receiver; each end's fault notice reaches the other.
inline void checkNotices(StepPair& p) {
  kernels::storeRelaxed(&p.s.announce->words[0], uint64_t{11});
  kernels::storeRelaxed(&p.s.announce->words[1], uint64_t{12});
  kernels::storeRelease(&p.s.announce->seq, uint64_t{5});
  CHECK(eventually([&] { return kernels::loadAcquire(&p.r.announce->seq) == 5; }));
  CHECK(p.r.announce->words[1] == 12);

  // The receiver's rank fails: its notice reaches the sender's end...
  transport::FaultBox* mine = p.recv->faultBox(false);
  mine->rank = 1;
  mine->code = ncclInvalidUsage;
  std::strcpy(mine->text, "receiver says no");
  kernels::storeRelease(&mine->raised, transport::kFaultRaised);
  transport::FaultBox* atSender = p.send->faultBox(false);
  CHECK(eventually([&] { return kernels::loadAcquire(&atSender->raised) == transport::kFaultRaised; }));
  CHECK(std::string(atSender->text) == "receiver says no");
  CHECK(atSender->rank == 1);
  // ... and the sender's the receiver's.
  transport::FaultBox* theirs = p.send->faultBox(true);
  theirs->rank = 0;
  std::strcpy(theirs->text, "sender too");
  kernels::storeRelease(&theirs->raised, transport::kFaultRaised);
  CHECK(eventually([&] { return kernels::loadAcquire(&p.recv->faultBox(true)->raised) == transport::kFaultRaised; }));
  CHECK(std::string(p.recv->faultBox(true)->text) == "sender too");
}

/// A sender that publishes a full FIFO and is destroyed at once: every step still arrives, and
/// its goodbye is no fault: only a notice that it left (kFaultLeft, a failure for a wait still
/// on it alone).
inline void checkGoodbyeAfterFullFifo(StepPair& p) {
  for (int i = 0; i < 8; ++i) REQUIRE(sendSimple(p, 1000 * i));
  transport::FaultBox* box = p.recv->faultBox(true);
  p.send.reset();
  for (int i = 0; i < 8; ++i) CHECK(recvSimple(p, 1000 * i) == "");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(kernels::loadAcquire(&box->raised) == transport::kFaultLeft);
}

}  // namespace braid::test
