// libFuzzer target: a connection descriptor as a peer could forge it. checkDescriptor must
// return a reason or "" for any bytes, never crash; a descriptor it passes as in-process is
// then looked up by token (p2p::import), which must refuse a token this process never issued.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/status.h"
#include "transport/descriptor_check.h"
#include "transport/p2p/p2p_transport.h"
#include "transport/shm/shm_transport.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace braid;
  using namespace braid::transport;
  Descriptor d;
  std::memset(&d, 0, sizeof(d));
  std::memcpy(&d, data, size < sizeof(d) ? size : sizeof(d));
  DescriptorExpectation e;
  e.peer = 1;
  e.sameProcess = size > sizeof(d) && (data[sizeof(d)] & 1) != 0;
  e.sharedMemory = !e.sameProcess && size > sizeof(d) && (data[sizeof(d)] & 2) != 0;
  e.sizes = FifoSizes{1u << 16, 64, 16};
  e.shmPrefix = shm::segmentPrefix(4242, 0xf0000001, 0x0123456789abcdef);
  e.peerAddress = net::SocketAddress::parse("127.0.0.1:5000");
  const std::string why = checkDescriptor(d, e);
  if (why.empty() && d.kind == Kind::kP2p) {
    try {
      p2p::import(d);
      __builtin_trap();  // nothing was offered: a token must never match
    } catch (const Error&) {
    }
  }
  return 0;
}
