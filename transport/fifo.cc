#include "transport/fifo.h"

#include <atomic>

#include "core/status.h"

namespace braid::transport {

namespace {
// tail and head (one 64-byte line each), the signature slots, the announcement line, the two
// fault boxes, the step sizes, the sender's step counter and the receiver's (a line each: each
// is written by one end only, so neither line moves between the two ends' caches), then the
// keys the receiver offers. Beside the sender's counter: the import state (shm) and the
// receiver's head as the sender last read it (kernels::kCreditsSeenWord); beside the
// receiver's: its offer. Where the slots are in a GPU's memory, tail, head, the step counters
// and the signature slots may be there instead (fifo.h: kDeviceCounterBytes); their places
// here then go unused.
constexpr uint64_t kSigOffset = 128;
constexpr uint64_t kAnnounceOffset = kSigOffset + kernels::kSteps * sizeof(kernels::SigSlot);
constexpr uint64_t kFaultOffset = kAnnounceOffset + 64;
constexpr uint64_t kSizesOffset = kFaultOffset + 2 * sizeof(FaultBox);
constexpr uint64_t kStepsOffset = kSizesOffset + kernels::kSteps * sizeof(uint64_t);
constexpr uint64_t kOfferOffset = kStepsOffset + 64 + sizeof(uint64_t);  // (beside the receiver's step counter)
static_assert(kernels::kCreditsSeenWord * sizeof(uint64_t) > sizeof(uint64_t) + sizeof(uint32_t) &&
                  kernels::kCreditsSeenWord * sizeof(uint64_t) < 64,
              "the credits seen are on the sender's step line, past the import state");
constexpr uint64_t kKeysOffset = kStepsOffset + 192;  // (the receiver's line and its offer: 128 bytes)
constexpr uint64_t kCreditStateOffset = kStepsOffset + 176;  // (past the offer's 9 words, on the receiver's lines)
static_assert(kCreditStateOffset >= kOfferOffset + 9 * sizeof(uint64_t) && kCreditStateOffset + 4 <= kKeysOffset);
constexpr uint64_t kCounterBytes = kKeysOffset + sizeof(OfferedKeys);
static_assert(kCounterBytes % 64 == 0);
}

uint64_t FifoSizes::bytes() const {
  return kCounterBytes + uint64_t(kernels::kSteps) * simpleStepBytes +
         uint64_t(kernels::kSteps) * llStepLines * sizeof(kernels::LLLine) +
         uint64_t(kernels::kSteps) * ll128StepLines * sizeof(kernels::LL128Line);
}

uint64_t fifoControlBytes() { return kCounterBytes; }

uint64_t deviceDataBytes(const FifoSizes& sizes) { return kDeviceCounterBytes + sizes.bytes() - kCounterBytes; }

// In device memory (kDeviceCounterBytes): tail, head, the sender's and the receiver's step
// counters a line each (the sender's with its credits seen), then the signature slots.
constexpr uint64_t kDeviceStepsOffset = 128;
constexpr uint64_t kDeviceSigOffset = 256;
static_assert(kDeviceSigOffset + kernels::kSteps * sizeof(kernels::SigSlot) == kDeviceCounterBytes);

uint64_t* FifoMemory::stepWord(bool isSender) const {
  char* line = countersOnDevice() ? reinterpret_cast<char*>(counters()) + kDeviceStepsOffset : base() + kStepsOffset;
  return reinterpret_cast<uint64_t*>(line + (isSender ? 0 : 64));
}

kernels::ConnHandle FifoMemory::handle(bool isSender) const {
  kernels::ConnHandle h{};
  char* b = base();
  h.tail = counters();
  h.head = creditWord();
  h.simple = data();
  h.ll = reinterpret_cast<kernels::LLLine*>(lineSlots());
  h.ll128 = reinterpret_cast<kernels::LL128Line*>(h.ll + uint64_t(kernels::kSteps) * sizes_.llStepLines);
  h.step = stepWord(isSender);
  h.sigs = reinterpret_cast<kernels::SigSlot*>(countersOnDevice() ? reinterpret_cast<char*>(counters()) + kDeviceSigOffset
                                                                    : b + kSigOffset);
  h.announce = reinterpret_cast<kernels::OpSignature*>(b + kAnnounceOffset);
  h.sizes = reinterpret_cast<uint64_t*>(b + kSizesOffset);
  h.offer = reinterpret_cast<uint64_t*>(b + kOfferOffset);  // (offeredKeysOf finds the control part from it)
  h.slotsShared = slotsShared() ? 1 : 0;
  h.simpleStepBytes = sizes_.simpleStepBytes;
  h.simpleStride = simpleStride();
  h.llStepLines = sizes_.llStepLines;
  h.ll128StepLines = sizes_.ll128StepLines;
  return h;
}

}  // namespace braid::transport

namespace braid::transport {

uint32_t* FifoMemory::importStateWord() const {
  return reinterpret_cast<uint32_t*>(base() + kStepsOffset + sizeof(uint64_t));
}

uint32_t* FifoMemory::creditStateWord() const { return reinterpret_cast<uint32_t*>(base() + kCreditStateOffset); }

OfferedKeys* FifoMemory::offeredKeys() const { return reinterpret_cast<OfferedKeys*>(base() + kKeysOffset); }

OfferedKeys* offeredKeysOf(const kernels::ConnHandle& h) {
  return reinterpret_cast<OfferedKeys*>(reinterpret_cast<char*>(h.offer) - kOfferOffset + kKeysOffset);
}

FaultBox* FifoMemory::faultBox(bool bySender) const {
  return reinterpret_cast<FaultBox*>(base() + kFaultOffset + (bySender ? 0 : sizeof(FaultBox)));
}

}  // namespace braid::transport

namespace braid::transport {

void writeAnnouncement(kernels::OpSignature* line, const kernels::OpSignature& sig) {
  kernels::storeRelaxed(&line->seq, uint64_t{0});
  std::atomic_thread_fence(std::memory_order_release);  // readers see seq 0 before new words
  kernels::storeRelaxed(&line->words[0], sig.words[0]);
  kernels::storeRelaxed(&line->words[1], sig.words[1]);
  kernels::storeRelease(&line->seq, sig.seq);
}

bool readAnnouncement(const kernels::OpSignature* line, kernels::OpSignature* out) {
  auto* p = const_cast<kernels::OpSignature*>(line);
  const uint64_t seq = kernels::loadAcquire(&p->seq);
  if (seq == 0) return false;
  out->words[0] = kernels::loadRelaxed(&p->words[0]);
  out->words[1] = kernels::loadRelaxed(&p->words[1]);
  std::atomic_thread_fence(std::memory_order_acquire);  // the words were read before seq again
  if (kernels::loadRelaxed(&p->seq) != seq) return false;
  out->seq = seq;
  return true;
}

}  // namespace braid::transport

namespace braid::transport {

bool FifoAllocator::exportData(void*, uint8_t*) { return false; }

void* FifoAllocator::importData(const uint8_t*, uint64_t) {
  fail(ncclInternalError, "a peer's FIFO slots are in its GPU's memory, which this backend cannot map");
}

void FifoAllocator::closeData(void*) {}

int FifoAllocator::dmabufFd(void*, size_t, uint64_t*) { return -1; }

bool FifoAllocator::ordersRemoteWrites() { return false; }

bool FifoAllocator::nicReadsWell() { return false; }

FifoAllocator::DataUse FifoAllocator::dataUse(void*, uint64_t requested) { return DataUse{requested, false}; }

bool FifoAllocator::suspendData(void*, uint64_t) { return false; }

void FifoAllocator::resumeData(void* p) {
  fail(ncclInternalError, "FIFO memory at %p was never given back, so it cannot be given again", p);
}

bool FifoAllocator::suspendImport(void*) { return false; }

void FifoAllocator::resumeImport(void* p, const uint8_t*, uint64_t) {
  fail(ncclInternalError, "the mapping of a peer's FIFO memory at %p was never let go, so it cannot be mapped again",
       p);
}

FifoMemory::DeviceData FifoMemory::deviceData() const {
  if (!countersOnDevice()) return {};
  return DeviceData{reinterpret_cast<char*>(counters()), deviceDataBytes(sizes_)};
}

}  // namespace braid::transport
