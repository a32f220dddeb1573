#include <set>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <vector>

#include "core/params.h"
#include "test_env.h"

using namespace braid;
using braid::test::FakeEnv;
using braid::test::TempDir;

TEST_CASE("the registry is sorted, unique and complete", "[params]") {
  const auto& table = params::knobTable();
  REQUIRE(!table.empty());
  for (size_t i = 1; i < table.size(); ++i) {
    INFO(table[i - 1].name << " before " << table[i].name);
    CHECK(std::string(table[i - 1].name) < table[i].name);
  }
  for (const auto& knob : table) {
    CHECK(std::string(knob.help).size() > 10);
    int64_t v = 0;
    if (knob.type == params::KnobType::Integer) CHECK(params::parseInteger(knob.defaultValue, &v));
  }
  // An unhonoured name must not also be declared.
  for (const char* name : params::unhonouredNcclVariables()) {
    INFO(name);
    CHECK(params::findKnob(name) == nullptr);
  }
  // NCCL_TIMEOUT is Braid's own, spelt the way users expect; every other NCCL_ knob is NCCL's:
  // 2.28.9's 187, and those 2.29 and 2.30 added.
  const std::set<std::string> since2289(params::ncclVariablesAfter2289().begin(), params::ncclVariablesAfter2289().end());
  CHECK(since2289.size() == 64);  // 2.30.7's source reads 64 variables 2.28.9's did not
  size_t declaredNccl = 0, declaredNewer = 0;
  for (const auto& knob : table) {
    const std::string name = knob.name;
    if (name.rfind("NCCL_", 0) != 0 || name == "NCCL_TIMEOUT") continue;
    ++(since2289.count(name) ? declaredNewer : declaredNccl);
  }
  size_t unhonouredNewer = 0;
  for (const char* name : params::unhonouredNcclVariables()) unhonouredNewer += since2289.count(name);
  CHECK(declaredNewer + unhonouredNewer == since2289.size());
  CHECK(params::unhonouredNcclVariables().size() - unhonouredNewer + declaredNccl == 187);  // NCCL 2.28.9 reads 187
}

TEST_CASE("integers parse like strtoll with base 0 and reject junk", "[params]") {
  int64_t v = 0;
  CHECK(params::parseInteger("4194304", &v));
  CHECK(v == 4194304);
  CHECK(params::parseInteger("0x10", &v));
  CHECK(v == 16);
  CHECK(params::parseInteger("-2", &v));
  CHECK(v == -2);
  CHECK(params::parseInteger(" 12 ", &v));
  CHECK(v == 12);
  CHECK_FALSE(params::parseInteger("abc", &v));
  CHECK_FALSE(params::parseInteger("12abc", &v));
  CHECK_FALSE(params::parseInteger("", &v));
  CHECK_FALSE(params::parseInteger("99999999999999999999999", &v));
}

TEST_CASE("the environment wins over the user file, which wins over the system file", "[params]") {
  TempDir dir;
  const std::string user = dir.write("user.conf", "NCCL_BUFFSIZE=2048\nNCCL_DEBUG_SUBSYS=NET\n");
  const std::string system =
      dir.write("system.conf", "NCCL_BUFFSIZE=1024\nNCCL_DEBUG_SUBSYS=COLL\nNCCL_DEBUG=INFO\n");
  FakeEnv env;
  env.vars["NCCL_CONF_FILE"] = user;
  env.vars["NCCL_DEBUG_SUBSYS"] = "GRAPH";
  params::Store store(env.sources(system));

  CHECK(store.string("NCCL_DEBUG_SUBSYS") == "GRAPH");
  CHECK(store.lookup("NCCL_DEBUG_SUBSYS").origin == params::Origin::Environment);
  CHECK(store.integer("NCCL_BUFFSIZE") == 2048);
  CHECK(store.lookup("NCCL_BUFFSIZE").origin == params::Origin::UserFile);
  CHECK(store.lookup("NCCL_BUFFSIZE").file == user);
  CHECK(store.string("NCCL_DEBUG") == "INFO");
  CHECK(store.lookup("NCCL_DEBUG").origin == params::Origin::SystemFile);
  CHECK(store.integer("NCCL_LL_BUFFSIZE") == 524288);
  CHECK(store.lookup("NCCL_LL_BUFFSIZE").origin == params::Origin::Default);
  CHECK(store.takeProblems().empty());
}

TEST_CASE("without NCCL_CONF_FILE the user file is ~/.nccl.conf", "[params]") {
  TempDir home;
  home.write(".nccl.conf", "# a comment line\n\n  NCCL_BUFFSIZE = 0x1000  # trailing comment\n");
  FakeEnv env;
  env.vars["HOME"] = home.path();
  params::Store store(env.sources());
  CHECK(store.userFile() == home.path() + "/.nccl.conf");
  CHECK(store.integer("NCCL_BUFFSIZE") == 4096);

  FakeEnv noHome;
  params::Store bare(noHome.sources());
  CHECK(bare.userFile().empty());
  CHECK(bare.integer("NCCL_BUFFSIZE") == 4194304);
}

TEST_CASE("a bad integer is reported with its name and value, and the default is used", "[params]") {
  FakeEnv env;
  env.vars["NCCL_BUFFSIZE"] = "abc";
  params::Store store(env.sources());
  CHECK(store.integer("NCCL_BUFFSIZE") == 4194304);
  const auto problems = store.takeProblems();
  REQUIRE(problems.size() == 1);
  CHECK_THAT(problems[0].text, Catch::Contains("NCCL_BUFFSIZE") && Catch::Contains("'abc'") &&
                                   Catch::Contains("environment") && Catch::Contains("4194304"));
  // Read once: the second read neither re-parses nor reports again.
  CHECK(store.integer("NCCL_BUFFSIZE") == 4194304);
  CHECK(store.takeProblems().empty());
}

TEST_CASE("malformed config lines are reported with file and line", "[params]") {
  TempDir dir;
  const std::string user = dir.write("bad.conf", "NCCL_BUFFSIZE=4096\nthis is not a setting\n=5\n");
  FakeEnv env;
  env.vars["NCCL_CONF_FILE"] = user;
  params::Store store(env.sources());
  CHECK(store.integer("NCCL_BUFFSIZE") == 4096);
  const auto problems = store.takeProblems();
  REQUIRE(problems.size() == 2);
  CHECK_THAT(problems[0].text, Catch::Contains(user + ":2"));
  CHECK_THAT(problems[1].text, Catch::Contains(user + ":3"));
}

namespace {
/// The problems a store reports for the config file `path` (NCCL_CONF_FILE), and the seconds it
/// took to read it.
std::vector<params::Problem> problemsOfConfig(const std::string& path, double* seconds) {
  FakeEnv env;
  env.vars["NCCL_CONF_FILE"] = path;
  const auto start = std::chrono::steady_clock::now();
  params::Store store(env.sources("/nonexistent/system.conf"));
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(store.integer("NCCL_BUFFSIZE") == 4194304);
  return store.takeProblems();
}
}  // namespace

TEST_CASE("config files: only regular files of at most 1 MiB are read, each at once", "[params]") {
  double seconds = 0;
  auto problems = problemsOfConfig("/dev/zero", &seconds);  // (read without bound: out of memory)
  CHECK(seconds < 1.0);
  REQUIRE(problems.size() == 1);
  CHECK_THAT(problems[0].text, Catch::Contains("/dev/zero") && Catch::Contains("a device, not a regular file"));

  TempDir dir;
  const std::string fifo = dir.file("fifo.conf");
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  problems = problemsOfConfig(fifo, &seconds);  // (opened for reading, a FIFO waits for a writer)
  CHECK(seconds < 1.0);
  REQUIRE(problems.size() == 1);
  CHECK_THAT(problems[0].text, Catch::Contains(fifo) && Catch::Contains("a FIFO"));

  const std::string big = dir.write("big.conf", "NCCL_BUFFSIZE=4096\n" + std::string(params::kConfigMaxBytes, '#'));
  problems = problemsOfConfig(big, &seconds);  // (ignored whole: NCCL_BUFFSIZE keeps its default)
  REQUIRE(problems.size() == 1);
  CHECK_THAT(problems[0].text, Catch::Contains(big) && Catch::Contains("larger than 1048576 bytes"));
}

TEST_CASE("config files: a line longer than 4 KiB is skipped and named", "[params]") {
  TempDir dir;
  const std::string conf = dir.write("long.conf", "NCCL_DEBUG=INFO\nNCCL_ALGO=" + std::string(100000, 'x') +
                                                      "\nNCCL_BUFFSIZE=8192\n");
  FakeEnv env;
  env.vars["NCCL_CONF_FILE"] = conf;
  const auto start = std::chrono::steady_clock::now();
  params::Store store(env.sources("/nonexistent/system.conf"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
  CHECK(store.integer("NCCL_BUFFSIZE") == 8192);  // (the lines around it still read)
  CHECK(store.string("NCCL_DEBUG") == "INFO");
  CHECK(store.string("NCCL_ALGO") == "");
  const auto problems = store.takeProblems();
  REQUIRE(problems.size() == 1);
  CHECK_THAT(problems[0].text, Catch::Contains(conf + ":2") && Catch::Contains("100010 bytes") &&
                                   Catch::Contains("at most 4096"));
  std::map<std::string, std::string> values;
  std::vector<params::Problem> found;
  params::parseConfig("A=" + std::string(params::kConfigMaxLine - 2, 'y') + "\nB=" +
                          std::string(params::kConfigMaxLine - 1, 'z'), "t.conf", values, &found);
  CHECK(values.count("A") == 1);  // exactly 4096 bytes: kept
  CHECK(values.count("B") == 0);
  REQUIRE(found.size() == 1);
  CHECK_THAT(found[0].text, Catch::Contains("t.conf:2"));
}

TEST_CASE("a missing config file is not an error", "[params]") {
  FakeEnv env;
  env.vars["NCCL_CONF_FILE"] = "/nonexistent/braid.conf";
  params::Store store(env.sources("/nonexistent/system.conf"));
  CHECK(store.integer("NCCL_BUFFSIZE") == 4194304);
  CHECK(store.takeProblems().empty());
}

TEST_CASE("reading an undeclared knob or with the wrong type is an internal error", "[params]") {
  FakeEnv env;
  params::Store store(env.sources());
  CHECK_THROWS_WITH(store.integer("NCCL_NOT_A_KNOB"), Catch::Contains("not declared"));
  CHECK_THROWS_WITH(store.integer("NCCL_DEBUG"), Catch::Contains("wrong type"));
}
