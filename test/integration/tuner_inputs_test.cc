// What Braid tells a tuner plugin beside a collective's function and size, and what it takes
// back from a v5 plugin's init: test/plugins/tuner_record.c logs numPipeOps, regBuff and two
// entries of the cost table it is given; built as tuner-slowring its init makes Ring's base
// latency 1e6 us (and changes two constants more). Each run is a fresh plugin_driver process.
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

TEST_CASE("a v5 tuner plugin's changed constants change Braid's own choice", "[plugins]") {
  // 1 MiB AllReduce on 2 ranks, Braid choosing between Tree and Ring (NCCL's algorithms); the
  // plugins leave every cost table as they got it.
  const std::string plain =
      runDriver("NCCL_ALGO=Tree,Ring NCCL_TUNER_PLUGIN=" + plugin("tuner-record"), "2 threads destroy 262144");
  INFO(plain);
  CHECK_THAT(plain, Catch::Contains("all ranks ok"));
  CHECK(occurrences(plain, "AllReduce: 1048576 bytes on 2 ranks -> Ring/Simple, 1 channel(s)") == 2);
  CHECK(occurrences(plain, "Ring/Simple under 1e6 us, Tree/Simple under 1e6 us") == 2);
  CHECK(occurrences(plain, "the tuner plugin's (Braid's") == 0);

  const std::string slow =
      runDriver("NCCL_ALGO=Tree,Ring NCCL_TUNER_PLUGIN=" + plugin("tuner-slowring"), "2 threads destroy 262144");
  INFO(slow);
  CHECK_THAT(slow, Catch::Contains("all ranks ok"));
  // Every rank's table is changed alike, and every rank says so.
  CHECK(occurrences(slow, "Ring/LL base latency 1e+06 us, the tuner plugin's (Braid's: 0.26)") == 2);
  CHECK(occurrences(slow, "Ring/LL128 base latency 1e+06 us, the tuner plugin's (Braid's: 0.16)") == 2);
  CHECK(occurrences(slow, "Ring/Simple base latency 1e+06 us, the tuner plugin's (Braid's: 0.16)") == 2);
  CHECK(occurrences(slow, "Tree/Simple step latency over network 50 us, the tuner plugin's (Braid's: 11.6)") == 2);
  CHECK(occurrences(slow, "the tuner plugin's (Braid's") == 8);
  CHECK(occurrences(slow, "tuner plugin record changed constants Braid's cost model does not use (llMaxBws)") == 2);
  // The plugin's table and Braid's own choice both see the slow Ring.
  CHECK(occurrences(slow, "Ring/Simple over 1e6 us, Tree/Simple under 1e6 us") == 2);
  CHECK(occurrences(slow, "AllReduce: 1048576 bytes on 2 ranks -> Tree/Simple, 1 channel(s)") == 2);
  CHECK(occurrences(slow, "NCCL WARN") == 0);
}

TEST_CASE("a v5 tuner plugin's constants that are not times: a WARN, and Braid's figures stay", "[plugins]") {
  const std::string out =
      runDriver("NCCL_ALGO=Tree,Ring NCCL_TUNER_PLUGIN=" + plugin("tuner-badconstants"), "2 threads destroy 262144");
  INFO(out);
  CHECK_THAT(out, Catch::Contains("all ranks ok"));
  CHECK(occurrences(out, "tuner plugin record set the Tree/LL base latency to nan at init: not a time; Braid's 0.26 "
                         "kept") == 2);
  CHECK(occurrences(out, "tuner plugin record set the Ring/Simple NVLink latency to -1 at init: not a time; Braid's "
                         "0.26 kept") == 2);
  CHECK(occurrences(out, "NCCL WARN") == 4);
  CHECK(occurrences(out, "the tuner plugin's (Braid's") == 0);  // nothing changed
  CHECK(occurrences(out, "AllReduce: 1048576 bytes on 2 ranks -> Ring/Simple, 1 channel(s)") == 2);
}

TEST_CASE("a tuner plugin is asked once for a group's collectives of one kind within 4x of each other, as NCCL asks",
          "[plugins]") {
  // plugin_driver's "aggregate" group: float AllReduces of 4000, 14000, 12000, 20000, 400000
  // and 48000 bytes, a double AllReduce of 8000 and a float Broadcast of 4000. Smallest first,
  // each run while under 4x its first: 4000+12000+14000 (30000 bytes), 20000+48000 (68000),
  // 400000 alone; the double and the Broadcast are other kinds. 8 collectives on at most 2
  // channels: numPipeOps 4.
  SECTION("the sizes the plugin sees") {
    const std::string out = runDriver("NCCL_TUNER_PLUGIN=" + plugin("tuner-record"), "2 threads destroy aggregate");
    INFO(out);
    CHECK(occurrences(out, "aggregate ok") == 2);
    for (const char* seen : {"AllReduce of 30000 bytes", "AllReduce of 68000 bytes", "AllReduce of 400000 bytes",
                             "AllReduce of 8000 bytes", "Broadcast of 4000 bytes"}) {
      INFO(seen);
      CHECK(occurrences(out, std::string("test tuner record: ") + seen + ", numPipeOps 4, regBuff 0") == 2);
    }
    CHECK(occurrences(out, "test tuner record: ") == 10);  // (none of the aggregates' members alone)
  }
  SECTION("its answer for an aggregate runs every member; where it leaves the table, each runs Braid's own") {
    // tuner-ranges: AllReduce from 64 KiB on Ring/Simple on one channel, from 4 KiB up to 64 KiB
    // the table left alone. 20000 and 48000 bytes together are 68000: Ring/Simple for both.
    // (One thread a channel, the default, pinned: with more, Braid's own choice for 68000 bytes
    // is the plugin's already, and the texts below tell the two apart.)
    const std::string out =
        runDriver("BRAID_HOST_THREADS_PER_CHANNEL=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING,COLL NCCL_TUNER_PLUGIN=" +
                      plugin("tuner-ranges"),
                  "2 threads destroy aggregate");
    INFO(out);
    CHECK(occurrences(out, "aggregate ok") == 2);
    CHECK(occurrences(out, "2 ncclAllReduce calls of the group asked the tuner plugin together, as 17000 elements: "
                           "its choice runs them all") == 2);
    CHECK(occurrences(out, "3 ncclAllReduce calls of the group asked the tuner plugin together, as 7500 elements: it "
                           "left Braid's, so each runs Braid's for its size") == 2);
    CHECK(occurrences(out, "ncclAllReduce: 20000 bytes on 2 ranks -> Ring/Simple, 1 channel(s)") == 2);
    CHECK(occurrences(out, "ncclAllReduce: 48000 bytes on 2 ranks -> Ring/Simple, 1 channel(s)") == 2);
    CHECK(occurrences(out, "ncclAllReduce: 4000 bytes on 2 ranks -> Ring/Simple") == 0);  // (Braid's own for it)
  }
}
