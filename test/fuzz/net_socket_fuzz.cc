// libFuzzer target: what a stranger or a broken peer can send to the socket transport's data
// port, through the real acceptor and the real proxy thread. The first byte chooses: even, the
// bytes are the connection's first (the hello, checked by the acceptor); odd, a valid hello
// comes first and the bytes follow as frames (the frame parser). Whatever comes, the receiver
// must refuse or record a fault, never crash, hang or write outside its FIFO.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>

#include "core/socket.h"
#include "core/status.h"
#include "transport/net/net_end.h"
#include "transport/net/socket/socket_transport.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace braid;
  using namespace braid::transport;
  if (size == 0) return 0;
  static const uint32_t kAborted = 1;  // (set: destroying the receiver drains nothing)
  socket::Settings settings;
  settings.listenAt = net::SocketAddress::parse("127.0.0.1:0");
  settings.commHash = 0x1234;
  settings.rank = 1;
  settings.timeout = std::chrono::seconds(5);
  settings.abortFlag = &kAborted;
  Descriptor d;
  auto receiver = socket::createReceiver(FifoSizes{4096, 16, 4}, settings, 0, &d);
  const auto deadline = net::Clock::now() + std::chrono::seconds(2);
  try {
    net::Socket s = net::Socket::connect(net::SocketAddress::unpack(d.listen), deadline, nullptr);
    if ((data[0] & 1) != 0) {
      const netend::Hello hello{netend::kHelloMagic, netend::kWireVersion, d.nonce, settings.commHash, 0, 1, 0, 1, {}};
      s.sendAll(&hello, sizeof(hello), deadline, nullptr);
    }
    s.sendAll(data + 1, size - 1, deadline, nullptr);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // (the proxy thread reads it)
  } catch (const Error&) {
    // the receiver closed the connection: refused
  }
  return 0;
}
