#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "api/api.h"
#include "comm/communicator.h"
#include "core/log.h"
#include "../core/test_env.h"

using namespace braid;

extern "C" {
typedef struct ncclTeam {
  int nRanks, rank, stride;
} ncclTeam_t;
ncclTeam_t ncclTeamWorld(ncclComm_t);
ncclTeam_t ncclTeamLsa(ncclComm_t);
ncclTeam_t ncclTeamRail(ncclComm_t);
int ncclTeamRankToWorld(ncclComm_t, ncclTeam_t, int);
int ncclTeamRankToLsa(ncclComm_t, ncclTeam_t, int);
int ncclLLA2ACalcSlots(int, int);
ncclResult_t ncclDevCommCreate(ncclComm_t, const void*, void*);
}

namespace {

std::string lastError() { return ncclGetLastError(nullptr); }

/// Runs a shell command and returns what it printed (stdout and stderr).
std::string run(const std::string& command) {
  std::string out = braid::test::runShell(command);
  return out.substr(0, out.rfind("exit="));
}

std::string exe(const char* variable) {
  const char* path = std::getenv(variable);
  if (path == nullptr) FAIL(variable << " is not set (run the tests through meson test)");
  return path;
}

}  // namespace

TEST_CASE("ncclGetVersion reports the ABI implemented", "[api]") {
  int version = 0;
  REQUIRE(ncclGetVersion(&version) == ncclSuccess);
  CHECK(version == 23007);
  CHECK(version == NCCL_VERSION(2, 30, 7));
  CHECK(ncclGetVersion(nullptr) == ncclInvalidArgument);
  CHECK(lastError() == "ncclGetVersion: version is NULL");
  CHECK(pncclGetVersion(&version) == ncclSuccess);
}

TEST_CASE("ncclGetErrorString covers every code", "[api]") {
  for (int r = 0; r < ncclNumResults; ++r) {
    CHECK(std::string(ncclGetErrorString(static_cast<ncclResult_t>(r))) != "unknown result code");
  }
  CHECK(std::string(ncclGetErrorString(static_cast<ncclResult_t>(99))) == "unknown result code");
}

TEST_CASE("unimplemented entry points say so with ncclInvalidUsage", "[api]") {
  RankIdentity id;
  auto owned = std::make_unique<ncclComm>(id);
  ncclComm& comm = *owned;
  CHECK(ncclAllReduce(nullptr, nullptr, 1, ncclFloat, ncclSum, &comm, nullptr) == ncclInvalidUsage);
  CHECK_THAT(lastError(), Catch::StartsWith("ncclAllReduce: the communicator has not completed init"));
  ncclWindow_t win = nullptr;
  CHECK(ncclCommWindowRegister(&comm, nullptr, 0, &win, 0) == ncclInvalidUsage);
  CHECK_THAT(lastError(), Catch::StartsWith("ncclCommWindowRegister: the communicator has not completed init"));
  CHECK(ncclCommDestroy(nullptr) == ncclSuccess);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  CHECK(ncclGroupSimulateEnd(&sim) == ncclInvalidUsage);
}

TEST_CASE("ncclMemAlloc hands out page-aligned host memory; registrations are checked", "[api]") {
  void* p = nullptr;
  REQUIRE(ncclMemAlloc(&p, 5000) == ncclSuccess);
  CHECK(reinterpret_cast<uintptr_t>(p) % 4096 == 0);
  static_cast<char*>(p)[8191] = 1;  // rounded up to whole pages
  int local = 0;
  CHECK(ncclMemFree(&local) == ncclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("was not allocated by ncclMemAlloc"));
  CHECK(ncclMemFree(p) == ncclSuccess);
  CHECK(ncclMemFree(nullptr) == ncclSuccess);
  CHECK(ncclMemAlloc(&p, 0) == ncclInvalidArgument);

  auto owned = std::make_unique<ncclComm>(RankIdentity{});

  ncclComm& comm = *owned;
  void* handle = nullptr;
  char buffer[64];
  REQUIRE(ncclCommRegister(&comm, buffer, sizeof(buffer), &handle) == ncclSuccess);
  CHECK(comm.registrations().size() == 1);
  CHECK(ncclCommDeregister(&comm, &local) == ncclInvalidArgument);
  REQUIRE(ncclCommDeregister(&comm, handle) == ncclSuccess);
  CHECK(ncclCommDeregister(&comm, handle) == ncclInvalidArgument);
  CHECK(comm.registrations().size() == 0);
}

TEST_CASE("bad handles and NULL outputs are ncclInvalidArgument naming the argument", "[api]") {
  int n = 0;
  CHECK(ncclCommCount(nullptr, &n) == ncclInvalidArgument);
  CHECK(lastError() == "ncclCommCount: comm is NULL");
  CHECK(ncclAllReduce(nullptr, nullptr, 1, ncclFloat, ncclSum, nullptr, nullptr) == ncclInvalidArgument);
  CHECK(lastError() == "ncclAllReduce: comm is NULL");

  ncclComm* dead = new ncclComm(RankIdentity{});
  delete dead;  // a stale handle: its storage is gone, and is never handed to another communicator
  CHECK(ncclCommCount(dead, &n) == ncclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("not a live communicator"));
  int local = 0;  // not a communicator at all
  CHECK(ncclCommCount(reinterpret_cast<ncclComm_t>(&local), &n) == ncclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("not a live communicator"));
}

TEST_CASE("queries read the communicator", "[api]") {
  RankIdentity id;
  id.rank = 6;
  id.nRanks = 8;
  id.cudaDevice = 1;
  id.localRank = 2;
  id.localRanks = 4;
  auto owned = std::make_unique<ncclComm>(id);
  ncclComm& comm = *owned;
  int v = -1;
  REQUIRE(ncclCommCount(&comm, &v) == ncclSuccess);
  CHECK(v == 8);
  REQUIRE(ncclCommUserRank(&comm, &v) == ncclSuccess);
  CHECK(v == 6);
  REQUIRE(ncclCommCuDevice(&comm, &v) == ncclSuccess);
  CHECK(v == 1);
  CHECK(ncclCommCount(&comm, nullptr) == ncclInvalidArgument);
  CHECK(lastError() == "ncclCommCount: count is NULL");
  CHECK(std::string(ncclGetLastError(&comm)) == "ncclCommCount: count is NULL");

  ncclResult_t async = ncclInternalError;
  REQUIRE(ncclCommGetAsyncError(&comm, &async) == ncclSuccess);
  CHECK(async == ncclSuccess);
  comm.setAsyncError(ncclRemoteError);
  comm.setAsyncError(ncclSystemError);  // the first error sticks
  REQUIRE(ncclCommGetAsyncError(&comm, &async) == ncclSuccess);
  CHECK(async == ncclRemoteError);

  CHECK(ncclCommRevoke(&comm, 3) == ncclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("revokeFlags is 3"));
}

TEST_CASE("device-API teams are computed from the communicator", "[api]") {
  RankIdentity id;
  id.rank = 6;
  id.nRanks = 8;
  id.localRank = 2;
  id.localRanks = 4;
  auto owned = std::make_unique<ncclComm>(id);
  ncclComm& comm = *owned;
  const ncclTeam_t world = ncclTeamWorld(&comm);
  CHECK((world.nRanks == 8 && world.rank == 6 && world.stride == 1));
  const ncclTeam_t lsa = ncclTeamLsa(&comm);
  CHECK((lsa.nRanks == 4 && lsa.rank == 2 && lsa.stride == 1));
  const ncclTeam_t rail = ncclTeamRail(&comm);
  CHECK((rail.nRanks == 2 && rail.rank == 1 && rail.stride == 4));
  CHECK(ncclTeamRankToWorld(&comm, rail, 0) == 2);
  CHECK(ncclTeamRankToWorld(&comm, lsa, 0) == 4);
  CHECK(ncclTeamRankToWorld(&comm, world, 5) == 5);
  CHECK(ncclTeamRankToLsa(&comm, lsa, 3) == 3);

  const ncclTeam_t none = ncclTeamWorld(nullptr);
  CHECK((none.nRanks == 0 && none.rank == 0 && none.stride == 0));
  CHECK(lastError() == "ncclTeamWorld: comm is NULL");
  CHECK(ncclTeamRankToWorld(nullptr, world, 0) == -1);

  CHECK(ncclLLA2ACalcSlots(10, 12) == 20);
  CHECK(ncclLLA2ACalcSlots(5, 8) == 5);
  CHECK(ncclLLA2ACalcSlots(3, 0) == 0);
  CHECK(ncclLLA2ACalcSlots(-1, 4) == -1);
  CHECK_THAT(lastError(), Catch::Contains("maxElts is -1"));
  CHECK(ncclDevCommCreate(&comm, nullptr, nullptr) == ncclInvalidUsage);
}

TEST_CASE("the last error belongs to the thread that failed", "[api]") {
  int v = 0;
  REQUIRE(ncclGetVersion(nullptr) == ncclInvalidArgument);
  std::string other;
  std::thread([&] {
    other = lastError();
    ncclCommCount(nullptr, &v);
  }).join();
  CHECK(other.empty());
  CHECK(lastError() == "ncclGetVersion: version is NULL");
}

TEST_CASE("every exception becomes a result code and a text", "[api]") {
  CHECK(api::guarded("f", nullptr, []() -> ncclResult_t { throw std::bad_alloc(); }) == ncclSystemError);
  CHECK(lastError() == "f: out of host memory");
  CHECK(api::guarded("g", nullptr, []() -> ncclResult_t { throw std::runtime_error("boom"); }) ==
        ncclInternalError);
  CHECK(lastError() == "g: boom");
  CHECK(api::guarded("h", nullptr, []() -> ncclResult_t { throw 42; }) == ncclInternalError);
  CHECK(lastError() == "h: unknown exception");
}

TEST_CASE("the shared library logs in NCCL's format and names ignored variables", "[api][process]") {
  const std::string smoke = exe("BRAID_SMOKE_EXE");
  std::string out = run(smoke);
  CHECK_THAT(out, Catch::Contains("smoke: version 23007 result 0"));
  CHECK_THAT(out, Catch::Contains("ncclCommCount(NULL) -> 4: ncclCommCount: comm is NULL"));
  CHECK_THAT(out, !Catch::Contains("NCCL"));  // silent by default

  out = run("NCCL_DEBUG=VERSION " + smoke);
  CHECK_THAT(out, Catch::Contains("NCCL INFO NCCL version 2.30.7+braid"));
  CHECK_THAT(out, !Catch::Contains("NCCL WARN"));

  out = run("NCCL_DEBUG=INFO NCCL_PROXY_CPUSET=foo NCCL_BUFFSIZE=abc NCCL_CONF_FILE=/nonexistent " + smoke);
  CHECK_THAT(out, Catch::Contains("NCCL INFO NCCL_PROXY_CPUSET=foo is set (environment) but Braid does not honour it"));
  CHECK_THAT(out, Catch::Contains("NCCL WARN invalid value 'abc' for NCCL_BUFFSIZE"));
  CHECK_THAT(out, Catch::Contains("NCCL WARN ncclCommCount: comm is NULL"));

  out = run("NCCL_DEBUG=ABORT " + smoke + "; echo exit=$?");
  CHECK_THAT(out, Catch::Contains("NCCL_DEBUG=ABORT: aborting"));
  CHECK_THAT(out, !Catch::Contains("exit=0"));
}

TEST_CASE("NCCL_DEBUG_FILE receives the log, with %h and %p expanded", "[api][process]") {
  const std::string smoke = exe("BRAID_SMOKE_EXE");
  braid::test::TempDir dir;
  const std::string out = run("cd " + dir.path() + " && NCCL_DEBUG=WARN NCCL_DEBUG_FILE=" + dir.path() +
                              "/log.%h.%p " + smoke + " >/dev/null; ls " + dir.path());
  const std::string prefix = "log." + log::shortHostName() + ".";
  CHECK_THAT(out, Catch::StartsWith(prefix));
  const std::string name = out.substr(0, out.find('\n'));
  const std::string content = run("cat " + dir.path() + "/" + name);
  dir.file(name);  // removed with the directory
  CHECK_THAT(content, Catch::Contains("NCCL WARN ncclCommCount: comm is NULL"));
  CHECK(std::stol(name.substr(prefix.size())) > 0);
}

TEST_CASE("braid-info lists every knob with value, origin and help", "[tools][process]") {
  const std::string info = exe("BRAID_INFO_EXE");
  braid::test::TempDir dir;
  const std::string conf = dir.write("nccl.conf", "NCCL_LL_BUFFSIZE=65536\nNCCL_PROXY_CPUSET=x\n");
  const std::string out =
      run("NCCL_CONF_FILE=" + conf + " NCCL_BUFFSIZE=abc NCCL_DEBUG_SUBSYS=NET " + info);
  CHECK_THAT(out, Catch::Contains("NCCL version 2.30.7+braid"));
  for (const auto& knob : params::knobTable()) CHECK_THAT(out, Catch::Contains(knob.name));
  CHECK_THAT(out, Catch::Contains("NCCL_DEBUG_SUBSYS      = NET"));
  CHECK_THAT(out, Catch::Contains("[environment]"));
  CHECK_THAT(out, Catch::Contains("NCCL_LL_BUFFSIZE       = 65536                [user config file " + conf + "]"));
  CHECK_THAT(out, Catch::Contains("note: the text 'abc' was not a valid integer"));
  CHECK_THAT(out, Catch::Contains("NCCL_PROXY_CPUSET      = x [user config file"));
  CHECK_THAT(run(info + " NCCL_NOPE; echo exit=$?"), Catch::Contains("exit=2"));
  const std::string one = run(info + " NCCL_BUFFSIZE");
  CHECK_THAT(one, Catch::StartsWith("NCCL_BUFFSIZE"));
  CHECK_THAT(one, !Catch::Contains("NCCL_DEBUG"));
}
