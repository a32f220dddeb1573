// The one-sided carriers' shared pieces (transport/net/one_sided_window_table.h): the target's
// check of a frame, its window table (a withdrawn window takes no more bytes), and the record
// of lost peers (the first reason stays).
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/net/one_sided_window_table.h"

using namespace braid::transport::onesided;

namespace {

FrameHeader putOf(uint64_t window, uint64_t offset, uint64_t bytes, int ctx = 0) {
  FrameHeader h = frameOf(kPut, ctx);
  h.window = window;
  h.offset = offset;
  h.bytes = bytes;
  return h;
}

}  // namespace

TEST_CASE("one-sided window table: a frame is checked against the window it names before anything lands",
          "[transport][onesided]") {
  std::vector<char> memory(4096, 0);
  WindowTable table;
  table.publish(7, memory.data(), memory.size());
  CHECK(table.check(putOf(7, 0, 4096), 3, 2).empty());
  CHECK(table.check(frameOf(kSignal, 1), 3, 2).empty());
  CHECK(table.check(frameOf(kBye, 99), 3, 2).empty());  // (a goodbye names no context)
  CHECK(table.check(putOf(7, 4090, 16), 3, 2) ==
        "rank 3's put of 16 bytes at offset 4090 does not fit this rank's window of 4096 bytes: refused, nothing "
        "written");
  CHECK(table.check(putOf(7, UINT64_MAX - 7, 16), 3, 2).find("at offset 18446744073709551608 does not fit") !=
        std::string::npos);
  CHECK(table.check(putOf(8, 0, 1), 3, 2) == "rank 3's put names window id 0x8, which this rank has not registered");
  CHECK(table.check(putOf(7, 0, 1, 2), 3, 2) == "rank 3's signal names ctx 2; this communicator has 2 contexts");
  FrameHeader strange = frameOf(9, 0);
  CHECK(table.check(strange, 3, 2) == "rank 3 sent a frame of unknown type 9");
  strange.magic = 1;
  CHECK(table.check(strange, 3, 2) == "rank 3 sent a frame with magic 0x1 (not a one-sided frame)");
}

TEST_CASE("one-sided window table: bytes land at the frame's offset, and none once the window is withdrawn",
          "[transport][onesided]") {
  std::vector<char> memory(64, 0);
  WindowTable table;
  table.publish(1, memory.data(), memory.size());
  const FrameHeader h = putOf(1, 16, 8);
  char* landed = nullptr;
  CHECK(table.landing(h, 4, [&](char* to) { landed = to; }));
  CHECK(landed == memory.data() + 20);
  CHECK_FALSE(table.landing(putOf(1, 60, 8), 0, [&](char*) { FAIL("a frame past the window's end landed"); }));
  table.withdraw(1);
  CHECK_FALSE(table.landing(h, 0, [&](char*) { FAIL("a byte landed in a withdrawn window"); }));
  CHECK(table.check(h, 0, 1).find("has not registered") != std::string::npos);
}

TEST_CASE("one-sided lost peers: the first reason stays", "[transport][onesided]") {
  LostPeers lost(3);
  CHECK_FALSE(lost.lost(1));
  CHECK(lost.mark(1, "its link closed"));
  CHECK_FALSE(lost.mark(1, "a later reason"));
  CHECK(lost.lost(1));
  CHECK_FALSE(lost.lost(2));
  CHECK(lost.reason(1) == "its link closed");
  CHECK(lost.reason(2).empty());
}
