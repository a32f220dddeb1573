// TCP sockets for the out-of-band channels (bootstrap now, the socket transport later).
//
// Every blocking operation takes a deadline and an optional abort flag, and waits in
// short poll() slices, so nothing here can hang: it returns, or throws braid::Error
// (ncclSystemError for a timeout or a broken connection, ncclInvalidUsage when aborted).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace braid::net {

using Clock = std::chrono::steady_clock;

/// An IPv4 or IPv6 socket address (port included).
class SocketAddress {
 public:
  SocketAddress() = default;
  /// From a sockaddr of family AF_INET or AF_INET6.
  static SocketAddress fromSockaddr(const sockaddr* sa);
  /// Parses "1.2.3.4:5", "[::1]:5" or "hostname:5" (resolved). Throws ncclInvalidArgument.
  static SocketAddress parse(const std::string& text);

  int family() const { return storage_.ss_family; }
  uint16_t port() const;
  void setPort(uint16_t port);
  const sockaddr* sockaddrPtr() const { return reinterpret_cast<const sockaddr*>(&storage_); }
  socklen_t length() const;
  bool valid() const { return family() == AF_INET || family() == AF_INET6; }
  /// "1.2.3.4:5" or "[::1]:5".
  std::string toString() const;
  /// The address bytes (4 or 16) without the port, for subnet tests.
  const uint8_t* addressBytes() const;
  size_t addressSize() const { return family() == AF_INET6 ? 16 : 4; }

  /// Compact fixed-size form for wire messages and unique ids (28 bytes).
  struct Packed {
    uint16_t family;
    uint16_t port;  ///< host order
    uint32_t scopeId;
    uint8_t address[16];
    uint32_t reserved;
  };
  Packed pack() const;
  static SocketAddress unpack(const Packed& packed);

 private:
  sockaddr_storage storage_{};
};
static_assert(sizeof(SocketAddress::Packed) == 28);

/// What a wait watches to stop early: a flag (the bootstrap's), a communicator's abort word
/// (the transports'), or nothing. Either pointer converts to it.
class AbortSource {
 public:
  AbortSource(std::nullptr_t = nullptr) {}  // NOLINT: implicit, as a pointer would be
  AbortSource(const std::atomic<bool>* flag) : flag_(flag) {}  // NOLINT
  AbortSource(const uint32_t* word) : word_(word) {}  // NOLINT
  bool raised() const {
    return (flag_ != nullptr && flag_->load(std::memory_order_acquire)) ||
           (word_ != nullptr && __atomic_load_n(word_, __ATOMIC_ACQUIRE) != 0);
  }

 private:
  const std::atomic<bool>* flag_ = nullptr;
  const uint32_t* word_ = nullptr;
};

/// Throws unless `abort` is clear and `deadline` has not passed.
void checkWait(AbortSource abort, Clock::time_point deadline, const char* what);

/// An owned socket file descriptor.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }

  /// A listening socket bound to `address` (port 0 picks a free port; see localAddress()).
  static Socket listen(const SocketAddress& address, int backlog = 256);
  /// Connects, retrying refused connections until the deadline (the peer may not listen yet).
  /// `whileWaiting`, when given, runs about every millisecond until the connection is made (a
  /// rank reads its own listening socket meanwhile: when every rank connects to others whose
  /// backlogs are full, none would otherwise accept). refusedIsFinal: a refused connection
  /// fails at once (ncclRemoteError, "refused"), for a peer known to have listened already.
  static Socket connect(const SocketAddress& address, Clock::time_point deadline, AbortSource abortFlag,
                        const std::function<void()>& whileWaiting = {}, bool refusedIsFinal = false);

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void close();
  SocketAddress localAddress() const;
  SocketAddress peerAddress() const;

  /// Accepts one connection if one is pending (non-blocking); an invalid Socket otherwise,
  /// with accept's errno in *error when asked (EAGAIN: none pending; EMFILE/ENFILE: out of
  /// descriptors, while the connection stays pending).
  Socket tryAccept(int* error = nullptr) const;
  /// Sends all bytes, waiting in poll slices. Throws on timeout, abort or a broken connection.
  void sendAll(const void* data, size_t size, Clock::time_point deadline, AbortSource abortFlag);
  /// Receives exactly size bytes (same rules; a closed peer is an error naming the peer).
  void recvAll(void* data, size_t size, Clock::time_point deadline, AbortSource abortFlag);
  /// Reads what is available without waiting: bytes read, 0 when nothing, -1 when the peer closed.
  ssize_t readSome(void* data, size_t size);
  /// Writes what fits without waiting: bytes written, 0 when nothing fits, -1 when the
  /// connection broke (errno says why).
  ssize_t writeSome(const void* data, size_t size);

 private:
  int fd_ = -1;
};

/// Sends `sendSize` bytes on `out` while receiving `recvSize` bytes on `in`, concurrently
/// (so that a ring of ranks exchanging large messages cannot deadlock on full buffers).
void exchange(Socket& out, const void* sendData, size_t sendSize, Socket& in, void* recvData, size_t recvSize,
              Clock::time_point deadline, AbortSource abortFlag);

}  // namespace braid::net
