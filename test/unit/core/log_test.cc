#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
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

TEST_CASE("formatting is skipped when the level is off", "[log]") {
  log::Settings quiet;
  log::apply(quiet);
  int evaluated = 0;
  auto sideEffect = [&] { return ++evaluated; };
  BRAID_INFO(log::kAll, "%d", sideEffect());
  BRAID_WARN("%d", sideEffect());
  CHECK(evaluated == 0);
}
