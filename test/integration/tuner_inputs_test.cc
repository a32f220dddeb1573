// What Braid tells a tuner plugin beside a collective's function and size: test/plugins/
// tuner_record.c logs numPipeOps, regBuff and two entries of the cost table it is given. Each
// run is a fresh plugin_driver process.
#include <catch2/catch.hpp>

#include <string>

#include "plugin_helpers.h"

using namespace braid::test::plugins;

TEST_CASE("a tuner plugin's numPipeOps: the group's collectives over the communicator's channels", "[plugins]") {
  // One AllReduce of 256 floats alone, then the driver's group: an AllReduce of 256 floats, a
  // Broadcast of 64 and an AllGather of 32 from each rank (a send and a receive beside them,
  // not counted): three collectives.
  SECTION("one channel: 3") {
    const std::string out =
        runDriver("NCCL_MAX_NCHANNELS=1 NCCL_TUNER_PLUGIN=" + plugin("tuner-record"), "2 threads destroy 256 group");
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    CHECK(occurrences(out, "test tuner record: AllReduce of 1024 bytes, numPipeOps 1, regBuff 0") == 2);
    CHECK(occurrences(out, "test tuner record: AllReduce of 1024 bytes, numPipeOps 3, regBuff 0") == 2);
    CHECK(occurrences(out, "test tuner record: Broadcast of 256 bytes, numPipeOps 3, regBuff 0") == 2);
    CHECK(occurrences(out, "test tuner record: AllGather of 256 bytes, numPipeOps 3, regBuff 0") == 2);
    CHECK(occurrences(out, "test tuner record: ") == 8);
  }
  SECTION("two channels: 2") {
    const std::string out = runDriver("NCCL_MIN_NCHANNELS=2 NCCL_MAX_NCHANNELS=2 NCCL_TUNER_PLUGIN=" +
                                          plugin("tuner-record"), "2 threads destroy 256 group");
    INFO(out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    CHECK(occurrences(out, "test tuner record: AllReduce of 1024 bytes, numPipeOps 1,") == 2);
    CHECK(occurrences(out, ", numPipeOps 2, ") == 6);
    CHECK(occurrences(out, "test tuner record: ") == 8);
  }
}

TEST_CASE("a tuner plugin's regBuff: 1 where both buffers are registered with the communicator", "[plugins]") {
  // 256 floats: unregistered, in place on a registered buffer, out of place from a registered
  // send buffer into an unregistered receive buffer.
  for (const char* name : {"tuner-record", "tuner-recordv4"}) {
    const std::string out =
        runDriver(std::string("NCCL_TUNER_PLUGIN=") + plugin(name), "2 threads destroy 256 registered sendregistered");
    INFO(name << "\n" << out);
    CHECK_THAT(out, Catch::Contains("all ranks ok"));
    CHECK(occurrences(out, "rank 0: registered ok") == 1);
    CHECK(occurrences(out, "rank 1: sendregistered ok") == 1);
    CHECK(occurrences(out, "test tuner record: AllReduce of 1024 bytes, numPipeOps 1, regBuff 0") == 4);
    CHECK(occurrences(out, "test tuner record: AllReduce of 1024 bytes, numPipeOps 1, regBuff 1") == 2);
  }
}
