#include "transport/fifo.h"

namespace braid::transport {

namespace {
constexpr uint64_t kCounterBytes = 128;  // tail and head, one 64-byte line each
}

uint64_t FifoSizes::bytes() const {
  return kCounterBytes + uint64_t(kernels::kSteps) * simpleStepBytes +
         uint64_t(kernels::kSteps) * llStepLines * sizeof(kernels::LLLine);
}

kernels::ConnHandle FifoMemory::handle(uint64_t* step) const {
  kernels::ConnHandle h{};
  char* b = base();
  h.tail = reinterpret_cast<uint64_t*>(b);
  h.head = reinterpret_cast<uint64_t*>(b + 64);
  h.simple = b + kCounterBytes;
  h.ll = reinterpret_cast<kernels::LLLine*>(h.simple + uint64_t(kernels::kSteps) * sizes_.simpleStepBytes);
  h.step = step;
  h.simpleStepBytes = sizes_.simpleStepBytes;
  h.llStepLines = sizes_.llStepLines;
  return h;
}

}  // namespace braid::transport
