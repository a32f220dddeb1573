#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/log.h"
#include "core/params.h"
#include "test_env.h"

using namespace braid;
using braid::test::FakeEnv;
using braid::test::TempDir;

namespace {
std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
}  // namespace

TEST_CASE("subsystem masks: lists, ALL, inversion and unknown names", "[log]") {
  std::vector<std::string> problems;
  CHECK(log::parseSubsysMask("INIT", &problems) == log::kInit);
  CHECK(log::parseSubsysMask("init,net,Coll", &problems) == (log::kInit | log::kNet | log::kColl));
  CHECK(log::parseSubsysMask("ALL", &problems) == log::kAll);
  CHECK(log::parseSubsysMask("^COLL", &problems) == ~uint64_t(log::kColl));
  CHECK(log::parseSubsysMask("^ALL", &problems) == 0);
  CHECK(log::parseSubsysMask("BOOTSTRAP,RAS,PROFILE,REG,NVLS,PROXY,CALL,ALLOC,ENV,TUNING,GRAPH,SHM,P2P",
                             &problems) == 0xffec);
  CHECK(problems.empty());
  CHECK(log::parseSubsysMask("INIT,BOGUS", &problems) == log::kInit);
  REQUIRE(problems.size() == 1);
  CHECK_THAT(problems[0], Catch::Contains("BOGUS"));
}

TEST_CASE("NCCL_DEBUG_FILE expands %h and %p", "[log]") {
  CHECK(log::expandFileName("/tmp/nccl.%h.%p.log", "node7", 4242) == "/tmp/nccl.node7.4242.log");
  CHECK(log::expandFileName("100%%-%x-%", "h", 1) == "100%-%x-%");
}

TEST_CASE("settings come from the knobs; defaults are NCCL's", "[log]") {
  FakeEnv env;
  params::Store defaults(env.sources());
  log::Settings s = log::readSettings(defaults, "h", 1);
  CHECK(s.level == log::Level::None);
  CHECK(s.mask == (log::kInit | log::kBootstrap | log::kEnv));
  CHECK(s.file.empty());

  env.vars["NCCL_DEBUG"] = "trace";
  env.vars["NCCL_DEBUG_SUBSYS"] = "^INIT";
  env.vars["NCCL_DEBUG_FILE"] = "/tmp/x.%h.%p";
  params::Store store(env.sources());
  s = log::readSettings(store, "host", 77);
  CHECK(s.level == log::Level::Trace);
  CHECK(s.mask == ~uint64_t(log::kInit));
  CHECK(s.file == "/tmp/x.host.77");

  env.vars["NCCL_DEBUG"] = "LOUD";
  params::Store bad(env.sources());
  s = log::readSettings(bad, "host", 77);
  CHECK(s.level == log::Level::Warn);
  REQUIRE(s.problems.size() == 1);
  CHECK_THAT(s.problems[0], Catch::Contains("'LOUD'") && Catch::Contains("NCCL_DEBUG"));
}

TEST_CASE("lines have NCCL's prefix; the mask filters INFO but never WARN", "[log]") {
  TempDir dir;
  const std::string file = dir.file("log.txt");
  log::Settings s;
  s.level = log::Level::Info;
  s.mask = log::kNet;
  s.file = file;
  log::apply(s);
  BRAID_INFO(log::kNet, "net line %d", 1);
  BRAID_INFO(log::kColl, "coll line %d", 2);
  BRAID_TRACE(log::kNet, "trace line");
  BRAID_WARN("warn line %s", "x");

  log::Settings quiet;
  log::apply(quiet);  // back to stdout and silence for other tests

  const std::string text = slurp(file);
  const std::string prefix = log::shortHostName() + ":" + std::to_string(getpid()) + ":";
  CHECK_THAT(text, Catch::StartsWith(prefix));
  CHECK_THAT(text, Catch::Contains("] NCCL INFO net line 1\n"));
  CHECK_THAT(text, !Catch::Contains("coll line"));
  CHECK_THAT(text, !Catch::Contains("trace line"));
  CHECK_THAT(text, Catch::Contains("\n\n" + prefix));
  CHECK_THAT(text, Catch::Contains("log_test.cc:"));
  CHECK_THAT(text, Catch::Contains(" NCCL WARN warn line x\n"));
}

TEST_CASE("NCCL_DEBUG_FILE: a symbolic link is not followed; the file is closed on exec", "[log]") {
  TempDir dir;
  const std::string target = dir.write("precious.txt", "keep me\n");
  const std::string link = dir.file("log-link.txt");
  REQUIRE(symlink(target.c_str(), link.c_str()) == 0);
  const std::string fallback = dir.file("stdout.txt");
  fflush(stdout);
  const int savedStdout = dup(1);  // (the warning goes to stdout, NCCL's fallback: caught in a file)
  const int caught = open(fallback.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE((savedStdout >= 0 && caught >= 0));
  dup2(caught, 1);
  log::Settings s;
  s.level = log::Level::Info;
  s.mask = log::kAll;
  s.file = link;
  s.filePattern = link;
  log::apply(s);
  BRAID_INFO(log::kInit, "a line for the log");
  log::apply(log::Settings{});
  fflush(stdout);
  dup2(savedStdout, 1);
  close(savedStdout);
  close(caught);
  CHECK(slurp(target) == "keep me\n");  // neither truncated nor written
  const std::string shown = slurp(fallback);
  CHECK_THAT(shown, Catch::Contains("cannot open NCCL_DEBUG_FILE '" + link + "'") &&
                        Catch::Contains("symbolic link") && Catch::Contains("a line for the log"));

  const std::string file = dir.file("log.txt");
  s.file = file;
  s.filePattern = file;
  log::apply(s);
  bool cloexec = false;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    char where[4096] = {};
    if (readlink(entry.path().c_str(), where, sizeof(where) - 1) <= 0 || file != where) continue;
    const int flags = fcntl(std::stoi(entry.path().filename().string()), F_GETFD);
    cloexec = flags >= 0 && (flags & FD_CLOEXEC) != 0;
  }
  log::apply(log::Settings{});
  CHECK(cloexec);
}

TEST_CASE("NCCL_DEBUG_FILE: a forked child logs to the file of its own pid (%p)", "[log]") {
  TempDir dir;
  const std::string pattern = dir.path() + "/child.%h.%p.log";
  log::Settings s;
  s.level = log::Level::Info;
  s.mask = log::kAll;
  s.filePattern = pattern;
  s.file = log::expandFileName(pattern, log::shortHostName(), getpid());
  log::apply(s);
  BRAID_INFO(log::kInit, "the parent's line");
  const pid_t child = fork();
  if (child == 0) {
    BRAID_INFO(log::kInit, "the child's line");
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  BRAID_INFO(log::kInit, "the parent's second line");
  log::apply(log::Settings{});
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  const std::string host = log::shortHostName();
  const std::string parentText = slurp(dir.file(log::expandFileName("child.%h.%p.log", host, getpid())));
  const std::string childText = slurp(dir.file(log::expandFileName("child.%h.%p.log", host, child)));
  CHECK_THAT(parentText, Catch::Contains("the parent's line") && Catch::Contains("the parent's second line") &&
                             !Catch::Contains("the child's line"));
  CHECK_THAT(childText, Catch::Contains("the child's line") && !Catch::Contains("the parent's"));
  CHECK_THAT(childText, Catch::StartsWith(log::shortHostName() + ":" + std::to_string(child) + ":"));
}

TEST_CASE("formatting is skipped when the level is off", "[log]") {
  log::Settings quiet;
  log::apply(quiet);
  int evaluated = 0;
  auto sideEffect = [&] { return ++evaluated; };
  BRAID_INFO(log::kAll, "%d", sideEffect());
  BRAID_WARN("%d", sideEffect());
  CHECK(evaluated == 0);
}
