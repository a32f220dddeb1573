// What a suspend gives back of one connection's FIFO memory (transport/suspend.h): the owner's
// slots, in whole pages, and nothing of the control part; never the sender's view of a peer's
// memory, nor a NIC's registered pages. Giving them back zeroes the slots for both ends (the
// same mapping between threads, the segment itself between processes) and keeps every counter.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include "transport/p2p/p2p_transport.h"
#include "transport/shm/shm_transport.h"
#include "transport/suspend.h"

using namespace braid;
using transport::Connector;

namespace {

const transport::FifoSizes kSizes{64 * 1024, 512, 64};

std::unique_ptr<Connector::End> endOf(std::unique_ptr<transport::FifoMemory> memory, transport::Kind kind,
                                      bool isSend) {
  auto end = std::make_unique<Connector::End>();
  end->memory = std::move(memory);
  end->kind = kind;
  end->isSend = isSend;
  return end;
}

/// Writes into every protocol's slots through the sender's handle and sets its tail; checks
/// that a release of the receiver's pages zeroes the slots (as both ends see them) and keeps tail.
void checkRelease(const Connector::End& receiver, const Connector::End& sender, bool shared) {
  const transport::SlotPages pages = transport::releasablePages(receiver);
  CHECK(pages.shared == shared);
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  char* const slots = receiver.memory->base() + transport::fifoControlBytes();
  const uint64_t slotBytes = kSizes.bytes() - transport::fifoControlBytes();
  CHECK(reinterpret_cast<uintptr_t>(pages.begin) % page == 0);
  CHECK(pages.bytes % page == 0);
  CHECK(pages.begin >= slots);
  CHECK(pages.begin + pages.bytes <= slots + slotBytes);
  CHECK(pages.bytes + 2 * page > slotBytes);  // (all but the partial pages at either end)
  CHECK(transport::releasablePages(sender).bytes == 0);  // (the peer's memory)

  const kernels::ConnHandle s = sender.memory->handle(true), r = receiver.memory->handle(false);
  const uint64_t llBytes = uint64_t(kernels::kSteps) * kSizes.llStepLines * sizeof(kernels::LLLine);
  std::memset(s.simple, 0x5a, uint64_t(kernels::kSteps) * kSizes.simpleStepBytes);
  std::memset(s.ll, 0x5a, llBytes);
  std::memset(s.ll128, 0x5a, uint64_t(kernels::kSteps) * kSizes.ll128StepLines * sizeof(kernels::LL128Line));
  *s.tail = 77;
  *s.step = 5;
  REQUIRE(transport::releasePages(pages));
  CHECK(*r.tail == 77);
  CHECK(*s.step == 5);
  for (const char* p : {pages.begin, pages.begin + pages.bytes / 2, pages.begin + pages.bytes - 1}) CHECK(*p == 0);
  const char* mid = r.simple + (pages.begin - slots) + 123;  // (the receiver's address of a released byte)
  CHECK(*mid == 0);
  const char* viaSender = s.simple + (pages.begin - slots) + pages.bytes / 2;
  CHECK(*viaSender == 0);
  std::memset(s.simple + page, 1, 16);  // the mapping is still there: the next operation writes again
  CHECK(r.simple[page] == 1);
}

}  // namespace

TEST_CASE("suspend: a thread pair's receiver gives back its slots' private pages", "[suspend]") {
  transport::Descriptor d;
  auto receiver = endOf(transport::p2p::create(kSizes, nullptr, &d), transport::Kind::kP2p, false);
  auto sender = endOf(transport::p2p::import(d), transport::Kind::kP2p, true);
  checkRelease(*receiver, *sender, /*shared=*/false);
}

TEST_CASE("suspend: a process pair's receiver punches the hole in its segment, for the sender too", "[suspend]") {
  transport::Descriptor d;
  auto receiver = endOf(transport::shm::create(kSizes, nullptr, false, &d), transport::Kind::kShm, false);
  auto sender = endOf(transport::shm::import(d, nullptr), transport::Kind::kShm, true);
  transport::shm::unlinkName(d);
  checkRelease(*receiver, *sender, /*shared=*/true);
}

TEST_CASE("suspend: verbs and net plugin ends keep their pages (a NIC registered them)", "[suspend]") {
  for (transport::Kind kind : {transport::Kind::kIb, transport::Kind::kPlugin}) {
    transport::Descriptor d;
    auto end = endOf(transport::p2p::create(kSizes, nullptr, &d), kind, false);
    CHECK(transport::releasablePages(*end).bytes == 0);
  }
}

namespace {

transport::ResumeHandle entry(int link, uint32_t replaced) {
  transport::ResumeHandle h{};
  h.link = link;
  h.replaced = replaced;
  return h;
}

}  // namespace

TEST_CASE("resume: a peer's new slot handles are taken only for this rank's FIFOs from it, each once, where it let "
          "go", "[suspend]") {
  const std::vector<int> links{0, 1, Connector::kRingLinks + 2};  // ring channels 0 and 1, send/recv set 2
  const std::set<int> letGo{0, Connector::kRingLinks + 2};
  using transport::checkResumeHandles;
  CHECK(checkResumeHandles({entry(0, 1), entry(1, 0), entry(Connector::kRingLinks + 2, 1)}, links, letGo) == "");
  CHECK(checkResumeHandles({entry(Connector::kRingLinks + 2, 1), entry(0, 1), entry(1, 0)}, links, letGo) == "");
  // Each refusal says what is wrong.
  CHECK(checkResumeHandles({entry(0, 1), entry(1, 0)}, links, letGo) == "2 entries for this rank's 3 FIFOs from it");
  CHECK(checkResumeHandles({entry(0, 1), entry(0, 1), entry(Connector::kRingLinks + 2, 1)}, links, letGo) ==
        "link 0 comes twice");
  CHECK(checkResumeHandles({entry(0, 1), entry(7, 0), entry(Connector::kRingLinks + 2, 1)}, links, letGo) ==
        "link 7 is no FIFO of this rank's from it");
  CHECK(checkResumeHandles({entry(0, 1), entry(-1, 0), entry(Connector::kRingLinks + 2, 1)}, links, letGo) ==
        "link -1 is no FIFO of this rank's from it");
  CHECK(checkResumeHandles({entry(0, 2), entry(1, 0), entry(Connector::kRingLinks + 2, 1)}, links, letGo) ==
        "link 0's replaced flag is 2");
  CHECK(checkResumeHandles({entry(0, 1), entry(1, 1), entry(Connector::kRingLinks + 2, 1)}, links, letGo) ==
        "link 1 has new memory, but this rank kept its mapping");
  CHECK(checkResumeHandles({entry(0, 0), entry(1, 0), entry(Connector::kRingLinks + 2, 1)}, links, letGo) ==
        "link 0 kept its memory, but this rank let go of its mapping");
  CHECK(checkResumeHandles({}, {}, {}) == "");
  // A sender's credit line (shm), named as such.
  const int credit = transport::kCreditLinkBase + 3;
  CHECK(checkResumeHandles({entry(credit, 1)}, {credit}, {credit}) == "");
  CHECK(checkResumeHandles({entry(credit, 1)}, {credit}, {}) ==
        "link 3's credit line has new memory, but this rank kept its mapping");
  CHECK(checkResumeHandles({entry(credit, 0)}, {3}, {}) == "link 3's credit line is no FIFO of this rank's from it");
}
