// Knobs that are clamped or replaced say so: one WARN a process (a store) for each, naming the
// variable, the value given and the value used, however many communicators read it (issue 41).
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <string>

#include "comm/init.h"
#include "core/log.h"
#include "core/params.h"
#include "datapath/data_path.h"
#include "../core/test_env.h"

using namespace braid;

namespace {

std::string readAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("clamped knobs WARN once each, naming the variable, the value given and the value used", "[params][log]") {
  test::TempDir dir;
  const std::string file = dir.file("log.txt");
  log::Settings logTo;
  logTo.level = log::Level::Warn;
  logTo.mask = log::kAll;
  logTo.file = file;
  logTo.filePattern = file;
  log::apply(logTo);

  test::FakeEnv env;
  env.vars["BRAID_BOOTSTRAP_TIMEOUT"] = "-5";
  env.vars["BRAID_HOST_THREADS_PER_CHANNEL"] = "100000";
  env.vars["NCCL_MIN_NCHANNELS"] = "100000";
  env.vars["NCCL_MAX_NCHANNELS"] = "0";
  params::Store store(env.sources());
  comm::InitSettings init;
  datapath::DataPathSettings path;
  for (int communicator = 0; communicator < 3; ++communicator) {  // (each communicator reads them again)
    init = comm::InitSettings::fromParams(store);
    path = datapath::DataPathSettings::fromParams(store, CommConfig{}, false);
  }
  log::apply(log::Settings{});  // back to stdout and silence for other tests

  CHECK(init.net.timeout == std::chrono::seconds(300));
  CHECK(path.threadsPerChannel == 64);

  const std::string text = readAll(file);
  INFO(text);
  CHECK(occurrences(text, "BRAID_BOOTSTRAP_TIMEOUT=-5 must be 1..1000000000 seconds; using 300") == 1);
  CHECK(occurrences(text, "BRAID_HOST_THREADS_PER_CHANNEL=100000 must be 1..64; using 64") == 1);
  CHECK(occurrences(text, "NCCL_MIN_NCHANNELS=100000 must be 1..64; using 64") == 1);
  CHECK(occurrences(text, "NCCL_MAX_NCHANNELS=0 must be 1..64; using 2 (automatic)") == 1);

  // In range, and the default: not a word.
  const std::string quietFile = dir.file("quiet.txt");
  logTo.file = quietFile;
  logTo.filePattern = quietFile;
  log::apply(logTo);
  test::FakeEnv fine;
  fine.vars["BRAID_BOOTSTRAP_TIMEOUT"] = "20";
  fine.vars["NCCL_MAX_NCHANNELS"] = "4";
  params::Store good(fine.sources());
  comm::InitSettings::fromParams(good);
  datapath::DataPathSettings::fromParams(good, CommConfig{}, false);
  log::apply(log::Settings{});
  CHECK(readAll(quietFile).find("must be") == std::string::npos);
}
