#include "harness/ranks.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "core/socket.h"

namespace braid::test {

namespace {

int countEntries(const char* dir) {
  int n = 0;
  if (DIR* d = opendir(dir)) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

/// Runs one rank's body; returns "" or the reason it failed.
std::string runBody(const RankBody& body, int rank) {
  try {
    body(rank);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
  return "";
}

}  // namespace

int openFileDescriptors() { return countEntries("/proc/self/fd") - 1; }  // minus opendir's own
int liveThreads() { return countEntries("/proc/self/task"); }

std::string runThreads(int n, const RankBody& body, std::chrono::seconds limit) {
  std::mutex mutex;
  std::condition_variable done;
  int finished = 0;
  std::vector<bool> running(n, true);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      const std::string error = runBody(body, r);
      std::lock_guard<std::mutex> lock(mutex);
      errors[r] = error;
      running[r] = false;
      ++finished;
      done.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mutex);
    if (!done.wait_for(lock, limit, [&] { return finished == n; })) {
      std::fprintf(stderr, "test harness: ranks still running after %lld s:", static_cast<long long>(limit.count()));
      for (int r = 0; r < n; ++r) {
        if (running[r]) std::fprintf(stderr, " %d", r);
      }
      std::fprintf(stderr, " (threads cannot be killed: ending the test process)\n");
      std::_Exit(1);
    }
  }
  for (auto& t : threads) t.join();
  std::string out;
  for (int r = 0; r < n; ++r) {
    if (!errors[r].empty()) out += "rank " + std::to_string(r) + " (thread): " + errors[r] + "\n";
  }
  return out;
}

std::string runProcesses(int n, const RankBody& body, std::chrono::seconds limit) {
  std::fflush(nullptr);
  std::vector<pid_t> pids(n, -1);
  std::vector<int> pipes(n, -1);
  for (int r = 0; r < n; ++r) {
    int fds[2];
    if (pipe(fds) != 0) return "pipe failed";
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      const std::string error = runBody(body, r);
      if (!error.empty() && write(fds[1], error.data(), error.size()) < 0) {
        // nothing more can be reported
      }
      close(fds[1]);
      std::_Exit(error.empty() ? 0 : 1);  // no static destructors: they belong to the parent
    }
    close(fds[1]);
    pids[r] = pid;
    pipes[r] = fds[0];
  }
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::vector<bool> reaped(n, false);
  int left = n;
  while (left > 0) {
    for (int r = 0; r < n; ++r) {
      if (reaped[r]) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        reaped[r] = true;
        --left;
        std::string error;
        char buffer[4096];
        ssize_t got;
        while ((got = read(pipes[r], buffer, sizeof(buffer))) > 0) error.append(buffer, static_cast<size_t>(got));
        close(pipes[r]);
        if (!WIFEXITED(status)) error += " (killed by signal " + std::to_string(WTERMSIG(status)) + ")";
        if (!error.empty() || WEXITSTATUS(status) != 0) {
          out += "rank " + std::to_string(r) + " (process): " + (error.empty() ? "exit status 1" : error) + "\n";
        }
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < n; ++r) {
        if (reaped[r]) continue;
        kill(pids[r], SIGKILL);
        waitpid(pids[r], nullptr, 0);
        close(pipes[r]);
        out += "rank " + std::to_string(r) + " (process): still running after " + std::to_string(limit.count()) +
               " s; killed\n";
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return out;
}

ncclResult_t settle(ncclComm_t comm) {
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress) {
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return ncclInternalError;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return state;
}

std::string runCommand(const std::string& command) {
  std::string out;
  FILE* p = popen(("( " + command + " ) 2>&1").c_str(), "r");
  if (p == nullptr) return "popen failed";
  char buffer[4096];
  size_t got;
  while ((got = fread(buffer, 1, sizeof(buffer), p)) > 0) out.append(buffer, got);
  pclose(p);
  return out;
}

int freeLoopbackPort() {
  // Below the kernel's ephemeral range: no outgoing connection and no port-0 listener can take
  // it between this probe and the program that binds it (a port-0 probe could collide so).
  int low = 32768, high = 60999;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  range >> low >> high;
  static std::mt19937 rng(std::random_device{}());
  const int first = 10000;
  for (int attempt = 0; attempt < 200 && low - first > 100; ++attempt) {
    const int port = first + static_cast<int>(rng() % static_cast<unsigned>(low - first));
    try {
      net::Socket probe = net::Socket::listen(net::SocketAddress::parse("127.0.0.1:" + std::to_string(port)));
      return port;
    } catch (...) {  // taken: try another
    }
  }
  net::Socket probe = net::Socket::listen(net::SocketAddress::parse("127.0.0.1:0"));
  return probe.localAddress().port();
}

std::string runBoth(int n, const std::function<RankBody()>& makeBody, std::chrono::seconds limit) {
  return runThreads(n, makeBody(), limit) + runProcesses(n, makeBody(), limit);
}

std::string withCommunicators(int n, const std::function<void(int rank, ncclComm_t comm, bool threads)>& body) {
  std::string failures;
  for (const bool threads : {true, false}) {
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess) return "ncclGetUniqueId failed: " + std::string(ncclGetLastError(nullptr));
    auto rankBody = [id, n, body, threads](int rank) {
      ncclComm_t comm = nullptr;
      EXPECT_OK(ncclCommInitRank(&comm, n, id, rank));
      body(rank, comm, threads);
      EXPECT_OK(ncclCommDestroy(comm));
    };
    failures += threads ? runThreads(n, rankBody) : runProcesses(n, rankBody);
  }
  return failures;
}

}  // namespace braid::test
