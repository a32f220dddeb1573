// libFuzzer target: what a bootstrap peer can send. The bytes arrive on a socket pair and go
// through receiveMessage (header, secret, type, length bound); on a loopback connection to a
// Listener (the root's and every rank's: partial headers, keys, lengths); as a series of
// registrations to the root's Admission (nranks, ranks, duplicates, the timeout text), and as
// other roots' blocks to root 0's; and they are decoded as a unique id. Garbage must give a braid::Error or a refusal, never a
// crash or a large allocation. Last, the bytes are read as up to 8 connections with the right key, each a type, an
// announced length and how many payload bytes really follow, to a root's or a rank's listener: what the listener holds
// must follow the bytes that came, never the lengths announced (issue 41).
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <vector>

#include "bootstrap/admission.h"
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
  // The listener, as a stranger or a rank would reach it.
  static bootstrap::Listener* listener = [] {
    net::Socket listening = net::Socket::listen(net::SocketAddress::parse("127.0.0.1:0"));
    return new bootstrap::Listener(std::move(listening), 0x5eedf00dull, "fuzz");
  }();
  try {
    const auto deadline = net::Clock::now() + std::chrono::seconds(1);
    net::Socket s = net::Socket::connect(listener->socket().localAddress(), deadline, nullptr);
    s.sendAll(data, limit, deadline, nullptr);
  } catch (const Error&) {
  }
  bootstrap::Message m;
  for (int i = 0; i < 3; ++i) listener->poll(0, &m);

  // The root's admission, fed registrations.
  bootstrap::Admission admission;
  constexpr size_t kRecord = sizeof(int32_t) + sizeof(bootstrap::Registration);
  for (size_t at = 0; at + kRecord <= size && !admission.complete(); at += kRecord) {
    int32_t rank;
    bootstrap::Registration r;
    memcpy(&rank, data + at, sizeof rank);
    memcpy(&r, data + at + sizeof rank, sizeof r);
    admission.admit(rank, r, "fuzz");
  }
  admission.timeOut("fuzz root", std::chrono::seconds(1));
  // Root 0's admission of other roots' blocks (head, then as many addresses as the bytes hold).
  bootstrap::Admission first;
  for (size_t at = 0; at + sizeof(bootstrap::BlockHead) <= size && !first.complete();) {
    bootstrap::BlockHead head;
    memcpy(&head, data + at, sizeof head);
    at += sizeof head;
    const size_t fit = (size - at) / sizeof(net::SocketAddress::Packed);
    const size_t n = std::min<size_t>(fit, head.count > 0 ? static_cast<size_t>(head.count) : 0);
    std::vector<net::SocketAddress::Packed> addresses(n);
    if (n > 0) memcpy(addresses.data(), data + at, n * sizeof(net::SocketAddress::Packed));
    at += n * sizeof(net::SocketAddress::Packed);
    first.admitBlock(head, addresses, "fuzz");
    if (first.complete()) first.addresses();
  }
  first.timeOut("fuzz root 0", std::chrono::seconds(1));

  // Announced lengths: a listener's buffers grow with the bytes that arrive.
  {
    constexpr size_t kRecord = 1 + 4 + 2;  // type choice, announced length, payload bytes sent (x 64)
    const bool root = size > 0 && (data[size - 1] & 1) != 0;
    net::Socket listening = net::Socket::listen(net::SocketAddress::parse("127.0.0.1:0"));
    const net::SocketAddress at = listening.localAddress();
    bootstrap::Listener lengths(std::move(listening), 0x5eedf00dull, "fuzz lengths", bootstrap::Listener::Replies::kKeep,
                                root ? bootstrap::Listener::rootMessages() : bootstrap::Listener::rankMessages());
    const bootstrap::MessageType types[] = {bootstrap::MessageType::kRegister, bootstrap::MessageType::kTable,
                                            bootstrap::MessageType::kError, bootstrap::MessageType::kRound,
                                            bootstrap::MessageType::kBlock, bootstrap::MessageType::kPeer};
    std::vector<net::Socket> connections;
    size_t sent = 0;
    static std::vector<char> filler(size_t(4) << 20, 'f');
    for (size_t at0 = 0; at0 + kRecord <= size && connections.size() < 8; at0 += kRecord) {
      uint32_t length;
      uint16_t send;
      memcpy(&length, data + at0 + 1, sizeof length);
      memcpy(&send, data + at0 + 5, sizeof send);
      const bootstrap::MessageHeader header{0x5eedf00dull, types[data[at0] % 6], 0, 0, length};
      try {
        const auto deadline = net::Clock::now() + std::chrono::seconds(1);
        net::Socket s = net::Socket::connect(at, deadline, nullptr);
        s.sendAll(&header, sizeof header, deadline, nullptr);
        const size_t want = std::min<size_t>(static_cast<size_t>(send) * 64, filler.size());
        for (size_t done = 0; done < want;) {
          const ssize_t n = s.writeSome(filler.data() + done, want - done);
          if (n <= 0) break;
          done += static_cast<size_t>(n);
          sent += static_cast<size_t>(n);
        }
        connections.push_back(std::move(s));
      } catch (const Error&) {
      }
    }
    for (int i = 0; i < 4; ++i) {
      bootstrap::Message got;
      lengths.poll(0, &got);
    }
    // Each buffer holds at most what came and as much again, or kFreePayloadBytes.
    if (lengths.heldBytes() > 2 * sent + connections.size() * bootstrap::kFreePayloadBytes) abort();
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
