#include "core/fd_exchange.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "core/log.h"
#include "core/status.h"

namespace braid::fds {

namespace {

constexpr uint64_t kMagic = 0x6272616964666421ull;  // "braidfd!"

struct Request {
  uint64_t magic;
  uint64_t token;
};
struct Reply {
  uint64_t magic;
  uint64_t token;
  int32_t found;
  int32_t pad;
};

/// The abstract socket address process `pid` serves on.
socklen_t serverAddress(int pid, sockaddr_un* a) {
  std::memset(a, 0, sizeof(*a));
  a->sun_family = AF_UNIX;
  const int n = std::snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "braid-fd-%d", pid);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

/// This process's offers and the thread that serves them (restarted in a forked child, which
/// inherits neither the thread nor, usefully, the parent's offers).
class Server {
 public:
  static Server& process() {
    static Server* server = new Server();  // never destroyed: its thread lives as long as the process
    return *server;
  }

  uint64_t offer(int fd) {
    std::lock_guard<std::mutex> lock(mutex_);
    startLocked();
    const int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (copy < 0) fail(ncclSystemError, "cannot duplicate file descriptor %d to offer it: %s", fd, strerror(errno));
    uint64_t token = 0;
    while (token == 0 || offers_.count(token) != 0) token = random_();
    offers_[token] = copy;
    return token;
  }

  void withdraw(uint64_t token) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pid_ != getpid()) return;  // (a forked child's inherited table is not its own)
    auto it = offers_.find(token);
    if (it == offers_.end()) return;
    close(it->second);
    offers_.erase(it);
  }

 private:
  Server() : random_(std::random_device{}()) {}

  void startLocked() {
    if (pid_ == getpid()) return;
    if (socket_ >= 0) close(socket_);  // a forked child: the parent's socket and offers are not ours
    for (auto& [token, fd] : offers_) close(fd);
    offers_.clear();
    pid_ = getpid();
    socket_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (socket_ < 0) fail(ncclSystemError, "cannot create the descriptor-passing socket: %s", strerror(errno));
    sockaddr_un a;
    const socklen_t len = serverAddress(pid_, &a);
    if (bind(socket_, reinterpret_cast<sockaddr*>(&a), len) != 0) {
      const int err = errno;
      close(socket_);
      socket_ = -1;
      pid_ = -1;
      fail(ncclSystemError, "cannot bind the descriptor-passing socket @braid-fd-%d: %s", getpid(), strerror(err));
    }
    std::thread([this, s = socket_] { serve(s); }).detach();
    BRAID_INFO(log::kInit, "serving file descriptors to other processes on @braid-fd-%d", pid_);
  }

  void serve(int s) {
    for (;;) {
      Request req{};
      sockaddr_un from{};
      socklen_t fromLen = sizeof(from);
      const ssize_t got = recvfrom(s, &req, sizeof(req), 0, reinterpret_cast<sockaddr*>(&from), &fromLen);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) return;  // (closed in a forked child's restart: that thread is not running there)
      if (got != sizeof(req) || req.magic != kMagic) continue;
      Reply reply{kMagic, req.token, 0, 0};
      int fd = -1;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = offers_.find(req.token);
        if (it != offers_.end()) fd = it->second;
        reply.found = fd >= 0 ? 1 : 0;
        // Sent under the lock, so that a withdraw cannot close fd while it is being passed.
        iovec iov{&reply, sizeof(reply)};
        alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
        msghdr msg{};
        msg.msg_name = &from;
        msg.msg_namelen = fromLen;
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        if (fd >= 0) {
          msg.msg_control = control;
          msg.msg_controllen = sizeof(control);
          cmsghdr* c = CMSG_FIRSTHDR(&msg);
          c->cmsg_level = SOL_SOCKET;
          c->cmsg_type = SCM_RIGHTS;
          c->cmsg_len = CMSG_LEN(sizeof(int));
          std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
        }
        sendmsg(s, &msg, MSG_NOSIGNAL);  // (a requester gone meanwhile: nothing to do)
      }
    }
  }

  std::mutex mutex_;
  std::mt19937_64 random_;
  std::map<uint64_t, int> offers_;
  int pid_ = -1;
  int socket_ = -1;
};

}  // namespace

uint64_t offer(int fd) { return Server::process().offer(fd); }

void withdraw(uint64_t token) { Server::process().withdraw(token); }

int fetch(int ownerPid, uint64_t token, std::chrono::milliseconds timeout) {
  const int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) fail(ncclSystemError, "cannot create a socket to fetch a descriptor: %s", strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{s};
  sa_family_t family = AF_UNIX;  // autobind: the kernel gives it an abstract name to be answered at
  if (bind(s, reinterpret_cast<sockaddr*>(&family), sizeof(family)) != 0) {
    fail(ncclSystemError, "cannot bind a socket to fetch a descriptor: %s", strerror(errno));
  }
  sockaddr_un to;
  const socklen_t toLen = serverAddress(ownerPid, &to);
  const Request req{kMagic, token};
  if (sendto(s, &req, sizeof(req), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&to), toLen) != sizeof(req)) {
    fail(ncclSystemError, "process %d does not serve file descriptors (@braid-fd-%d: %s): it has exited, or it is in "
                          "another network namespace", ownerPid, ownerPid, strerror(errno));
  }
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    pollfd p{s, POLLIN, 0};
    const int ready = left.count() > 0 ? poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) fail(ncclSystemError, "process %d did not pass the file descriptor asked for within %lld ms", ownerPid,
                         static_cast<long long>(timeout.count()));
    Reply reply{};
    iovec iov{&reply, sizeof(reply)};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t got = recvmsg(s, &msg, MSG_CMSG_CLOEXEC);
    if (got < 0 && errno == EINTR) continue;
    int fd = -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
    }
    if (got != sizeof(reply) || reply.magic != kMagic || reply.token != token) {  // not our answer
      if (fd >= 0) close(fd);
      continue;
    }
    if (reply.found == 0 || fd < 0) {
      if (fd >= 0) close(fd);
      fail(ncclSystemError, "process %d has no file descriptor offered under the token asked for (withdrawn?)", ownerPid);
    }
    return fd;
  }
}

}  // namespace braid::fds
