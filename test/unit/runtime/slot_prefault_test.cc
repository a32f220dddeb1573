// SlotPrefault (runtime/host/slot_prefault.h): the first call of a size maps the pages its
// messages reach in every FIFO slot, and nothing beyond them.
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <vector>

#include "runtime/host/slot_prefault.h"

using braid::kernels::ConnHandle;
using braid::kernels::kSteps;
using braid::kernels::Proto;

namespace {

/// Resident pages of [base, base + bytes), one flag a page.
std::vector<bool> resident(char* base, size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> flags((bytes + page - 1) / page);
  REQUIRE(mincore(base, bytes, flags.data()) == 0);
  std::vector<bool> out;
  for (unsigned char f : flags) out.push_back((f & 1) != 0);
  return out;
}

}  // namespace

TEST_CASE("SlotPrefault maps the part of every slot a size reaches, once", "[runtime]") {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t slot = 16 * page, total = slot * kSteps;
  void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  char* base = static_cast<char*>(p);
  ConnHandle conn{};
  conn.simple = base;
  conn.simpleStepBytes = static_cast<uint32_t>(slot);
  conn.simpleStride = static_cast<uint32_t>(slot);
  braid::runtime::host::SlotPrefault prefault;
  prefault.cover(conn, Proto::kSimple, 2 * page + 1);  // three pages of each slot
  std::vector<bool> in = resident(base, total);
  // Whether this kernel maps pages on request at all (MADV_POPULATE_WRITE is 23, Linux 5.14).
  void* probe = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(probe != MAP_FAILED);
  const bool supported = madvise(probe, page, 23) == 0;
  munmap(probe, page);
  if (supported) {
    for (int s = 0; s < kSteps; ++s) {
      INFO("slot " << s);
      for (size_t k = 0; k < 16; ++k) CHECK(in[s * 16 + k] == (k < 3));
    }
    prefault.cover(conn, Proto::kSimple, page);  // less than mapped: nothing more
    CHECK(resident(base, total) == in);
    prefault.cover(conn, Proto::kSimple, 100 * slot);  // beyond a slot: every slot whole
    for (bool r : resident(base, total)) CHECK(r);
    ConnHandle none{};  // a connection without slots (an end the algorithm does not use)
    prefault.cover(none, Proto::kLL, 4096);
  } else {
    WARN("skipped: this kernel has no MADV_POPULATE_WRITE (Linux 5.14), so pages fault on use as before");
  }
  munmap(base, total);
}
