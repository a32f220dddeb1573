// A peer's connection descriptor is checked against what this rank derived itself before
// anything in it is used: forged kinds, sizes, segment names and addresses are refused with
// the reason; an in-process FIFO is found by a token this process issued, never an address.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>

#include "core/status.h"
#include "transport/descriptor_check.h"
#include "transport/p2p/p2p_transport.h"
#include "transport/shm/shm_transport.h"

using namespace braid;
using namespace braid::transport;

namespace {

const FifoSizes kSizes{64 * 1024, 64, 16};

DescriptorExpectation expectation() {
  DescriptorExpectation e;
  e.peer = 3;
  e.sharedMemory = true;
  e.sizes = kSizes;
  e.shmPrefix = shm::segmentPrefix(4242, 0xf0000001, 0x0123456789abcdef);
  e.peerAddress = net::SocketAddress::parse("10.1.2.3:4000");
  return e;
}

Descriptor socketDescriptor() {
  Descriptor d;
  std::memset(&d, 0, sizeof(d));
  d.kind = Kind::kSocket;
  d.sizes = kSizes;
  d.bytes = kSizes.bytes();
  d.listen = net::SocketAddress::parse("10.1.2.3:4711").pack();
  d.nSockets = 2;
  return d;
}

}  // namespace

TEST_CASE("descriptors: what this rank expects passes", "[unit][descriptor]") {
  CHECK(checkDescriptor(socketDescriptor(), expectation()) == "");
  Descriptor d = socketDescriptor();
  d.kind = Kind::kShm;
  std::strcpy(d.shmName, (expectation().shmPrefix + "1f").c_str());
  CHECK(checkDescriptor(d, expectation()) == "");
}

TEST_CASE("descriptors: forged kinds, sizes, names and addresses are refused with the reason", "[unit][descriptor]") {
  const DescriptorExpectation e = expectation();
  Descriptor d = socketDescriptor();
  d.kind = static_cast<Kind>(77);
  CHECK_THAT(checkDescriptor(d, e), Catch::Contains("transport kind 77 is unknown"));
  d.kind = Kind::kP2p;  // another process may not offer in-process memory
  CHECK_THAT(checkDescriptor(d, e), Catch::Contains("the peer is another process"));
  DescriptorExpectation remote = e;
  remote.sharedMemory = false;
  d.kind = Kind::kShm;
  CHECK_THAT(checkDescriptor(d, remote), Catch::Contains("does not share this rank's /dev/shm"));

  d = socketDescriptor();
  d.sizes.simpleStepBytes *= 2;
  CHECK_THAT(checkDescriptor(d, e), Catch::Contains("131072-byte Simple steps") && Catch::Contains("NCCL_BUFFSIZE"));
  d = socketDescriptor();
  d.bytes += 1;
  CHECK_THAT(checkDescriptor(d, e), Catch::Contains("bytes, not"));
  d.bytes -= 1;
  d.nSockets = 65;
  CHECK_THAT(checkDescriptor(d, e), Catch::Contains("65 sockets"));
  d.nSockets = 0;
  CHECK_THAT(checkDescriptor(d, e), Catch::Contains("0 sockets"));
  d = socketDescriptor();
  d.listen = net::SocketAddress::parse("10.9.9.9:4711").pack();  // data redirected elsewhere
  CHECK_THAT(checkDescriptor(d, e), Catch::Contains("10.9.9.9:4711 is not on its own host 10.1.2.3"));
  d.listen = net::SocketAddress::parse("10.1.2.3:0").pack();
  CHECK_THAT(checkDescriptor(d, e), Catch::Contains("is not on its own host"));
  std::memset(&d.listen, 0xff, sizeof(d.listen));
  CHECK_THAT(checkDescriptor(d, e), Catch::Contains("(invalid)"));
  d = socketDescriptor();
  d.kind = Kind::kIb;
  CHECK_THAT(checkDescriptor(d, e), Catch::Contains("2 control sockets"));

  d = socketDescriptor();
  d.kind = Kind::kShm;
  std::strcpy(d.shmName, "/braid-someone-elses-segment");
  CHECK_THAT(checkDescriptor(d, e), Catch::Contains("names segment '/braid-someone-elses-segment'"));
  std::memset(d.shmName, 'x', sizeof(d.shmName));
  CHECK_THAT(checkDescriptor(d, e), Catch::Contains("not terminated"));
  std::strcpy(d.shmName, (e.shmPrefix + "0").c_str());
  d.dataShared = 7;
  CHECK_THAT(checkDescriptor(d, e), Catch::Contains("slot-sharing flag is 7"));
  d.dataShared = 1;  // the control part only: its size then differs
  CHECK_THAT(checkDescriptor(d, e), Catch::Contains("bytes, not"));
}

TEST_CASE("p2p: the FIFO is named by a token this process issued, never an address", "[unit][descriptor]") {
  Descriptor d;
  auto receiver = p2p::create(kSizes, nullptr, &d);
  CHECK(d.address != reinterpret_cast<uint64_t>(receiver->base()));
  auto sender = p2p::import(d);
  CHECK(sender->base() == receiver->base());

  Descriptor forged = d;
  forged.address = reinterpret_cast<uint64_t>(receiver->base());  // an address: refused, not used
  CHECK_THROWS_WITH(p2p::import(forged), Catch::Contains("which this process") && Catch::Contains("does not offer"));
  forged.address = 0xdeadbeef;
  CHECK_THROWS_AS(p2p::import(forged), Error);

  // Once the receiver is gone its token names nothing, even while the sender holds the memory.
  receiver.reset();
  CHECK_THROWS_AS(p2p::import(d), Error);
}

TEST_CASE("shm: a segment shorter than the descriptor says is refused, not mapped", "[unit][descriptor]") {
  const std::string name = "/braid-test-short-" + std::to_string(getpid());
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(ftruncate(fd, 4096) == 0);
  close(fd);
  Descriptor d;
  std::memset(&d, 0, sizeof(d));
  d.kind = Kind::kShm;
  d.sizes = kSizes;
  d.bytes = kSizes.bytes();  // far more than 4096: touching the mapping would raise SIGBUS
  std::strcpy(d.shmName, name.c_str());
  CHECK_THROWS_WITH(shm::import(d, nullptr), Catch::Contains("is not this user's FIFO of"));
  shm_unlink(name.c_str());
}

TEST_CASE("acknowledgements: a sender's answer names its rank and a credit line of its own making", "[unit][descriptor]") {
  const DescriptorExpectation e = expectation();
  Acknowledgement a;
  std::memset(&a, 0, sizeof(a));
  a.magic = kAcknowledgementMagic;
  a.rank = 3;
  CHECK(checkAcknowledgement(a, e, Kind::kSocket, false).empty());
  CHECK(checkAcknowledgement(a, e, Kind::kP2p, false).empty());
  CHECK_THAT(checkAcknowledgement(a, e, Kind::kShm, false), Catch::Contains("credit line is of kind 0"));
  a.credit = kCreditSegment;
  std::snprintf(a.creditName, sizeof(a.creditName), "%s1f", e.shmPrefix.c_str());
  CHECK(checkAcknowledgement(a, e, Kind::kShm, false).empty());
  CHECK_THAT(checkAcknowledgement(a, e, Kind::kP2p, false), Catch::Contains("to a connection that takes none"));
  Acknowledgement forged = a;
  forged.magic = 7;
  CHECK_THAT(checkAcknowledgement(forged, e, Kind::kShm, false), Catch::Contains("not an acknowledgement"));
  forged = a;
  forged.rank = 4;
  CHECK_THAT(checkAcknowledgement(forged, e, Kind::kShm, false), Catch::Contains("from rank 4"));
  forged = a;
  std::snprintf(forged.creditName, sizeof(forged.creditName), "/braid-1-2-0000000000000003-1f");
  CHECK_THAT(checkAcknowledgement(forged, e, Kind::kShm, false), Catch::Contains("not one of the peer's"));
  forged = a;
  std::snprintf(forged.creditName, sizeof(forged.creditName), "%s../x", e.shmPrefix.c_str());
  CHECK_THAT(checkAcknowledgement(forged, e, Kind::kShm, false), Catch::Contains("not one of the peer's"));
  forged = a;
  std::memset(forged.creditName, 'a', sizeof(forged.creditName));
  CHECK_THAT(checkAcknowledgement(forged, e, Kind::kShm, false), Catch::Contains("not terminated"));
  forged = a;
  forged.credit = kCreditDevice;
  CHECK(checkAcknowledgement(forged, e, Kind::kShm, true).empty());
  CHECK_THAT(checkAcknowledgement(forged, e, Kind::kShm, false), Catch::Contains("slots are in host memory"));
  forged.credit = 9;
  CHECK_THAT(checkAcknowledgement(forged, e, Kind::kShm, true), Catch::Contains("kind 9"));
}
