// A communicator's grow id: one unused at a time, used up by the grow that takes it, and known
// as used to the whole process from then on; the id carries the size of what it grows.
#include <catch2/catch.hpp>

#include <cstring>

#include "bootstrap/unique_id.h"
#include "comm/grow_ids.h"
#include "core/status.h"

using namespace braid;

namespace {
ncclUniqueId idNumbered(unsigned char n) {
  ncclUniqueId id;
  std::memset(&id, n, sizeof id);
  return id;
}
}  // namespace

TEST_CASE("grow ids: one unused at a time, used up by the grow that holds it", "[unit][comm][grow]") {
  comm::GrowIds ids;
  const ncclUniqueId a = idNumbered(0xa1), b = idNumbered(0xb2);
  CHECK(ids.match(nullptr) == comm::GrowIdMatch::kNone);
  CHECK(ids.match(&a) == comm::GrowIdMatch::kForeign);
  ids.offer(a, /*rootTicket=*/0);
  CHECK(ids.match(&a) == comm::GrowIdMatch::kPending);
  CHECK(ids.match(&b) == comm::GrowIdMatch::kForeign);
  CHECK_THROWS_WITH(ids.offer(b, 0), Catch::Contains("already handed out a grow id"));

  // A grow in which this rank does not hold the id leaves it pending, but blocks new ids.
  CHECK(ids.begin(/*holder=*/false) == 0);
  CHECK_THROWS_WITH(ids.checkCanOffer(), Catch::Contains("already handed out"));
  ids.end(false);
  CHECK(ids.match(&a) == comm::GrowIdMatch::kPending);

  // The holder's grow uses it up, for this process.
  CHECK(!comm::growIdUsed(a));
  ids.begin(true);
  CHECK(ids.match(&a) == comm::GrowIdMatch::kPending);  // (until the grow ends: joiners in this process)
  CHECK_THROWS_WITH(ids.checkCanOffer(), Catch::Contains("already handed out"));
  ids.end(true);
  CHECK(comm::growIdUsed(a));
  CHECK(ids.match(&a) == comm::GrowIdMatch::kUsed);
  ids.offer(b, 0);
  CHECK(ids.match(&b) == comm::GrowIdMatch::kPending);
  CHECK(!comm::growIdUsed(b));
}

TEST_CASE("grow ids: a running grow blocks a new id even with none pending", "[unit][comm][grow]") {
  comm::GrowIds ids;
  ids.begin(false);
  CHECK_THROWS_WITH(ids.offer(idNumbered(0xc3), 0), Catch::Contains("ncclCommGrow of this communicator is still running"));
  ids.end(false);
  CHECK_NOTHROW(ids.offer(idNumbered(0xc3), 0));
}

TEST_CASE("unique ids carry the size of the communicator they grow", "[unit][bootstrap][grow]") {
  bootstrap::UniqueId id;
  id.secret = 42;
  id.root = net::SocketAddress::parse("127.0.0.1:4242");
  CHECK(bootstrap::UniqueId::decode(id.encode()).grownFrom == 0);
  id.grownFrom = 3;
  const bootstrap::UniqueId back = bootstrap::UniqueId::decode(id.encode());
  CHECK(back.grownFrom == 3);
  CHECK(back.secret == 42);
  CHECK(back.root.toString() == "127.0.0.1:4242");
}
