#include "core/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "core/status.h"

namespace braid::net {

namespace {

constexpr int kPollSliceMs = 50;

void setNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    fail(ncclSystemError, "fcntl(O_NONBLOCK) failed: %s", strerror(errno));
  }
}

int remainingMs(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, kPollSliceMs));
}

}  // namespace

// ---- SocketAddress --------------------------------------------------------------------------

SocketAddress SocketAddress::fromSockaddr(const sockaddr* sa) {
  SocketAddress a;
  if (sa->sa_family == AF_INET) {
    std::memcpy(&a.storage_, sa, sizeof(sockaddr_in));
  } else if (sa->sa_family == AF_INET6) {
    std::memcpy(&a.storage_, sa, sizeof(sockaddr_in6));
  }
  return a;
}

SocketAddress SocketAddress::parse(const std::string& text) {
  std::string host;
  std::string port;
  if (!text.empty() && text[0] == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      fail(ncclInvalidArgument, "address '%s' is not of the form [ipv6]:port", text.c_str());
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      fail(ncclInvalidArgument, "address '%s' is not of the form host:port", text.c_str());
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  char* end = nullptr;
  const long portNumber = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || portNumber < 0 || portNumber > 65535) {
    fail(ncclInvalidArgument, "port '%s' in address '%s' is not a number in 0..65535", port.c_str(), text.c_str());
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    fail(ncclInvalidArgument, "cannot resolve host '%s' of address '%s': %s", host.c_str(), text.c_str(),
         gai_strerror(rc));
  }
  SocketAddress a = fromSockaddr(found->ai_addr);
  freeaddrinfo(found);
  a.setPort(static_cast<uint16_t>(portNumber));
  return a;
}

uint16_t SocketAddress::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_port);
  return 0;
}

void SocketAddress::setPort(uint16_t port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage_)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage_)->sin6_port = htons(port);
}

socklen_t SocketAddress::length() const {
  return family() == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

const uint8_t* SocketAddress::addressBytes() const {
  if (family() == AF_INET6) {
    return reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr);
  }
  return reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr);
}

std::string SocketAddress::toString() const {
  if (!valid()) return "(no address)";
  char host[INET6_ADDRSTRLEN] = {0};
  inet_ntop(family(), addressBytes(), host, sizeof(host));
  return family() == AF_INET6 ? "[" + std::string(host) + "]:" + std::to_string(port())
                              : std::string(host) + ":" + std::to_string(port());
}

SocketAddress::Packed SocketAddress::pack() const {
  Packed p{};
  p.family = static_cast<uint16_t>(family());
  p.port = port();
  std::memcpy(p.address, addressBytes(), addressSize());
  if (family() == AF_INET6) p.scopeId = reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_scope_id;
  return p;
}

SocketAddress SocketAddress::unpack(const Packed& p) {
  SocketAddress a;
  if (p.family == AF_INET) {
    sockaddr_in* in = reinterpret_cast<sockaddr_in*>(&a.storage_);
    in->sin_family = AF_INET;
    std::memcpy(&in->sin_addr, p.address, 4);
  } else if (p.family == AF_INET6) {
    sockaddr_in6* in6 = reinterpret_cast<sockaddr_in6*>(&a.storage_);
    in6->sin6_family = AF_INET6;
    std::memcpy(&in6->sin6_addr, p.address, 16);
    in6->sin6_scope_id = p.scopeId;
  } else {
    return a;  // invalid: family stays 0
  }
  a.setPort(p.port);
  return a;
}

// ---- Socket -----------------------------------------------------------------------------------

void checkWait(AbortSource abort, Clock::time_point deadline, const char* what) {
  if (abort.raised()) {
    fail(ncclInvalidUsage, "%s: aborted (ncclCommAbort was called, or the communicator failed)", what);
  }
  // ncclTimeout (NCCL 2.30): the wait ran out; a bootstrap or connection wait is one of Braid's expiries.
  if (Clock::now() >= deadline) fail(ncclTimeout, "%s: timed out", what);
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.release();
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Socket Socket::listen(const SocketAddress& address, int backlog) {
  Socket s(::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) fail(ncclSystemError, "socket() failed: %s", strerror(errno));
  const int one = 1;
  setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(s.fd(), address.sockaddrPtr(), address.length()) != 0) {
    fail(ncclSystemError, "cannot listen on %s: bind: %s", address.toString().c_str(), strerror(errno));
  }
  if (::listen(s.fd(), backlog) != 0) {
    fail(ncclSystemError, "cannot listen on %s: %s", address.toString().c_str(), strerror(errno));
  }
  setNonBlocking(s.fd());
  return s;
}

Socket Socket::connect(const SocketAddress& address, Clock::time_point deadline, AbortSource abortFlag,
                       const std::function<void()>& whileWaiting, bool refusedIsFinal) {
  const int slice = whileWaiting ? 1 : -1;  // (ms a poll waits before whileWaiting runs; -1: the deadline)
  const std::string what = "connect to " + address.toString();
  for (int attempt = 0;; ++attempt) {
    checkWait(abortFlag, deadline, what.c_str());
    Socket s(::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!s.valid()) fail(ncclSystemError, "socket() failed: %s", strerror(errno));
    setNonBlocking(s.fd());
    int rc = ::connect(s.fd(), address.sockaddrPtr(), address.length());
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{s.fd(), POLLOUT, 0};
      for (;;) {
        const int left = remainingMs(deadline);
        if ((rc = ::poll(&p, 1, slice < 0 ? left : std::min(slice, left))) != 0) break;
        checkWait(abortFlag, deadline, what.c_str());
        if (whileWaiting) whileWaiting();
      }
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc == 0) {
      const int one = 1;
      setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return s;
    }
    if (errno == ECONNREFUSED && refusedIsFinal) fail(ncclRemoteError, "%s: refused", what.c_str());
    if (errno != ECONNREFUSED && errno != ETIMEDOUT && errno != ECONNRESET && errno != EAGAIN) {
      fail(ncclSystemError, "%s failed: %s", what.c_str(), strerror(errno));
    }
    // The peer is not listening yet: back off a little and retry until the deadline.
    const auto retryAt = Clock::now() + std::chrono::milliseconds(std::min(100, 1 + attempt * 10));
    do {
      if (whileWaiting) whileWaiting();
      std::this_thread::sleep_for(std::chrono::milliseconds(whileWaiting ? 1 : std::min(100, 1 + attempt * 10)));
    } while (Clock::now() < retryAt);
  }
}

SocketAddress Socket::localAddress() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  return SocketAddress::fromSockaddr(reinterpret_cast<sockaddr*>(&ss));
}

SocketAddress Socket::peerAddress() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getpeername(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  return SocketAddress::fromSockaddr(reinterpret_cast<sockaddr*>(&ss));
}

Socket Socket::tryAccept(int* error) const {
  const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    if (error != nullptr) *error = errno == EWOULDBLOCK ? EAGAIN : errno;
    return Socket();
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return Socket(fd);
}

ssize_t Socket::readSome(void* data, size_t size) {
  const ssize_t n = ::recv(fd_, data, size, MSG_DONTWAIT);
  if (n > 0) return n;
  if (n == 0) return -1;
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
  return -1;
}

ssize_t Socket::writeSome(const void* data, size_t size) {
  const ssize_t n = ::send(fd_, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n >= 0) return n;
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
  return -1;
}

void Socket::sendAll(const void* data, size_t size, Clock::time_point deadline, AbortSource abortFlag) {
  Socket none;
  exchange(*this, data, size, none, nullptr, 0, deadline, abortFlag);
}

void Socket::recvAll(void* data, size_t size, Clock::time_point deadline, AbortSource abortFlag) {
  Socket none;
  exchange(none, nullptr, 0, *this, data, size, deadline, abortFlag);
}

void exchange(Socket& out, const void* sendData, size_t sendSize, Socket& in, void* recvData, size_t recvSize,
              Clock::time_point deadline, AbortSource abortFlag) {
  size_t sent = 0;
  size_t received = 0;
  const char* src = static_cast<const char*>(sendData);
  char* dst = static_cast<char*>(recvData);
  while (sent < sendSize || received < recvSize) {
    pollfd fds[2];
    int n = 0;
    if (sent < sendSize) fds[n++] = {out.fd(), POLLOUT, 0};
    if (received < recvSize) fds[n++] = {in.fd(), POLLIN, 0};
    const int rc = ::poll(fds, n, remainingMs(deadline));
    if (rc < 0 && errno != EINTR) fail(ncclSystemError, "poll failed: %s", strerror(errno));
    if (rc <= 0) {
      checkWait(abortFlag, deadline, sent < sendSize ? "socket send" : "socket receive");
      continue;
    }
    for (int i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      if (fds[i].fd == out.fd() && sent < sendSize && (fds[i].events & POLLOUT)) {
        const ssize_t w = out.writeSome(src + sent, sendSize - sent);
        if (w < 0) fail(ncclRemoteError, "send to %s failed: %s", out.peerAddress().toString().c_str(), strerror(errno));
        sent += static_cast<size_t>(w);
      } else if (fds[i].fd == in.fd() && received < recvSize) {
        const ssize_t r = in.readSome(dst + received, recvSize - received);
        if (r < 0) {
          fail(ncclRemoteError, "connection from %s closed after %zu of %zu bytes",
               in.peerAddress().toString().c_str(), received, recvSize);
        }
        received += static_cast<size_t>(r);
      }
    }
    if (sent < sendSize || received < recvSize) checkWait(abortFlag, deadline, "socket exchange");
  }
}

}  // namespace braid::net
