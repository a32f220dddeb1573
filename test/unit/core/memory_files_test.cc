// memfiles: host memory in memory files. Allocations are zeroed whole pages; an offer covers a
// range inside one allocation only; a Mapping of an offer sees the owner's writes and the owner
// sees its writes (here within one process, which maps the file a second time); release()
// takes back only what allocate() gave.
#include "core/memory_files.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>

#include "core/status.h"

using namespace braid;

TEST_CASE("memory files: zeroed pages, offers of ranges inside, mappings that share the bytes",
          "[core][memfiles]") {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  char* p = static_cast<char*>(memfiles::allocate(3 * page + 1));  // (four pages)
  REQUIRE(p != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(p) % page == 0);
  size_t nonZero = 0;
  for (size_t i = 0; i < 4 * page; ++i) nonZero += p[i] != 0;
  CHECK(nonZero == 0);

  fds::Offer offer{};
  size_t offset = 0;
  CHECK_FALSE(memfiles::offer(p + 4 * page - 8, 16, &offer, &offset));  // (past the end)
  CHECK_FALSE(memfiles::offer(p - 1, 1, &offer, &offset));              // (before the start)
  int onStack = 0;
  CHECK_FALSE(memfiles::offer(&onStack, sizeof onStack, &offer, &offset));

  REQUIRE(memfiles::offer(p + page + 100, 2 * page, &offer, &offset));
  CHECK(offset == page + 100);
  {
    memfiles::Mapping mapped(offer, offset, 2 * page);
    char* q = static_cast<char*>(mapped.data());
    CHECK(q != p + page + 100);
    std::memcpy(p + page + 100, "owner", 6);
    CHECK(std::strcmp(q, "owner") == 0);
    std::memcpy(q + 2 * page - 6, "peer!", 6);
    CHECK(std::strcmp(p + 3 * page + 94, "peer!") == 0);
  }
  fds::withdraw(offer.token);
  CHECK_THROWS_AS(memfiles::Mapping(offer, offset, 16), Error);  // (withdrawn: nothing to fetch)

  CHECK_FALSE(memfiles::release(p + 1));
  CHECK(memfiles::release(p));
  CHECK_FALSE(memfiles::release(p));
}
