#include <catch2/catch.hpp>

#include <set>

#include "core/status.h"

using namespace braid;

TEST_CASE("every result code has its own text", "[status]") {
  std::set<std::string> texts;
  for (int r = ncclSuccess; r < ncclNumResults; ++r) {
    const std::string text = resultString(static_cast<ncclResult_t>(r));
    CHECK(text != "unknown result code");
    texts.insert(text);
  }
  CHECK(texts.size() == ncclNumResults);
  CHECK(std::string(resultString(ncclNumResults)) == "unknown result code");
  CHECK(std::string(resultString(static_cast<ncclResult_t>(-3))) == "unknown result code");
  CHECK(std::string(resultString(ncclSuccess)) == "no error");
}

TEST_CASE("fail() formats and carries the code", "[status]") {
  try {
    fail(ncclInvalidArgument, "count %d of %s", 7, "things");
    FAIL("fail() returned");
  } catch (const Error& e) {
    CHECK(e.code() == ncclInvalidArgument);
    CHECK(std::string(e.what()) == "count 7 of things");
  }
}

TEST_CASE("BRAID_CHECK_EQ prints both values", "[status]") {
  const int a = 3;
  CHECK_NOTHROW([&] { BRAID_CHECK_EQ(a, 3); }());
  CHECK_THROWS_WITH([&] { BRAID_CHECK_EQ(a, 4); }(), Catch::Contains("(3 vs 4)"));
}
