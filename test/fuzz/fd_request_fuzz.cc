// libFuzzer target: the descriptor server's request parser (core/fd_exchange.h), the whole of
// what a datagram from any process of the host reaches before its credentials and token are
// checked. A request it takes must be exactly what fetch() sends for that token.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/fd_exchange.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  braid::fds::Token token{};
  if (braid::fds::parseRequest(data, size, &token)) {
    const auto again = braid::fds::encodeRequest(token);
    if (token.empty() || size != again.size() || std::memcmp(again.data(), data, size) != 0) std::abort();
  }
  return 0;
}
