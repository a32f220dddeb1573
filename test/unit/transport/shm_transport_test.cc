// The shared-memory transport with a backend that keeps the slots in its own memory (the CUDA
// backend's case: the receiver's GPU memory, mapped by the sender through an IPC handle). A
// test allocator plays the GPU: its "device" memory is a shared-memory file of its own, its
// export handle the file's name, so the sender's mapping is a second address of the same
// memory, as CUDA IPC's is. Checked: the slots are apart from the segment and shared by the two
// ends; the receiver frees them only once the sender has unmapped them, in either order of
// destruction; an allocator that cannot share keeps the slots in the segment.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <string>

#include "core/status.h"
#include "transport/shm/shm_transport.h"

using namespace braid;

namespace {

class SharedFileAllocator final : public transport::FifoAllocator {
 public:
  explicit SharedFileAllocator(bool canShare) : canShare_(canShare) {}
  void* allocateControl(size_t) override { FAIL("not used by the shm transport"); return nullptr; }
  void freeControl(void*) override {}
  void* allocateData(size_t bytes, bool shareable) override {
    CHECK(shareable);
    const std::string name = "/braid-test-data-" + std::to_string(getpid()) + "-" + std::to_string(next_++);
    const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(ftruncate(fd, static_cast<off_t>(bytes)) == 0);
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    REQUIRE(p != MAP_FAILED);
    allocated_[p] = {name, bytes};
    return p;
  }
  void freeData(void* p) override {
    auto it = allocated_.find(p);
    REQUIRE(it != allocated_.end());
    if (opened_ > 0) ++freedWhileOpen;  // what CUDA leaves undefined
    munmap(p, it->second.bytes);
    shm_unlink(it->second.name.c_str());
    allocated_.erase(it);
    ++freed;
  }
  void registerHost(void*, size_t bytes) override { registeredBytes = bytes; }
  void unregisterHost(void*) override {}
  bool exportData(void* p, uint8_t* handle) override {
    if (!canShare_) return false;
    const Allocation& a = allocated_.at(p);
    std::memset(handle, 0, kHandleBytes);
    std::snprintf(reinterpret_cast<char*>(handle), kHandleBytes, "%s %zu", a.name.c_str(), a.bytes);
    return true;
  }
  void* importData(const uint8_t* handle, uint64_t need) override {
    char name[64];
    size_t bytes = 0;
    REQUIRE(std::sscanf(reinterpret_cast<const char*>(handle), "%63s %zu", name, &bytes) == 2);
    REQUIRE(bytes >= need);
    const int fd = shm_open(name, O_RDWR, 0600);
    if (fd < 0) fail(ncclUnhandledCudaError, "cannot open %s", name);
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    REQUIRE(p != MAP_FAILED);
    imported_[p] = bytes;
    ++opened_;
    return p;
  }
  void closeData(void* p) override {
    munmap(p, imported_.at(p));
    imported_.erase(p);
    --opened_;
  }
  int freed = 0;
  int freedWhileOpen = 0;
  size_t registeredBytes = 0;

 private:
  struct Allocation {
    std::string name;
    size_t bytes;
  };
  bool canShare_;
  int next_ = 0;
  int opened_ = 0;
  std::map<void*, Allocation> allocated_;
  std::map<void*, size_t> imported_;
};

const transport::FifoSizes kSizes{64 * 1024, 512, 64};

}  // namespace

TEST_CASE("shm transport: slots in the backend's memory, shared by both ends", "[shm]") {
  SharedFileAllocator gpu(true);
  transport::Descriptor d;
  auto receiver = transport::shm::create(kSizes, &gpu, true, &d);
  CHECK(d.dataShared == 1);
  CHECK(d.bytes < kSizes.bytes());  // the segment holds the counters only
  CHECK(receiver->hostBytes() == d.bytes);
  CHECK(receiver->data() != receiver->base() + transport::fifoControlBytes());
  auto sender = transport::shm::import(d, &gpu);
  transport::shm::unlinkName(d);
  CHECK(sender->data() != receiver->data());  // a second mapping of the same memory
  const kernels::ConnHandle s = sender->handle(true), r = receiver->handle(false);
  std::memcpy(s.simple + 100, "simple", 7);
  std::memcpy(reinterpret_cast<char*>(s.ll128) + kSizes.ll128StepLines * sizeof(kernels::LL128Line) * 8 - 8, "ll128", 6);
  CHECK(std::strcmp(r.simple + 100, "simple") == 0);
  CHECK(std::strcmp(reinterpret_cast<char*>(r.ll128) + kSizes.ll128StepLines * sizeof(kernels::LL128Line) * 8 - 8, "ll128") == 0);
  // tail, head, the step counters and the signature slots are in the device memory too, in
  // front of the slots, shared the same way; the fault boxes, announcement, step sizes and
  // offers stay in the segment (the host reads or writes them).
  char* const words = receiver->data() - transport::kDeviceCounterBytes;
  CHECK(reinterpret_cast<char*>(r.tail) == words);
  CHECK(reinterpret_cast<char*>(r.head) == words + 64);
  CHECK(reinterpret_cast<char*>(s.tail) == sender->data() - transport::kDeviceCounterBytes);
  for (const kernels::ConnHandle* h : {&r, &s}) {
    const char* inDevice = h == &r ? words : sender->data() - transport::kDeviceCounterBytes;
    const char* segment = h == &r ? receiver->base() : sender->base();
    const size_t segmentBytes = h == &r ? receiver->hostBytes() : sender->hostBytes();
    for (const void* p : {static_cast<const void*>(h->step), static_cast<const void*>(h->sigs),
                          static_cast<const void*>(h->sigs + kernels::kSteps - 1)}) {
      CHECK(static_cast<const char*>(p) >= inDevice + 128);
      CHECK(static_cast<const char*>(p) < inDevice + transport::kDeviceCounterBytes);
    }
    for (const void* p : {static_cast<const void*>(h->sizes), static_cast<const void*>(h->offer),
                          static_cast<const void*>(h->announce)}) {
      CHECK(static_cast<const char*>(p) >= segment);
      CHECK(static_cast<const char*>(p) < segment + segmentBytes);
    }
  }
  CHECK(r.step != s.step);
  CHECK(*r.tail == 0);  // (zeroed by the allocator)
  *s.tail = 5;
  *r.head = 3;
  *s.step = 7;
  s.sigs[2].stamp = 9;
  CHECK(*r.tail == 5);
  CHECK(*s.head == 3);
  CHECK(*reinterpret_cast<uint64_t*>(words + 128) == 7);  // (the sender's counter, as the receiver maps it)
  CHECK(*r.step == 0);
  CHECK(r.sigs[2].stamp == 9);
  CHECK(transport::offeredKeysOf(r) == receiver->offeredKeys());
  CHECK(transport::offeredKeysOf(s) == sender->offeredKeys());

  SECTION("the receiver goes first: its slots wait until the sender lets go") {
    receiver.reset();
    CHECK(gpu.freed == 0);
    transport::Descriptor d2;
    auto other = transport::shm::create(kSizes, &gpu, true, &d2);
    CHECK(gpu.freed == 0);  // (no sweep while connecting)
    sender.reset();
    CHECK(gpu.freed == 1);  // the sender's destruction sweeps
    transport::shm::unlinkName(d2);
    other.reset();
    CHECK(gpu.freed == 2);  // never imported: freed at once
  }
  SECTION("the sender goes first: the receiver frees its slots at once") {
    sender.reset();
    receiver.reset();
    CHECK(gpu.freed == 1);
  }
  CHECK(gpu.freedWhileOpen == 0);
}

TEST_CASE("shm transport: an allocator that cannot share, or P2P disabled, keeps the slots in the segment", "[shm]") {
  for (bool canShare : {false, true}) {
    SharedFileAllocator gpu(canShare);
    transport::Descriptor d;
    auto receiver = transport::shm::create(kSizes, &gpu, /*deviceData=*/!canShare, &d);
    CHECK(d.dataShared == 0);
    CHECK(d.bytes == kSizes.bytes());
    CHECK(receiver->data() == receiver->base() + transport::fifoControlBytes());
    auto sender = transport::shm::import(d, &gpu);
    transport::shm::unlinkName(d);
    std::memcpy(sender->handle(true).simple, "x", 2);
    CHECK(std::strcmp(receiver->handle(false).simple, "x") == 0);
    const kernels::ConnHandle r = receiver->handle(false);  // the kernels' words in the segment too
    CHECK(reinterpret_cast<char*>(r.tail) == receiver->base());
    CHECK(reinterpret_cast<char*>(r.sigs) > receiver->base());
    CHECK(reinterpret_cast<char*>(r.step) < receiver->data());
    CHECK(transport::offeredKeysOf(r) == receiver->offeredKeys());
    sender.reset();
    receiver.reset();
    CHECK(gpu.freed == (canShare ? 0 : 1));  // (the unshareable slots were allocated, then freed at once)
  }
}

TEST_CASE("shm transport: slots in GPU memory reaching a sender without the backend is an error", "[shm]") {
  SharedFileAllocator gpu(true);
  transport::Descriptor d;
  auto receiver = transport::shm::create(kSizes, &gpu, true, &d);
  try {
    transport::shm::import(d, nullptr);
    FAIL("imported GPU slots without an allocator");
  } catch (const Error& e) {
    CHECK(e.code() == ncclInternalError);
    CHECK(std::string(e.what()).find("host backend cannot map") != std::string::npos);
  }
  transport::shm::unlinkName(d);
}

TEST_CASE("shm transport: head is the sender's credit line, a segment of its own, unlinked once the receiver maps it",
          "[shm]") {
  transport::Descriptor d;
  auto receiver = transport::shm::create(kSizes, nullptr, false, &d);
  transport::Acknowledgement ack{};
  auto sender = transport::shm::import(d, nullptr, &ack);
  transport::shm::unlinkName(d);
  REQUIRE(ack.credit == transport::kCreditSegment);
  const std::string name = ack.creditName;
  CHECK(name.rfind("/braid-" + std::to_string(getpid()) + "-", 0) == 0);
  CHECK(access(("/dev/shm" + name).c_str(), F_OK) == 0);
  const kernels::ConnHandle s = sender->handle(true);
  const char* head = reinterpret_cast<const char*>(s.head);
  CHECK((head < sender->base() || head >= sender->base() + sender->hostBytes()));  // not the receiver's segment
  CHECK(sender->creditData().at == nullptr);  // (host memory)
  transport::shm::adoptCredit(*receiver, ack, nullptr);
  CHECK(access(("/dev/shm" + name).c_str(), F_OK) != 0);  // nothing left in /dev/shm
  const kernels::ConnHandle r = receiver->handle(false);
  const char* receiverHead = reinterpret_cast<const char*>(r.head);
  CHECK((receiverHead < receiver->base() || receiverHead >= receiver->base() + receiver->hostBytes()));
  CHECK(*r.head == 0);
  kernels::storeRelease(r.head, uint64_t{9});  // the receiver frees a step: the sender sees it in its own page
  CHECK(kernels::loadAcquire(s.head) == 9);
  CHECK(*r.tail == 0);
  *s.tail = 4;
  CHECK(*r.tail == 4);  // (tail stays in the receiver's segment)
}

TEST_CASE("shm transport: with slots in GPU memory, head is the sender's GPU memory, freed once neither end maps it",
          "[shm]") {
  for (const bool senderFirst : {true, false}) {
    SharedFileAllocator gpu(true);
    transport::Descriptor d;
    auto receiver = transport::shm::create(kSizes, &gpu, true, &d);
    transport::Acknowledgement ack{};
    auto sender = transport::shm::import(d, &gpu, &ack);
    transport::shm::unlinkName(d);
    REQUIRE(ack.credit == transport::kCreditDevice);
    const kernels::ConnHandle s = sender->handle(true);
    CHECK(sender->creditData().at == reinterpret_cast<char*>(s.head));
    CHECK(sender->creditData().bytes == transport::kCreditLineBytes);
    transport::shm::adoptCredit(*receiver, ack, &gpu);
    const kernels::ConnHandle r = receiver->handle(false);
    CHECK(r.head != s.head);  // (the receiver's mapping of it)
    CHECK(reinterpret_cast<char*>(r.head) != receiver->data() - transport::kDeviceCounterBytes + 64);
    kernels::storeRelease(r.head, uint64_t{11});
    CHECK(kernels::loadAcquire(s.head) == 11);
    const int freedBefore = gpu.freed;
    if (senderFirst) {
      sender.reset();
      receiver.reset();
    } else {
      receiver.reset();
      sender.reset();
    }
    CHECK(gpu.freed == freedBefore + 2);  // the receiver's slots and the sender's credit line
    CHECK(gpu.freedWhileOpen == 0);
  }
}
