// The parameter API (ncclParam*): handles, typed reads with range checks, text reads, keys, dump.
// In-process cases read the process's own store; the param_probe cases set the environment.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <set>
#include <sstream>
#include <string>

#include "api/api.h"
#include "core/param_listing.h"
#include "core/params.h"
#include "../core/test_env.h"

using namespace braid;

namespace {

std::string lastError() { return ncclGetLastError(nullptr); }

std::string probe(const std::string& envAndArgs) {
  const char* path = std::getenv("BRAID_PARAM_PROBE_EXE");
  if (path == nullptr) FAIL("BRAID_PARAM_PROBE_EXE is not set (run the tests through meson test)");
  // (env -u: the run's own settings of these must not leak in)
  return test::runShell("env -u NCCL_PARAM_DUMP_ALL -u NCCL_BUFFSIZE -u BRAID_BOOTSTRAP_TIMEOUT -u NCCL_NUM_RMA_CTX " +
                        envAndArgs.substr(0, envAndArgs.find('|')) + " " + path + " " +
                        envAndArgs.substr(envAndArgs.find('|') + 1));
}

std::set<std::string> lines(const std::string& text) {
  std::set<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.rfind("exit=", 0) != 0) out.insert(line);
  }
  return out;
}

/// Whether value fits T, computed independently of the library.
template <typename T>
bool fits(int64_t value) {
  if (std::numeric_limits<T>::is_signed) {
    return value >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
           value <= static_cast<int64_t>(std::numeric_limits<T>::max());
  }
  return value >= 0 && static_cast<uint64_t>(value) <= static_cast<uint64_t>(std::numeric_limits<T>::max());
}

template <typename T>
void checkTyped(ncclResult_t (*get)(ncclParamHandle_t, T*), ncclParamHandle_t h, int64_t value, const char* name) {
  T out = 0;
  const ncclResult_t r = get(h, &out);
  INFO(name << " = " << value);
  if (fits<T>(value)) {
    CHECK(r == ncclSuccess);
    CHECK(static_cast<int64_t>(out) == value);
  } else {
    CHECK(r == ncclInvalidArgument);
    CHECK_THAT(lastError(), Catch::Contains("does not fit in"));
  }
}

}  // namespace

TEST_CASE("ncclParamBind finds declared parameters by their full names and refuses others", "[api][param]") {
  ncclParamHandle_t h = nullptr, again = nullptr;
  REQUIRE(ncclParamBind(&h, "NCCL_P2P_LEVEL") == ncclSuccess);
  CHECK(h != nullptr);
  REQUIRE(ncclParamBind(&again, "NCCL_P2P_LEVEL") == ncclSuccess);
  CHECK(again == h);  // one handle per key, owned by the library

  CHECK(ncclParamBind(&h, "P2P_LEVEL") == ncclInvalidArgument);
  CHECK(lastError() == "ncclParamBind: key \"P2P_LEVEL\" is not a parameter (braid-info lists them all)");
  CHECK(ncclParamBind(&h, "NCCL_NO_SUCH_THING") == ncclInvalidArgument);
  CHECK(ncclParamBind(nullptr, "NCCL_P2P_LEVEL") == ncclInvalidArgument);
  CHECK(lastError() == "ncclParamBind: out is NULL");
  CHECK(ncclParamBind(&h, nullptr) == ncclInvalidArgument);
  CHECK(lastError() == "ncclParamBind: key is NULL");
}

TEST_CASE("typed reads return the value when it fits the type and fail when it does not", "[api][param]") {
  for (const char* name : {"BRAID_BOOTSTRAP_TIMEOUT", "NCCL_P2P_LL_THRESHOLD", "NCCL_BUFFSIZE"}) {
    const int64_t value = params::process().integer(name);
    ncclParamHandle_t h = nullptr;
    REQUIRE(ncclParamBind(&h, name) == ncclSuccess);
    checkTyped(ncclParamGetI8, h, value, name);
    checkTyped(ncclParamGetI16, h, value, name);
    checkTyped(ncclParamGetI32, h, value, name);
    checkTyped(ncclParamGetI64, h, value, name);
    checkTyped(ncclParamGetU8, h, value, name);
    checkTyped(ncclParamGetU16, h, value, name);
    checkTyped(ncclParamGetU32, h, value, name);
    checkTyped(ncclParamGetU64, h, value, name);
  }
  ncclParamHandle_t text = nullptr;
  REQUIRE(ncclParamBind(&text, "NCCL_P2P_LEVEL") == ncclSuccess);
  int32_t i32 = 0;
  CHECK(ncclParamGetI32(text, &i32) == ncclInvalidArgument);
  CHECK(lastError() ==
        "ncclParamGetI32: NCCL_P2P_LEVEL is a text parameter; read it with ncclParamGetStr or ncclParamGetParameter");
  CHECK(ncclParamGetI32(nullptr, &i32) == ncclInvalidArgument);
  CHECK(lastError() == "ncclParamGetI32: h is NULL");
  ncclParamHandle_t number = nullptr;
  REQUIRE(ncclParamBind(&number, "NCCL_BUFFSIZE") == ncclSuccess);
  CHECK(ncclParamGetU64(number, nullptr) == ncclInvalidArgument);
  CHECK(lastError() == "ncclParamGetU64: out is NULL");
}

TEST_CASE("text reads, raw reads and reads by key", "[api][param]") {
  ncclParamHandle_t text = nullptr, number = nullptr;
  REQUIRE(ncclParamBind(&text, "BRAID_BACKEND") == ncclSuccess);
  REQUIRE(ncclParamBind(&number, "NCCL_BUFFSIZE") == ncclSuccess);
  const std::string backend = params::process().string("BRAID_BACKEND");

  const char* s = nullptr;
  REQUIRE(ncclParamGetStr(text, &s) == ncclSuccess);
  CHECK(std::string(s) == backend);
  CHECK(ncclParamGetStr(number, &s) == ncclInvalidArgument);
  CHECK(lastError() ==
        "ncclParamGetStr: NCCL_BUFFSIZE is an integer parameter; read it with ncclParamGetI64 (or another integer type)");
  CHECK(ncclParamGetStr(text, nullptr) == ncclInvalidArgument);

  // ncclParamGet: a text with its NUL, an integer as its int64_t.
  char buffer[64];
  int len = -1;
  REQUIRE(ncclParamGet(text, buffer, sizeof buffer, &len) == ncclSuccess);
  CHECK(len == static_cast<int>(backend.size()) + 1);
  CHECK(std::string(buffer) == backend);
  int64_t raw = 0;
  REQUIRE(ncclParamGet(number, &raw, sizeof raw, &len) == ncclSuccess);
  CHECK(len == 8);
  CHECK(raw == params::process().integer("NCCL_BUFFSIZE"));
  CHECK(ncclParamGet(number, &raw, 4, &len) == ncclInvalidArgument);
  CHECK(len == 0);
  CHECK(lastError() == "ncclParamGet: NCCL_BUFFSIZE takes 8 bytes; maxLen is 4");
  CHECK(ncclParamGet(number, &raw, 0, &len) == ncclInvalidArgument);
  CHECK(lastError() == "ncclParamGet: maxLen is 0; it must be positive");
  CHECK(ncclParamGet(number, nullptr, 8, &len) == ncclInvalidArgument);
  CHECK(ncclParamGet(number, &raw, 8, nullptr) == ncclInvalidArgument);

  const char* value = "untouched";
  int valueLen = -1;
  REQUIRE(ncclParamGetParameter("NCCL_BUFFSIZE", &value, &valueLen) == ncclSuccess);
  CHECK(std::string(value) == std::to_string(params::process().integer("NCCL_BUFFSIZE")));
  CHECK(valueLen == static_cast<int>(std::string(value).size()));
  CHECK(ncclParamGetParameter("NCCL_NOPE", &value, &valueLen) == ncclInvalidArgument);
  CHECK(value == nullptr);
  CHECK(valueLen == 0);
  CHECK(lastError() == "ncclParamGetParameter: key \"NCCL_NOPE\" is not a parameter (braid-info lists them all)");
  CHECK(ncclParamGetParameter(nullptr, &value, &valueLen) == ncclInvalidArgument);
  CHECK(ncclParamGetParameter("NCCL_BUFFSIZE", nullptr, &valueLen) == ncclInvalidArgument);
  CHECK(ncclParamGetParameter("NCCL_BUFFSIZE", &value, nullptr) == ncclInvalidArgument);
}

TEST_CASE("ncclParamGetAllParameterKeys lists the registry, sorted", "[api][param]") {
  const char** keys = nullptr;
  int n = 0;
  REQUIRE(ncclParamGetAllParameterKeys(&keys, &n) == ncclSuccess);
  const auto listed = params::listedParameters(params::process());
  REQUIRE(n == static_cast<int>(listed.size()));
  CHECK(n >= static_cast<int>(params::knobTable().size()));
  for (int i = 0; i < n; ++i) CHECK(std::string(keys[i]) == listed[i].name);
  CHECK(ncclParamGetAllParameterKeys(nullptr, &n) == ncclInvalidArgument);
  CHECK(lastError() == "ncclParamGetAllParameterKeys: table is NULL");
  CHECK(ncclParamGetAllParameterKeys(&keys, nullptr) == ncclInvalidArgument);
}

TEST_CASE("the environment reaches the parameter API; NCCL_PARAM_DUMP_ALL widens the list", "[api][param][process]") {
  CHECK(probe("NCCL_BUFFSIZE=65536|get NCCL_BUFFSIZE") == "result 0 value '65536' len 5\nexit=0\n");
  CHECK(probe("NCCL_BUFFSIZE=0x20000|i64 NCCL_BUFFSIZE") == "result 0 value 131072: \nexit=0\n");
  CHECK(probe("NCCL_BUFFSIZE=300|typed NCCL_BUFFSIZE") == "I8 4 I16 0 I32 0 I64 0 U8 4 U16 0 U32 0 U64 0\nexit=0\n");
  CHECK(probe("NCCL_BUFFSIZE=-1|typed NCCL_BUFFSIZE") == "I8 0 I16 0 I32 0 I64 0 U8 4 U16 4 U32 4 U64 4\nexit=0\n");
  CHECK(probe("NCCL_BUFFSIZE=5000000000|typed NCCL_BUFFSIZE") ==
        "I8 4 I16 4 I32 4 I64 0 U8 4 U16 4 U32 4 U64 0\nexit=0\n");
  CHECK(probe("|get NCCL_IB_PKEY") == "result 0 value '' len 0\nexit=0\n");  // recognised, unread: bindable

  const std::set<std::string> declared = lines(probe("|keys"));
  const std::set<std::string> all = lines(probe("NCCL_PARAM_DUMP_ALL=true|keys"));
  CHECK(declared.size() == params::knobTable().size());
  CHECK(declared.count("NCCL_P2P_LEVEL") == 1);
  CHECK(declared.count("NCCL_IB_PKEY") == 0);
  CHECK(all.size() == params::knobTable().size() + params::unhonouredNcclVariables().size());
  CHECK(all.count("NCCL_IB_PKEY") == 1);
  CHECK(lines(probe("NCCL_PARAM_DUMP_ALL=1|keys")) == all);

  // ncclParamDumpAll prints the same set, two lines each, to standard output.
  const std::string dump = probe("NCCL_BUFFSIZE=65536|dump");
  CHECK_THAT(dump, Catch::Contains("NCCL_BUFFSIZE (integer) [honoured]"));
  CHECK_THAT(dump, Catch::Contains("    value=65536 set_by=environment default="));
  CHECK_THAT(dump, !Catch::Contains("NCCL_IB_PKEY"));
  CHECK_THAT(probe("NCCL_PARAM_DUMP_ALL=TRUE|dump"), Catch::Contains("NCCL_IB_PKEY (text) [recognised, not read by Braid]"));

  // braid-info lists the same set as the API, with and without NCCL_PARAM_DUMP_ALL.
  const char* info = std::getenv("BRAID_INFO_EXE");
  REQUIRE(info != nullptr);
  for (const std::string env : {"", "NCCL_PARAM_DUMP_ALL=1 "}) {
    const std::string out = test::runShell("env -u NCCL_PARAM_DUMP_ALL " + env + info);
    std::set<std::string> names;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
      const size_t eq = line.find(" = ");
      if (eq != std::string::npos && line.rfind("    ", 0) != 0) names.insert(line.substr(0, line.find(' ')));
    }
    CHECK(names == (env.empty() ? declared : all));
  }
}

TEST_CASE("NCCL_NUM_RMA_CTX overrides config.numRmaCtx, as in NCCL", "[api][param][process]") {
  CHECK_THAT(probe("|signal 1"), Catch::Contains("ctx is 1; the communicator has 1 contexts"));
  CHECK_THAT(probe("NCCL_NUM_RMA_CTX=4|signal 3"), Catch::Contains("result 5: ncclSignal: no window was registered"));  // (ctx 3 passed)
  CHECK_THAT(probe("NCCL_NUM_RMA_CTX=4|signal 4"), Catch::Contains("ctx is 4; the communicator has 4 contexts"));
  CHECK_THAT(probe("NCCL_NUM_RMA_CTX=0|signal 0"), Catch::Contains("ctx is 0; the communicator has 0 contexts"));
  CHECK_THAT(probe("NCCL_NUM_RMA_CTX=-3|signal 0"), Catch::Contains("no window was registered"));  // ignored, as NCCL does
}
