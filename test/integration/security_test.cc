// Who may talk to a job, and what a stranger's bytes can do to it: the communicator id reveals
// nothing, BRAID_COMM_SECRET keeps out ranks without it, messages after init need the root's
// session key, the root and a rank's listener survive floods and absurd registrations, and a
// stranger cannot make NCCL_DEBUG=ABORT kill the process.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "bootstrap/root.h"
#include "bootstrap/unique_id.h"
#include "comm/communicator.h"
#include "core/interfaces.h"
#include "core/log.h"
#include "harness/ranks.h"
#include "test_env.h"

using namespace braid;

namespace {

/// n ranks as threads, each with its own settings; the communicators are kept in `comms`.
std::vector<std::string> initAll(const std::vector<ncclUniqueId>& ids, const std::vector<comm::InitSettings>& settings,
                                 std::vector<std::unique_ptr<ncclComm>>* comms) {
  const int n = static_cast<int>(ids.size());
  std::vector<std::string> out(n);
  comms->clear();
  comms->resize(n);
  REQUIRE(test::runThreads(n, [&](int r) { out[r] = test::tryInit(ids[r], n, r, settings[r], &(*comms)[r]); }) == "");
  return out;
}

/// Two thread ranks of a fresh unique id (in *idOut when asked), initialised (the test stops
/// when they are not).
std::vector<std::unique_ptr<ncclComm>> twoRanks(const comm::InitSettings& settings, ncclUniqueId* idOut = nullptr) {
  const ncclUniqueId id = comm::makeUniqueId(settings);
  if (idOut != nullptr) *idOut = id;
  std::vector<std::unique_ptr<ncclComm>> comms;
  const auto results = initAll({id, id}, {settings, settings}, &comms);
  REQUIRE(results[0] == "");
  REQUIRE(results[1] == "");
  return comms;
}

int openDescriptors() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

double cpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

/// Runs body in a forked child; returns its exit status as waitpid reports it (body's return
/// value as the exit code). Bounded: the child is killed after `seconds`.
int inChild(int seconds, const std::function<int()>& body) {
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(static_cast<unsigned>(seconds));
    int code = 99;
    try {
      code = body();
    } catch (...) {
      code = 98;
    }
    _exit(code);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

}  // namespace

TEST_CASE("the communicator id is random: nothing of the unique id's secret", "[security]") {
  auto settings = test::loopbackSettings(10);
  settings.commIdEnv = "127.0.0.1:" + std::to_string(test::freeLoopbackPort());
  // NCCL_COMM_ID makes the secret a function of the address; two jobs at one address must
  // still get unrelated ids (the id appears in logs and in /dev/shm names).
  std::vector<uint64_t> hashes;
  for (int job = 0; job < 2; ++job) {
    const ncclUniqueId id = comm::makeUniqueId(settings);
    std::vector<std::unique_ptr<ncclComm>> comms;
    const auto results = initAll({id, id}, {settings, settings}, &comms);
    REQUIRE(results[0] == "");
    REQUIRE(results[1] == "");
    CHECK(comms[0]->identity().commHash == comms[1]->identity().commHash);
    const uint64_t secret = bootstrap::UniqueId::decode(id).secret;
    CHECK(comms[0]->identity().commHash != secret);
    CHECK(comms[0]->identity().commHash != (secret ^ hashString(bootstrap::UniqueId::decode(id).root.toString())));
    hashes.push_back(comms[0]->identity().commHash);
    // (the next job's rank 0 binds the same port: wait for this job's root to let it go)
    for (int i = 0; i < 500 && bootstrap::liveRoots() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(hashes[0] != hashes[1]);
}

TEST_CASE("BRAID_COMM_SECRET: a rank without the job's passphrase is refused", "[security]") {
  auto settings = test::loopbackSettings(2);
  settings.commIdEnv = "127.0.0.1:" + std::to_string(test::freeLoopbackPort());
  const ncclUniqueId id = comm::makeUniqueId(settings);
  auto withSecret = settings, intruder = settings;
  withSecret.commSecret = "open sesame";
  intruder.commSecret = "";  // knows the address (so the id), not the passphrase
  std::vector<std::unique_ptr<ncclComm>> comms;
  const auto start = std::chrono::steady_clock::now();
  auto results = initAll({id, id}, {withSecret, intruder}, &comms);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  CHECK_THAT(results[0], Catch::Contains("waited 2 s for rank 1 of 2") && Catch::Contains("BRAID_COMM_SECRET"));
  CHECK_THAT(results[1], Catch::Contains("rank 1 of 2 could not rendezvous at root"));

  settings.commIdEnv = "127.0.0.1:" + std::to_string(test::freeLoopbackPort());
  withSecret.commIdEnv = settings.commIdEnv;
  const ncclUniqueId id2 = comm::makeUniqueId(settings);
  results = initAll({id2, id2}, {withSecret, withSecret}, &comms);
  CHECK(results[0] == "");
  CHECK(results[1] == "");
}

TEST_CASE("after init, messages between ranks need the root's session key, not the id's secret", "[security]") {
  ncclUniqueId id;
  const auto comms = twoRanks(test::loopbackSettings(10), &id);
  // Someone who learnt the unique id (it is public under NCCL_COMM_ID) forges rank 0's message.
  const auto deadline = net::Clock::now() + std::chrono::seconds(5);
  {
    net::Socket forged = net::Socket::connect(comms[0]->bootstrap().peerAddress(1), deadline, nullptr);
    const int lie = 666;
    bootstrap::sendMessage(forged, bootstrap::UniqueId::decode(id).secret, bootstrap::MessageType::kPeer, 0, 9, &lie,
                           sizeof(lie), deadline, nullptr);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // (the forgery arrives first)
  const int value = 42;
  comms[0]->bootstrap().send(1, 9, &value, sizeof(value));
  int got = 0;
  comms[1]->bootstrap().recv(0, 9, &got, sizeof(got));
  CHECK(got == 42);
}

TEST_CASE("messages nothing waits for yet hold no connection, and their number is bounded", "[security]") {
  const auto comms = twoRanks(test::loopbackSettings(20));
  const int before = openDescriptors();
  constexpr int kEarly = 300;
  std::thread sender([&] {
    for (int i = 0; i < kEarly; ++i) comms[0]->bootstrap().send(1, 1000 + i, &i, sizeof(i));
    const int last = -1;
    comms[0]->bootstrap().send(1, 5000, &last, sizeof(last));
  });
  int got = 0;
  comms[1]->bootstrap().recv(0, 5000, &got, sizeof(got));  // queues the 300 before it
  sender.join();
  CHECK(got == -1);
  CHECK(openDescriptors() - before < 20);
  for (int i = kEarly - 1; i >= 0; --i) {
    comms[1]->bootstrap().recv(0, 1000 + i, &got, sizeof(got));
    REQUIRE(got == i);
  }

  // One more than the bound: the wait fails, naming the sender, instead of holding them all.
  comms[1]->bootstrap().limitUnexpected(100, size_t(1) << 20);
  const size_t n = 101;
  std::thread flood([&] {
    for (size_t i = 0; i < n; ++i) {
      try {
        comms[0]->bootstrap().send(1, 10000 + static_cast<uint32_t>(i), &i, 1);
      } catch (const Error&) {
        return;  // (rank 1 stopped listening)
      }
    }
  });
  std::string error;
  try {
    comms[1]->bootstrap().recv(0, 7, &got, sizeof(got));
  } catch (const Error& e) {
    error = e.what();
  }
  flood.join();
  CHECK_THAT(error, Catch::Contains("rank 1 holds 100 messages") && Catch::Contains("rank 0's message"));
}

TEST_CASE("the root refuses an absurd nranks before sizing anything by it", "[security]") {
  const auto settings = test::loopbackSettings(3);
  const ncclUniqueId id = comm::makeUniqueId(settings);
  const bootstrap::UniqueId decoded = bootstrap::UniqueId::decode(id);
  {
    bootstrap::Registration reg{};
    reg.nRanks = INT_MAX;
    reg.abiVersion = NCCL_VERSION_CODE;
    const auto deadline = net::Clock::now() + std::chrono::seconds(5);
    net::Socket s = net::Socket::connect(decoded.root, deadline, nullptr);
    bootstrap::sendMessage(s, decoded.secret, bootstrap::MessageType::kRegister, 0, 0, &reg, sizeof(reg), deadline,
                           nullptr);
  }
  const std::string r = test::tryInit(id, 2, 1, settings);
  CHECK_THAT(r, Catch::Contains("nranks=2147483647; a communicator has 1 to"));
  ncclComm_t comm = nullptr;
  CHECK(ncclCommInitRank(&comm, INT_MAX, id, 0) == ncclInvalidArgument);
  CHECK_THAT(ncclGetLastError(nullptr), Catch::Contains("nranks is 2147483647; Braid's communicators have at most"));
}

TEST_CASE("a flood of silent connections to the root: init still succeeds under ulimit -n 1024", "[security]") {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  const int status = inChild(60, [&] {
    rlimit low{1024, limit.rlim_max < 1024 ? limit.rlim_max : 1024};
    if (setrlimit(RLIMIT_NOFILE, &low) != 0) return 10;
    const auto settings = test::loopbackSettings(20);
    const ncclUniqueId id = comm::makeUniqueId(settings);
    const net::SocketAddress root = bootstrap::UniqueId::decode(id).root;
    // The flood comes from another process (whose descriptors are its own): 1100 connections
    // that never say a word, held open.
    int ready[2];
    if (pipe(ready) != 0) return 11;
    const pid_t flooder = fork();
    if (flooder == 0) {
      rlimit high{4096, 4096};
      setrlimit(RLIMIT_NOFILE, &high);  // (as root; else as many as it can)
      std::vector<net::Socket> held;
      for (int i = 0; i < 1100; ++i) {
        try {
          held.push_back(net::Socket::connect(root, net::Clock::now() + std::chrono::seconds(2), nullptr));
        } catch (const Error&) {
          break;
        }
      }
      const char one = 1;
      (void)!write(ready[1], &one, 1);
      pause();
      _exit(0);
    }
    char byte = 0;
    (void)!read(ready[0], &byte, 1);
    const double cpuBefore = cpuSeconds();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const double rootCpu = cpuSeconds() - cpuBefore;
    std::vector<std::unique_ptr<ncclComm>> comms(2);
    std::vector<std::string> results(2);
    test::runThreads(2, [&](int r) { results[r] = test::tryInit(id, 2, r, settings, &comms[r]); });
    kill(flooder, SIGKILL);
    waitpid(flooder, nullptr, 0);
    if (rootCpu > 0.5) return 12;  // spinning
    return results[0].empty() && results[1].empty() ? 0 : 13;
  });
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("a full listener closes silent strangers, never a peer whose message waits unread", "[security]") {
  net::Socket listening = net::Socket::listen(net::SocketAddress::parse("127.0.0.1:0"), 1024);
  const net::SocketAddress at = listening.localAddress();
  bootstrap::Listener listener(std::move(listening), 1234, "test listener");
  const auto deadline = net::Clock::now() + std::chrono::seconds(10);
  // More real messages than the listener holds, all sent before it reads any, then strangers.
  const int real = static_cast<int>(bootstrap::Listener::kMaxPending) + 40;
  std::vector<net::Socket> held;
  for (int i = 0; i < real; ++i) {
    held.push_back(net::Socket::connect(at, deadline, nullptr));
    bootstrap::sendMessage(held.back(), 1234, bootstrap::MessageType::kPeer, 0, static_cast<uint32_t>(i), &i,
                           sizeof(i), deadline, nullptr);
  }
  for (int i = 0; i < 40; ++i) held.push_back(net::Socket::connect(at, deadline, nullptr));
  std::vector<bool> seen(real, false);
  int got = 0;
  bootstrap::Message m;
  while (got < real && net::Clock::now() < deadline && listener.poll(200, &m)) {
    if (m.header.tag < static_cast<uint32_t>(real) && !seen[m.header.tag]) ++got, seen[m.header.tag] = true;
  }
  CHECK(got == real);
}

TEST_CASE("out of descriptors, a listener pauses accepting instead of spinning", "[security]") {
  const int status = inChild(30, [] {
    net::Socket listening = net::Socket::listen(net::SocketAddress::parse("127.0.0.1:0"));
    const net::SocketAddress at = listening.localAddress();
    bootstrap::Listener listener(std::move(listening), 1234, "test listener");
    std::vector<net::Socket> clients;
    for (int i = 0; i < 40; ++i) {
      clients.push_back(net::Socket::connect(at, net::Clock::now() + std::chrono::seconds(2), nullptr));
    }
    // Now leave this process no descriptor for accept: the connections wait in the backlog.
    const int used = openDescriptors();
    rlimit low{static_cast<rlim_t>(used + 2), static_cast<rlim_t>(used + 2)};
    if (setrlimit(RLIMIT_NOFILE, &low) != 0) return 10;
    const double before = cpuSeconds();
    bootstrap::Message m;
    const bool got = listener.poll(1000, &m);
    const double spent = cpuSeconds() - before;
    if (got) return 11;
    return spent < 0.3 ? 0 : 12;
  });
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("out of descriptors, choosing an interface says why instead of 'no interface matches'", "[security]") {
  const int status = inChild(30, [] {
    const int used = openDescriptors();
    rlimit low{static_cast<rlim_t>(used + 8), static_cast<rlim_t>(used + 8)};
    if (setrlimit(RLIMIT_NOFILE, &low) != 0) return 10;
    while (dup(2) >= 0) {
    }  // (every descriptor taken)
    try {
      net::chooseInterface(net::InterfaceRequest{});
    } catch (const Error& e) {
      const std::string text = e.what();
      return text.find("getifaddrs: Too many open files") != std::string::npos ? 0 : 11;
    }
    return 12;
  });
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("NCCL_DEBUG=ABORT does not let a stranger's connection kill the process", "[security]") {
  const int status = inChild(30, [] {
    log::Settings s;
    s.level = log::Level::Abort;
    s.file = "/dev/null";
    log::apply(s);
    const auto settings = test::loopbackSettings(1);
    const ncclUniqueId id = comm::makeUniqueId(settings);
    const auto deadline = net::Clock::now() + std::chrono::seconds(2);
    net::Socket junk = net::Socket::connect(bootstrap::UniqueId::decode(id).root, deadline, nullptr);
    const char text[] = "GET / HTTP/1.0\r\n\r\n";
    junk.sendAll(text, sizeof(text), deadline, nullptr);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // (the root reads and closes it)
    return 0;
  });
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("a rank's listener closes each connection as soon as its message is whole", "[security]") {
  // Messages a busy rank has not taken yet hold no descriptors: an AlltoAll's setup on 256 thread
  // ranks sends every rank 255 at once, and 256 x 255 connections held open would exhaust the
  // process's descriptors. (The root keeps its connections: it answers on them.)
  const uint64_t key = 0x1234;
  bootstrap::Listener listener(net::Socket::listen(net::SocketAddress::parse("127.0.0.1:0")), key, "test",
                               bootstrap::Listener::Replies::kClose);
  const int before = openDescriptors();
  const int n = 100;
  for (int i = 0; i < n; ++i) {
    const auto deadline = net::Clock::now() + std::chrono::seconds(5);
    net::Socket s = net::Socket::connect(listener.socket().localAddress(), deadline, nullptr);
    const int value = i;
    bootstrap::sendMessage(s, key, bootstrap::MessageType::kPeer, i, 7, &value, sizeof(value), deadline, nullptr);
  }  // (each sender has closed: only the listener's side is left)
  // One pass reads every connection: all messages complete, none returned yet but the first.
  bootstrap::Message m;
  REQUIRE(listener.poll(1000, &m));
  const int held = openDescriptors() - before;
  CHECK(held <= 2);
  int received = 1;
  while (received < n && listener.poll(100, &m)) ++received;
  CHECK(received == n);
  CHECK(!m.socket.valid());
}

namespace {

/// Checks that resident memory grew by less than `bound` (where that can be measured).
void checkGrowth(size_t grown, size_t bound) {
  INFO("resident memory grew by " << (grown >> 20) << " MiB");
  if (!test::kResidentMeaningful) {
    WARN("resident-memory bound not checked under AddressSanitizer (its quarantine keeps freed blocks resident)");
    return;
  }
  CHECK(grown < bound);
}

/// A stranger's connection with the right key: a header announcing `length` bytes of `type`,
/// then up to `send` bytes of payload, as far as the socket takes them without waiting.
net::Socket announce(const net::SocketAddress& at, uint64_t secret, bootstrap::MessageType type, uint32_t length,
                     size_t send = 0) {
  const auto deadline = net::Clock::now() + std::chrono::seconds(5);
  net::Socket s = net::Socket::connect(at, deadline, nullptr);
  const bootstrap::MessageHeader header{secret, type, 0, 0, length};
  s.sendAll(&header, sizeof(header), deadline, nullptr);
  const std::vector<char> bytes(send, 'x');
  for (size_t sent = 0; sent < send;) {
    const ssize_t n = s.writeSome(bytes.data() + sent, send - sent);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  return s;
}

}  // namespace

TEST_CASE("headers announcing 64 MiB cost the root nothing; a communicator still inits", "[security]") {
  // Under NCCL_COMM_ID the id's secret is a hash of the address: anyone who reaches the port
  // can present it. Before issue 41 each such header made the root allocate (and zero) the
  // announced 64 MiB at once: 30 of them took a process from 5 MB to 1.97 GB.
  const auto settings = test::loopbackSettings(20);
  const ncclUniqueId id = comm::makeUniqueId(settings);
  const bootstrap::UniqueId decoded = bootstrap::UniqueId::decode(id);
  const bootstrap::MessageType types[] = {bootstrap::MessageType::kRegister, bootstrap::MessageType::kBlock,
                                          bootstrap::MessageType::kRound, bootstrap::MessageType::kPeer,
                                          bootstrap::MessageType::kTable};
  const size_t before = test::residentBytes();
  std::vector<net::Socket> strangers;
  for (int i = 0; i < 30; ++i) {
    strangers.push_back(announce(decoded.root, decoded.secret, types[i % 5], 64u << 20, i % 3 == 0 ? 4096 : 0));
  }
  // A block within its bound, whose bytes never come, holds no more than what came.
  const uint32_t block = bootstrap::maxPayload(bootstrap::MessageType::kBlock);
  for (int i = 0; i < 10; ++i) strangers.push_back(announce(decoded.root, decoded.secret, bootstrap::MessageType::kBlock, block, 1000));
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // (the root reads every 100 ms)
  checkGrowth(test::residentBytes() - std::min(before, test::residentBytes()), size_t(64) << 20);
  std::vector<std::unique_ptr<ncclComm>> comms;
  const auto results = initAll({id, id}, {settings, settings}, &comms);
  CHECK(results[0] == "");
  CHECK(results[1] == "");
}

TEST_CASE("strangers who send the bytes they announce share a bounded budget; a real message still arrives",
          "[security]") {
  // Each announces 64 MiB and sends up to 6 MiB (as far as the sockets take them), 240 MiB in
  // all: the listener holds at most Listener::kPendingBudget of it (plus a little a connection,
  // and the oldest message under way), the rest waits in the kernel's socket buffers.
  const uint64_t key = 0x4242;
  bootstrap::Listener listener(net::Socket::listen(net::SocketAddress::parse("127.0.0.1:0"), 256), key, "test",
                               bootstrap::Listener::Replies::kClose);
  const net::SocketAddress at = listener.socket().localAddress();
  const size_t before = test::residentBytes();
  std::vector<net::Socket> strangers;
  bootstrap::Message m;
  for (int i = 0; i < 40; ++i) {
    strangers.push_back(announce(at, key, bootstrap::MessageType::kPeer, 64u << 20, size_t(2) << 20));
    listener.poll(0, &m);  // (reads what came: the senders' socket buffers empty into the listener's)
    for (int k = 0; k < 4; ++k) {
      const std::vector<char> more(size_t(1) << 20, 'y');
      (void)strangers.back().writeSome(more.data(), more.size());
      listener.poll(0, &m);
    }
  }
  const auto deadline = net::Clock::now() + std::chrono::seconds(5);
  {
    net::Socket real = net::Socket::connect(at, deadline, nullptr);
    const std::vector<char> text(1000, 'r');
    bootstrap::sendMessage(real, key, bootstrap::MessageType::kPeer, 3, 77, text.data(), 1000, deadline, nullptr);
  }
  bool got = false;
  while (!got && net::Clock::now() < deadline && listener.poll(100, &m)) got = m.header.tag == 77 && m.payload.size() == 1000;
  CHECK(got);
  checkGrowth(test::residentBytes() - std::min(before, test::residentBytes()), size_t(64) << 20);
}
