// One-sided links made on first use and bounded by maxP2pPeers
// (transport/net/one_sided_links.h), with every peer forced onto the links: a registration
// opens no connection, a rank that puts to one peer opens one socket, maxP2pPeers = 1 carries a
// ring and a rank that puts to more peers than that (its idle link is closed and reopened,
// and no wait on it fails), a fan-in beyond the bound is adopted (as NCCL, whose maxP2pPeers
// never fails a put) with every rank's links bounded, strangers on a
// listener do not stall the proxy, an abort or the timeout ends a connect that gets no answer,
// and the one-sided calls on a nonblocking communicator return ncclInProgress as NCCL's do.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "harness/ranks.h"
#include "rma_ranks.h"
#include "test_env.h"
#include "transport/net/one_sided_links.h"

using braid::test::expect;
using braid::test::rma::waitFor;
using braid::transport::onesided::Links;

namespace {

Links& linksOf(ncclComm_t comm) {
  auto* links = dynamic_cast<Links*>(braid::communicatorFrom(comm).oneSidedLinks());
  if (links == nullptr) throw std::runtime_error("no TCP one-sided links on this communicator");
  return *links;
}

/// Every rank here once this returns (an allreduce; its connections exist after the first).
void barrier(ncclComm_t comm) {
  int one = 1, sum = 0;
  EXPECT_OK(ncclAllReduce(&one, &sum, 1, ncclInt32, ncclSum, comm, nullptr));
}

/// This process's descriptors once they reach `expected` (a proxy closes what it drops on its
/// next pass), or what they were after two seconds.
int descriptorsSettleAt(int expected) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  int now = braid::test::openFileDescriptors();
  while (now != expected && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    now = braid::test::openFileDescriptors();
  }
  return now;
}

braid::test::rma::WindowSetup linkedSetup(size_t bytes, int maxPeers) {
  braid::test::rma::WindowSetup setup{1, bytes, false, true};
  setup.maxP2pPeers = maxPeers;
  return setup;
}

}  // namespace

TEST_CASE("one-sided links: made on first use, one socket for a rank that puts to one peer",
          "[integration][rma]") {
  for (const int n : {2, 3, 8}) {
    for (const bool threads : {true, false}) {
      INFO(n << " ranks as " << (threads ? "threads" : "processes"));
      CHECK(braid::test::rma::withWindows(
                n, threads, linkedSetup(4096, 0), [n, threads](int rank, ncclComm_t comm, ncclWindow_t win, char* window) {
                  // (what is wrong is said after the last barrier: a rank that left early would
                  // leave the others waiting in it)
                  std::string wrong;
                  auto note = [&wrong](bool ok, const std::string& what) {
                    if (!ok) wrong += what + "; ";
                  };
                  barrier(comm);
                  barrier(comm);
                  Links& links = linksOf(comm);
                  const int before = braid::test::openFileDescriptors();
                  note(links.outgoingOpen() == 0, "links were open after the registration");
                  barrier(comm);  // (every rank counted before the put)
                  const int value = 1234567;
                  if (rank == 0) EXPECT_OK(ncclPutSignal(&value, 1, ncclInt32, 1, win, 0, 0, 0, 0, comm, nullptr));
                  if (rank == 1) {
                    waitFor(comm, 0, 0, 1);
                    int got = 0;
                    std::memcpy(&got, window, sizeof got);
                    note(got == value, "the put's data: " + std::to_string(got));
                  }
                  if (!threads && rank <= 1) {  // a process: its own descriptors, one more each
                    const int after = descriptorsSettleAt(before + 1);
                    note(after == before + 1, std::to_string(before) + " descriptors before the put, " +
                                                  std::to_string(after) + " after");
                  }
                  barrier(comm);
                  if (!threads && rank > 1) {
                    const int after = descriptorsSettleAt(before);
                    note(after == before, "a rank that put nothing went from " + std::to_string(before) +
                                              " descriptors to " + std::to_string(after));
                  }
                  // (threads share the process's descriptors, which other work opens and closes:
                  // the links' own counts say it there)
                  note(links.outgoingOpen() == (rank == 0 ? 1 : 0) && links.incomingOpen() == (rank == 1 ? 1 : 0),
                       "links open: " + std::to_string(links.outgoingOpen()) + " outgoing, " +
                           std::to_string(links.incomingOpen()) + " incoming");
                  note(links.bound() == n - 1, "the bound: " + std::to_string(links.bound()));
                  barrier(comm);
                  expect(wrong.empty(), wrong);
                }) == "");
    }
  }
}

TEST_CASE("one-sided links: maxP2pPeers = 1 carries a ring", "[integration][rma]") {
  for (const int n : {3, 8}) {
    for (const bool threads : {true, false}) {
      INFO(n << " ranks as " << (threads ? "threads" : "processes"));
      CHECK(braid::test::rma::withWindows(
                n, threads, linkedSetup(4096, 1), [n](int rank, ncclComm_t comm, ncclWindow_t win, char* window) {
                  braid::test::rma::putAroundRing(rank, n, comm, win, window, 20);
                  Links& links = linksOf(comm);
                  expect(links.bound() == 1 && links.outgoingOpen() == 1 && links.incomingOpen() == 1,
                         "bound " + std::to_string(links.bound()) + ", open " + std::to_string(links.outgoingOpen()) +
                             " outgoing, " + std::to_string(links.incomingOpen()) + " incoming");
                  barrier(comm);
                }) == "");
    }
  }
}

TEST_CASE("one-sided links: beyond maxP2pPeers the idle link closes and reopens, no wait fails",
          "[integration][rma]") {
  for (const bool threads : {true, false}) {
    INFO((threads ? "threads" : "processes"));
    // Rank 0 puts to ranks 1 and 2 in turn with one link allowed: each put closes the other
    // link (a pause goodbye) and reopens its own; every byte arrives in order, the targets'
    // waits never see their origin as lost.
    CHECK(braid::test::rma::withWindows(
              3, threads, linkedSetup(4096, 1), [](int rank, ncclComm_t comm, ncclWindow_t win, char* window) {
                constexpr int kRounds = 12;
                if (rank == 0) {
                  for (int round = 0; round < kRounds; ++round) {
                    for (int peer = 1; peer <= 2; ++peer) {
                      const int value = round * 10 + peer;
                      EXPECT_OK(ncclPutSignal(&value, 1, ncclInt32, peer, win, 4 * round, 0, 0, 0, comm, nullptr));
                      expect(linksOf(comm).outgoingOpen() == 1,
                             "outgoing links open: " + std::to_string(linksOf(comm).outgoingOpen()));
                    }
                  }
                } else {
                  waitFor(comm, 0, 0, kRounds);
                  for (int round = 0; round < kRounds; ++round) {
                    int got = 0;
                    std::memcpy(&got, window + 4 * round, sizeof got);
                    expect(got == round * 10 + rank, "round " + std::to_string(round) + ": " + std::to_string(got));
                  }
                  expect(!linksOf(comm).lost(0), "the origin counted as lost: " + linksOf(comm).lostReason(0));
                }
                barrier(comm);
              }) == "");
  }
}

TEST_CASE("one-sided links: a fan-in beyond maxP2pPeers is adopted, exact, with links and descriptors bounded",
          "[integration][rma]") {
  // Every rank puts to rank 0 in rounds (a fan-in of 7 with one or two links allowed); rank 0
  // waits for each round, then signals every origin, whose next round waits for that. As in
  // NCCL, maxP2pPeers never fails a put: rank 0 adopts one link per origin, and each rank's
  // outgoing links stay within the bound (rank 0's to its origins close and reopen).
  constexpr int kRanks = 8, kRounds = 10;
  for (const int maxPeers : {1, 2}) {
    for (const bool threads : {true, false}) {
      INFO("maxP2pPeers " << maxPeers << ", " << (threads ? "threads" : "processes"));
      CHECK(braid::test::rma::withWindows(
                kRanks, threads, linkedSetup(4096, maxPeers),
                [maxPeers, threads](int rank, ncclComm_t comm, ncclWindow_t win, char* window) {
                  std::string wrong;
                  auto note = [&wrong](bool ok, const std::string& what) {
                    if (!ok) wrong += what + "; ";
                  };
                  barrier(comm);
                  Links& links = linksOf(comm);
                  const int before = braid::test::openFileDescriptors();
                  for (int round = 0; round < kRounds; ++round) {
                    if (rank == 0) {
                      for (int from = 1; from < kRanks; ++from) waitFor(comm, from, 0, 1);
                      for (int to = 1; to < kRanks; ++to) EXPECT_OK(ncclSignal(to, 0, 0, 0, comm, nullptr));
                      note(links.outgoingOpen() <= maxPeers,
                           "rank 0's outgoing links: " + std::to_string(links.outgoingOpen()));
                    } else {
                      const int value = round * 100 + rank;
                      EXPECT_OK(ncclPutSignal(&value, 1, ncclInt32, 0, win, 4 * (rank * kRounds + round), 0, 0, 0,
                                              comm, nullptr));
                      waitFor(comm, 0, 0, 1);
                    }
                  }
                  if (rank == 0) {
                    for (int from = 1; from < kRanks; ++from) {
                      for (int round = 0; round < kRounds; ++round) {
                        int got = 0;
                        std::memcpy(&got, window + 4 * (from * kRounds + round), sizeof got);
                        note(got == round * 100 + from, "rank " + std::to_string(from) + "'s round " +
                                                            std::to_string(round) + ": " + std::to_string(got));
                      }
                    }
                  }
                  // Counters: rank 0 took every origin's puts, each origin rank 0's signals.
                  const uint64_t arrived = links.arrivals();
                  note(arrived == (rank == 0 ? uint64_t{kRounds} * (kRanks - 1) : uint64_t{kRounds}),
                       "rank " + std::to_string(rank) + " counted " + std::to_string(arrived) + " arrivals");
                  // The bound each way: outgoing within maxP2pPeers, incoming one per origin.
                  const int incomingMost = rank == 0 ? kRanks - 1 : 1;
                  note(links.bound() == maxPeers && links.outgoingOpen() <= maxPeers &&
                           links.incomingOpen() <= incomingMost,
                       "rank " + std::to_string(rank) + ": bound " + std::to_string(links.bound()) + ", " +
                           std::to_string(links.outgoingOpen()) + " outgoing, " +
                           std::to_string(links.incomingOpen()) + " incoming");
                  if (!threads) {  // a process: its own descriptors, one per open link at most
                    const int after = braid::test::openFileDescriptors();
                    note(after <= before + maxPeers + incomingMost,
                         "rank " + std::to_string(rank) + ": " + std::to_string(before) + " descriptors before, " +
                             std::to_string(after) + " after");
                  }
                  barrier(comm);
                  expect(wrong.empty(), wrong);
                }) == "");
    }
  }
}

TEST_CASE("one-sided links: strangers on a listener do not stall its proxy, and are dropped",
          "[integration][rma]") {
  CHECK(braid::test::rma::withWindows(
            2, true, linkedSetup(4096, 0), [](int rank, ncclComm_t comm, ncclWindow_t win, char* window) {
              std::vector<int> strangers;
              if (rank == 0) {
                // 20 connections that say nothing and one whose hello is garbage, before the
                // real link: more than the proxy reads at once.
                const braid::net::SocketAddress at = linksOf(comm).listenAddress();
                for (int i = 0; i < 21; ++i) {
                  const int fd = ::socket(at.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
                  expect(::connect(fd, at.sockaddrPtr(), at.length()) == 0, "connect to the listener");
                  if (i == 20) {
                    std::vector<char> junk(104, 'x');
                    expect(::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL) == 104, "send junk");
                  }
                  strangers.push_back(fd);
                }
              }
              barrier(comm);
              const auto start = std::chrono::steady_clock::now();
              const int value = 77;
              if (rank == 0) EXPECT_OK(ncclPutSignal(&value, 1, ncclInt32, 1, win, 0, 0, 0, 0, comm, nullptr));
              if (rank == 1) {
                waitFor(comm, 0, 0, 1);
                expect(window[0] == 77, "the put's data");
                expect(std::chrono::steady_clock::now() - start < std::chrono::seconds(3),
                       "the real link waited behind the strangers");
              }
              if (rank == 0) {  // every stranger's connection ends: dropped, or after 5 s without a hello
                const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
                for (const int fd : strangers) {
                  char c;
                  ssize_t got = -1;
                  while (std::chrono::steady_clock::now() < until) {
                    got = ::recv(fd, &c, 1, MSG_DONTWAIT);
                    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) break;
                    std::this_thread::sleep_for(std::chrono::milliseconds(20));
                  }
                  expect(got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK),
                         "a stranger's connection was kept open");
                  ::close(fd);
                }
              }
              barrier(comm);
            }) == "");
}

TEST_CASE("one-sided links: an abort, or the timeout, ends a connect that gets no answer", "[integration][rma]") {
  // Rank 1's listener (made here) takes connections into its backlog and never answers: the
  // origin's hello goes out, its verdict never comes.
  using namespace braid::transport::onesided;
  for (const bool abort : {true, false}) {
    INFO((abort ? "abort" : "timeout"));
    braid::net::SocketAddress loopback = braid::net::SocketAddress::parse("127.0.0.1:0");
    braid::net::Socket silent = braid::net::Socket::listen(loopback, 4);
    braid::net::Socket mine = braid::net::Socket::listen(loopback, 4);
    std::vector<Invitation> invitations(2);
    invitations[0] = Invitation{mine.localAddress().pack(), 0, 1};
    invitations[1] = Invitation{silent.localAddress().pack(), 0, 2};
    uint32_t abortWord = 0;
    ncclResult_t code = ncclSuccess;
    std::string text;
    const auto start = std::chrono::steady_clock::now();
    {
      Links links(0, 2, 1, 42, &abortWord, [](int, int) {});
      links.start(std::move(mine), invitations, {false, true}, std::chrono::seconds(abort ? 30 : 1));
      std::thread aborter([&] {
        if (!abort) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        __atomic_store_n(&abortWord, 1, __ATOMIC_RELEASE);
      });
      try {
        links.signal(1, 0);
      } catch (const braid::Error& e) {
        code = e.code();
        text = e.what();
      }
      aborter.join();
      CHECK(links.outgoingOpen() == 0);
    }
    const auto took = std::chrono::steady_clock::now() - start;
    INFO(text);
    CHECK(took < std::chrono::seconds(5));
    if (abort) {
      CHECK(code == ncclInvalidUsage);
      CHECK(text.find("aborted while connecting to rank 1") != std::string::npos);
    } else {
      CHECK(code == ncclTimeout);
      CHECK(text.find("cannot open the one-sided link to rank 1") != std::string::npos);
    }
  }
}

TEST_CASE("one-sided calls on a nonblocking communicator return ncclInProgress, as NCCL's",
          "[integration][rma]") {
  for (const bool overLinks : {false, true}) {
    INFO((overLinks ? "over links" : "in memory"));
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    auto body = [id, overLinks](int rank) {
      using braid::test::settle;
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      ncclComm_t comm = nullptr;
      ncclResult_t r = ncclCommInitRankConfig(&comm, 2, id, rank, &config);
      expect(r == ncclSuccess || r == ncclInProgress, "init: " + std::to_string(r));
      expect(settle(comm) == ncclSuccess, "init settled");
      if (overLinks) braid::communicatorFrom(comm).setOneSidedOverNetwork(true);
      void* buffer = nullptr;
      EXPECT_OK(ncclMemAlloc(&buffer, 4096));
      std::memset(buffer, 0, 4096);
      ncclWindow_t win = nullptr;
      r = ncclCommWindowRegister(comm, buffer, 4096, &win, NCCL_WIN_DEFAULT);
      expect((r == ncclSuccess || r == ncclInProgress) && settle(comm) == ncclSuccess, "register: " + std::to_string(r));
      const int peer = 1 - rank, value = 500 + rank;
      r = ncclPutSignal(&value, 1, ncclInt32, peer, win, 0, 0, 0, 0, comm, nullptr);
      expect(r == ncclInProgress, "ncclPutSignal returned " + std::to_string(r));
      expect(settle(comm) == ncclSuccess, "the put settled");
      ncclWaitSignalDesc_t d = {1, peer, 0, 0};
      r = ncclWaitSignal(1, &d, comm, nullptr);
      expect(r == ncclInProgress, "ncclWaitSignal returned " + std::to_string(r));
      expect(settle(comm) == ncclSuccess, "the wait settled");
      int got = 0;
      std::memcpy(&got, buffer, sizeof got);
      expect(got == 500 + peer, "the put's data: " + std::to_string(got));
      // A wait that cannot end yet: the next call is refused while it runs, as NCCL refuses a
      // communicator still in progress.
      if (rank == 0) {
        d = {1, peer, 0, 0};
        r = ncclWaitSignal(1, &d, comm, nullptr);
        expect(r == ncclInProgress, "the second wait returned " + std::to_string(r));
        r = ncclSignal(peer, 0, 0, 0, comm, nullptr);
        expect(r == ncclInvalidUsage && std::string(ncclGetLastError(comm)).find("still in progress") != std::string::npos,
               "a call during the wait: " + std::to_string(r) + ": " + ncclGetLastError(comm));
        r = ncclSignal(peer, 0, 1, 0, comm, nullptr);  // bad ctx: refused at once, nothing queued
        expect(r == ncclInvalidUsage || r == ncclInvalidArgument, "a bad ctx: " + std::to_string(r));
        expect(settle(comm) == ncclSuccess, "the second wait settled");  // (rank 1's signal below)
        r = ncclSignal(peer, 0, 0, 0, comm, nullptr);
        expect(r == ncclInProgress && settle(comm) == ncclSuccess, "rank 0's signal: " + std::to_string(r));
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        r = ncclSignal(peer, 0, 0, 0, comm, nullptr);
        expect(r == ncclInProgress && settle(comm) == ncclSuccess, "rank 1's signal: " + std::to_string(r));
        d = {1, peer, 0, 0};
        r = ncclWaitSignal(1, &d, comm, nullptr);
        expect(r == ncclInProgress && settle(comm) == ncclSuccess, "rank 1's wait: " + std::to_string(r));
      }
      r = ncclCommWindowDeregister(comm, win);
      expect((r == ncclSuccess || r == ncclInProgress) && settle(comm) == ncclSuccess, "deregister");
      EXPECT_OK(ncclCommDestroy(comm));
      EXPECT_OK(ncclMemFree(buffer));
    };
    CHECK(braid::test::runThreads(2, body) == "");
  }
}
