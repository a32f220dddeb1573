#include "core/fd_exchange.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <thread>

#include "core/log.h"
#include "core/process.h"
#include "core/status.h"

namespace braid::fds {

namespace {

constexpr uint64_t kMagic = 0x6272616964666422ull;  // "braidfd\"" (the 128-bit token's format)

struct Request {
  uint64_t magic;
  Token token;
};
static_assert(sizeof(Request) == 24);

enum class Answer : int32_t { kNotFound = 0, kFound = 1, kRefused = 2 };
struct Reply {
  uint64_t magic;
  Token token;
  Answer answer;
  int32_t pad;
};

/// The abstract socket address of the server with id `server`.
socklen_t serverAddress(uint64_t server, sockaddr_un* a) {
  std::memset(a, 0, sizeof(*a));
  a->sun_family = AF_UNIX;
  const int n = std::snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "braid-fd-%016llx",
                              static_cast<unsigned long long>(server));
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

/// Sends `reply` (with `fd` as SCM_RIGHTS when >= 0) to `to` without waiting: a requester whose
/// queue is full loses it.
void sendReply(int s, const sockaddr_un& to, socklen_t toLen, Reply reply, int fd) {
  iovec iov{&reply, sizeof(reply)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_name = const_cast<sockaddr_un*>(&to);
  msg.msg_namelen = toLen;
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
  sendmsg(s, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);  // (gone, or not reading: nothing to do)
}

/// One datagram as the server received it: its bytes (size: the real size, even when larger
/// than the buffer), the sender's address and credentials.
struct Received {
  alignas(8) unsigned char data[64];
  size_t size = 0;
  sockaddr_un from{};
  socklen_t fromLen = 0;
  bool hasCreds = false;
  ucred creds{};
};

/// Receives one datagram on `s`; false when the socket is gone. The first descriptor passed
/// along goes to *passed (when not null, else closed: -1 when none), any other is closed.
bool receive(int s, Received* r, int* passed) {
  if (passed != nullptr) *passed = -1;
  for (;;) {
    iovec iov{r->data, sizeof(r->data)};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred)) + CMSG_SPACE(4 * sizeof(int))] = {};
    msghdr msg{};
    msg.msg_name = &r->from;
    msg.msg_namelen = sizeof(r->from);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t got = recvmsg(s, &msg, MSG_TRUNC | MSG_CMSG_CLOEXEC);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return false;  // (closed in a forked child's restart: that thread is not running there)
    r->size = static_cast<size_t>(got);
    r->fromLen = msg.msg_namelen;
    r->hasCreds = false;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET) continue;
      if (c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len >= CMSG_LEN(sizeof(ucred))) {
        std::memcpy(&r->creds, CMSG_DATA(c), sizeof(ucred));
        r->hasCreds = true;
      } else if (c->cmsg_type == SCM_RIGHTS) {
        const size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; ++i) {
          int fd = -1;
          std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
          if (passed != nullptr && *passed < 0) {
            *passed = fd;
          } else {
            close(fd);
          }
        }
      }
    }
    return true;
  }
}

/// This process's offers and the thread that serves them (restarted in a forked child, which
/// inherits neither the thread nor, usefully, the parent's offers).
class Server {
 public:
  static Server& process() {
    static Server* server = [] {
      auto* created = new Server();  // never destroyed: its thread lives as long as the process
      // A forked child may inherit the lock held by the parent's serving thread: a fresh one.
      pthread_atfork(nullptr, nullptr, [] { new (&process().mutex_) std::mutex(); });
      return created;
    }();
    return *server;
  }

  uint64_t id() {
    std::lock_guard<std::mutex> lock(mutex_);
    return idLocked();
  }

  Offer offer(int fd) {
    std::lock_guard<std::mutex> lock(mutex_);
    startLocked();
    const int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (copy < 0) fail(ncclSystemError, "cannot duplicate file descriptor %d to offer it: %s", fd, strerror(errno));
    Offer o{id_, {{0, 0}}, static_cast<int32_t>(pid_), 0};
    try {
      while (o.token.empty() || offers_.count(o.token) != 0) process::randomBytes(&o.token, sizeof(o.token));
    } catch (...) {
      close(copy);
      throw;
    }
    offers_[o.token] = copy;
    return o;
  }

  void withdraw(const Token& token) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pid_ != getpid()) return;  // (a forked child's inherited table is not its own)
    auto it = offers_.find(token);
    if (it == offers_.end()) return;
    close(it->second);
    offers_.erase(it);
  }

 private:
  Server() = default;

  /// The id, drawn again when this is a forked child; under mutex_.
  uint64_t idLocked() {
    if (idPid_ != getpid()) {
      id_ = 0;
      while (id_ == 0) process::randomBytes(&id_, sizeof(id_));
      idPid_ = getpid();
    }
    return id_;
  }

  void startLocked() {
    if (pid_ == getpid()) return;
    if (socket_ >= 0) close(socket_);  // a forked child: the parent's socket and offers are not ours
    for (auto& [token, fd] : offers_) close(fd);
    offers_.clear();
    idLocked();
    socket_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (socket_ < 0) fail(ncclSystemError, "cannot create the descriptor-passing socket: %s", strerror(errno));
    const int on = 1;
    sockaddr_un a;
    const socklen_t len = serverAddress(id_, &a);
    if (setsockopt(socket_, SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)) != 0 ||
        bind(socket_, reinterpret_cast<sockaddr*>(&a), len) != 0) {
      const int err = errno;
      close(socket_);
      socket_ = -1;
      fail(ncclSystemError, "cannot set up the descriptor-passing socket @braid-fd-%016llx: %s",
           static_cast<unsigned long long>(id_), strerror(err));
    }
    pid_ = getpid();
    std::thread([this, s = socket_] { serve(s); }).detach();
    BRAID_INFO(log::kInit, "serving file descriptors to other processes on @braid-fd-%016llx",
               static_cast<unsigned long long>(id_));
  }

  void serve(int s) {
    const uint32_t self = static_cast<uint32_t>(getuid());  // (SCM_CREDENTIALS carries the real uid)
    Received r;
    while (receive(s, &r, nullptr)) {
      Token token{};
      if (r.size > sizeof(r.data) || !parseRequest(r.data, r.size, &token)) continue;  // not a request of ours
      Reply reply{kMagic, token, Answer::kNotFound, 0};
      if (!r.hasCreds || !peerAllowed(r.creds.uid, self)) {
        refused(r, self);
        reply.answer = Answer::kRefused;
        sendReply(s, r.from, r.fromLen, reply, -1);
        continue;
      }
      int fd = -1;
      {
        // A duplicate, so that a withdraw meanwhile cannot close the descriptor being passed.
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = offers_.find(token);
        if (it != offers_.end()) fd = fcntl(it->second, F_DUPFD_CLOEXEC, 0);
      }
      reply.answer = fd >= 0 ? Answer::kFound : Answer::kNotFound;
      sendReply(s, r.from, r.fromLen, reply, fd);
      if (fd >= 0) close(fd);
    }
  }

  /// Logs a refused request: the first as a warning, later ones at INFO (a flood stays quiet).
  void refused(const Received& r, uint32_t self) {
    const long pid = r.hasCreds ? static_cast<long>(r.creds.pid) : -1;
    const long uid = r.hasCreds ? static_cast<long>(r.creds.uid) : -1;
    if (refusals_++ == 0) {
      BRAID_WARN("refused a file-descriptor request from pid %ld running as uid %ld: this process (uid %u) "
                 "answers only its own user and root", pid, uid, self);
    } else {
      BRAID_INFO(log::kInit, "refused a file-descriptor request from pid %ld running as uid %ld (uid %u here)", pid,
                 uid, self);
    }
  }

  std::mutex mutex_;
  std::map<Token, int> offers_;
  uint64_t id_ = 0;
  int idPid_ = -1;  // the process id_ was drawn in
  int pid_ = -1;    // the process the socket serves
  int socket_ = -1;
  uint64_t refusals_ = 0;  // (the serving thread's only)
};

/// The socket fetch() asks from: autobound (the kernel names it), passing credentials.
int fetchSocket() {
  const int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) fail(ncclSystemError, "cannot create a socket to fetch a descriptor: %s", strerror(errno));
  const int on = 1;
  sa_family_t family = AF_UNIX;  // autobind: the kernel gives it an abstract name to be answered at
  if (setsockopt(s, SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)) != 0 ||
      bind(s, reinterpret_cast<sockaddr*>(&family), sizeof(family)) != 0) {
    const int err = errno;
    close(s);
    fail(ncclSystemError, "cannot bind a socket to fetch a descriptor: %s", strerror(err));
  }
  return s;
}

}  // namespace

std::array<unsigned char, 24> encodeRequest(const Token& token) {
  static_assert(sizeof(Request) == 24);
  const Request req{kMagic, token};
  std::array<unsigned char, 24> out;
  std::memcpy(out.data(), &req, sizeof(req));
  return out;
}

bool parseRequest(const void* data, size_t size, Token* token) {
  if (size != sizeof(Request)) return false;
  Request req;
  std::memcpy(&req, data, sizeof(req));
  if (req.magic != kMagic || req.token.empty()) return false;
  *token = req.token;
  return true;
}

bool peerAllowed(uint32_t peerUid, uint32_t serverUid) { return peerUid == serverUid || peerUid == 0; }

uint64_t serverId() { return Server::process().id(); }

Offer offer(int fd) { return Server::process().offer(fd); }

void withdraw(const Token& token) { Server::process().withdraw(token); }

int fetch(const Offer& from, std::chrono::milliseconds timeout) {
  const unsigned long long server = from.server;
  const int pid = from.pid;
  if (from.token.empty()) fail(ncclInvalidArgument, "fetch of a file descriptor of process %d with an empty token", pid);
  const int s = fetchSocket();
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{s};
  sockaddr_un to;
  const socklen_t toLen = serverAddress(from.server, &to);
  const auto req = encodeRequest(from.token);
  const auto until = std::chrono::steady_clock::now() + timeout;
  // Without waiting: a server whose queue is full (busy, or stuck) is asked again until the
  // timeout, never waited for past it.
  while (sendto(s, req.data(), req.size(), MSG_NOSIGNAL | MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&to), toLen) !=
         static_cast<ssize_t>(req.size())) {
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      fail(ncclSystemError, "process %d does not serve file descriptors (@braid-fd-%016llx: %s): it has exited, or it "
                            "is in another network namespace", pid, server, strerror(errno));
    }
    if (std::chrono::steady_clock::now() >= until) {
      fail(ncclSystemError, "process %d's file-descriptor server took no request within %lld ms (its queue is full)",
           pid, static_cast<long long>(timeout.count()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const uint32_t self = static_cast<uint32_t>(getuid());  // (SCM_CREDENTIALS carries the real uid)
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    pollfd p{s, POLLIN, 0};
    const int ready = left.count() > 0 ? poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) fail(ncclSystemError, "process %d did not pass the file descriptor asked for within %lld ms", pid,
                         static_cast<long long>(timeout.count()));
    Received r;
    int fd = -1;
    if (!receive(s, &r, &fd)) {
      fail(ncclSystemError, "cannot receive a file descriptor from process %d: %s", pid, strerror(errno));
    }
    Reply reply{};
    const bool ours = r.size == sizeof(reply) && r.hasCreds && peerAllowed(r.creds.uid, self);
    if (ours) std::memcpy(&reply, r.data, sizeof(reply));
    if (!ours || reply.magic != kMagic || reply.token != from.token) {  // not our answer
      if (fd >= 0) close(fd);
      continue;
    }
    if (reply.answer == Answer::kFound && fd >= 0) return fd;
    if (fd >= 0) close(fd);
    if (reply.answer == Answer::kRefused) {
      fail(ncclSystemError, "process %d refused to pass a file descriptor to this process (uid %u): it answers only "
                            "its own user and root", pid, self);
    }
    fail(ncclSystemError, "process %d has no file descriptor offered under the token asked for (withdrawn, or a wrong "
                          "token)", pid);
  }
}

}  // namespace braid::fds
