// How a plugin variable's value becomes the library names tried (core/plugin_library.h).
#include <catch2/catch.hpp>

#include "core/plugin_library.h"

using braid::plugin::candidates;

TEST_CASE("plugin variables name libraries as NCCL does", "[plugins]") {
  using V = std::vector<std::string>;
  CHECK(candidates("tuner", "") == V{"libnccl-tuner.so"});
  CHECK(candidates("tuner", "fast") == V{"libnccl-tuner-fast.so", "fast"});
  CHECK(candidates("env", "/opt/p/libmine.so") == V{"/opt/p/libmine.so"});
  CHECK(candidates("net", "./x.so") == V{"./x.so"});
  CHECK(candidates("tuner", "libnccl-tuner-fast.so") == V{"libnccl-tuner-fast.so"});
  CHECK(braid::plugin::disabled("none"));
  CHECK(braid::plugin::disabled("NONE"));
  CHECK_FALSE(braid::plugin::disabled("nonesuch"));
}

TEST_CASE("a plugin library that is absent is an INFO note, one that is not a library a WARN", "[plugins]") {
  std::vector<braid::plugin::Note> notes;
  braid::plugin::Library absent = braid::plugin::open("tuner", "/nonexistent/libnccl-tuner-x.so", "TUNER", &notes);
  CHECK_FALSE(absent);
  REQUIRE(notes.size() == 1);
  CHECK_FALSE(notes[0].warn);
  CHECK(notes[0].text == "TUNER/Plugin: Could not find: /nonexistent/libnccl-tuner-x.so");

  notes.clear();
  braid::plugin::Library notLibrary = braid::plugin::open("tuner", "/etc/hostname", "TUNER", &notes);
  CHECK_FALSE(notLibrary);
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].warn);
  CHECK_THAT(notes[0].text, Catch::StartsWith("TUNER/Plugin: cannot load /etc/hostname: "));
}
