// libFuzzer target: what a bootstrap peer can send. The bytes arrive on a socket pair and go
// through receiveMessage (header, secret, type, length bound); they are also decoded as a
// unique id. Garbage must give a braid::Error, never a crash or a large allocation.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "bootstrap/unique_id.h"
#include "bootstrap/wire.h"
#include "core/status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace braid;
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return 0;
  net::Socket reader(fds[0]);
  // Let the first 8 bytes match the secret half the time, so the fuzzer gets past it.
  const uint64_t secret = size >= 8 && (data[0] & 1) ? [&] {
    uint64_t s;
    memcpy(&s, data, 8);
    return s;
  }() : 0x5eedf00dull;
  size_t written = 0;
  const size_t limit = size < 65536 ? size : 65536;  // stays within the socket buffer
  while (written < limit) {
    ssize_t n = write(fds[1], data + written, limit - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  close(fds[1]);
  try {
    bootstrap::receiveMessage(reader, secret, net::Clock::now() + std::chrono::milliseconds(50), nullptr, "fuzz");
  } catch (const Error&) {
  } catch (const std::exception&) {
  }
  if (size >= sizeof(ncclUniqueId)) {
    ncclUniqueId id;
    memcpy(&id, data, sizeof id);
    try {
      bootstrap::UniqueId::decode(id);
    } catch (const Error&) {
    }
  }
  return 0;
}
