// NCCL 2.30's parameter API over Braid's one registry (core/params.h): handles, typed reads,
// text reads, the list of keys and a dump. Keys are full variable names ("NCCL_P2P_LEVEL").
// As in NCCL, returned strings and key tables live in thread-local storage until the same
// call is made again on that thread, and handles live as long as the process.
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "api/api.h"
#include "core/param_listing.h"

using namespace braid;

/// What an ncclParamHandle_t points to: one per key, never freed.
struct ncclParamHandle {
  params::ListedParameter parameter;
};

namespace {

params::ListedParameter requireKnown(const char* key) {
  api::requireNonNull(key, "key");
  const params::ListedParameter p = params::findListed(key);
  if (p.name == nullptr) fail(ncclInvalidArgument, "key \"%s\" is not a parameter (braid-info lists them all)", key);
  return p;
}

ncclParamHandle_t handleFor(const params::ListedParameter& p) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<ncclParamHandle>> handles;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = handles[p.name];
  if (!slot) slot.reset(new ncclParamHandle{p});
  return slot.get();
}

const params::ListedParameter& boundParameter(ncclParamHandle_t h) {
  api::requireNonNull(h, "h");
  return h->parameter;
}

bool isInteger(const params::ListedParameter& p) {
  return p.spec != nullptr && p.spec->type == params::KnobType::Integer;
}

/// A typed read: the parameter must be an integer and its value must fit T exactly.
template <typename T>
ncclResult_t readInteger(const char* function, const char* typeName, ncclParamHandle_t h, T* out) {
  return api::guarded(function, nullptr, [&] {
    const params::ListedParameter& p = boundParameter(h);
    api::requireNonNull(out, "out");
    if (!isInteger(p)) {
      fail(ncclInvalidArgument, "%s is a text parameter; read it with ncclParamGetStr or ncclParamGetParameter",
           p.name);
    }
    const int64_t value = params::process().integer(p.name);
    const bool fits = std::numeric_limits<T>::is_signed
                          ? value >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                                value <= static_cast<int64_t>(std::numeric_limits<T>::max())
                          : value >= 0 && static_cast<uint64_t>(value) <= std::numeric_limits<T>::max();
    if (!fits) {
      fail(ncclInvalidArgument, "%s is %" PRId64 ", which does not fit in %s", p.name, value, typeName);
    }
    *out = static_cast<T>(value);
    return ncclSuccess;
  });
}

}  // namespace

BRAID_API(ncclResult_t, ncclParamBind, ncclParamHandle_t* out, const char* key);
ncclResult_t pncclParamBind(ncclParamHandle_t* out, const char* key) {
  return api::guarded("ncclParamBind", nullptr, [&] {
    api::requireNonNull(out, "out");
    *out = handleFor(requireKnown(key));
    return ncclSuccess;
  });
}

#define BRAID_PARAM_TYPED_GETTER(suffix, ctype)                                   \
  BRAID_API(ncclResult_t, ncclParamGet##suffix, ncclParamHandle_t h, ctype* out); \
  ncclResult_t pncclParamGet##suffix(ncclParamHandle_t h, ctype* out) {           \
    return readInteger("ncclParamGet" #suffix, #ctype, h, out);                   \
  }
BRAID_PARAM_TYPED_GETTER(I8, int8_t)
BRAID_PARAM_TYPED_GETTER(I16, int16_t)
BRAID_PARAM_TYPED_GETTER(I32, int32_t)
BRAID_PARAM_TYPED_GETTER(I64, int64_t)
BRAID_PARAM_TYPED_GETTER(U8, uint8_t)
BRAID_PARAM_TYPED_GETTER(U16, uint16_t)
BRAID_PARAM_TYPED_GETTER(U32, uint32_t)
BRAID_PARAM_TYPED_GETTER(U64, uint64_t)
#undef BRAID_PARAM_TYPED_GETTER

BRAID_API(ncclResult_t, ncclParamGetStr, ncclParamHandle_t h, const char** out);
ncclResult_t pncclParamGetStr(ncclParamHandle_t h, const char** out) {
  return api::guarded("ncclParamGetStr", nullptr, [&] {
    const params::ListedParameter& p = boundParameter(h);
    api::requireNonNull(out, "out");
    if (isInteger(p)) {
      fail(ncclInvalidArgument, "%s is an integer parameter; read it with ncclParamGetI64 (or another integer type)",
           p.name);
    }
    static thread_local std::string text;
    text = params::valueText(params::process(), p);
    *out = text.c_str();
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclParamGet, ncclParamHandle_t h, void* out, int maxLen, int* len);
ncclResult_t pncclParamGet(ncclParamHandle_t h, void* out, int maxLen, int* len) {
  return api::guarded("ncclParamGet", nullptr, [&] {
    const params::ListedParameter& p = boundParameter(h);
    api::requireNonNull(out, "out");
    api::requireNonNull(len, "len");
    if (maxLen <= 0) fail(ncclInvalidArgument, "maxLen is %d; it must be positive", maxLen);
    // The value's bytes as NCCL copies them: an integer's int64_t, a text with its NUL.
    std::string bytes;
    if (isInteger(p)) {
      const int64_t value = params::process().integer(p.name);
      bytes.assign(reinterpret_cast<const char*>(&value), sizeof(value));
    } else {
      bytes = params::valueText(params::process(), p);
      bytes.push_back('\0');
    }
    if (bytes.size() > static_cast<size_t>(maxLen)) {
      *len = 0;
      fail(ncclInvalidArgument, "%s takes %zu bytes; maxLen is %d", p.name, bytes.size(), maxLen);
    }
    std::memcpy(out, bytes.data(), bytes.size());
    *len = static_cast<int>(bytes.size());
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclParamGetParameter, const char* key, const char** value, int* valueLen);
ncclResult_t pncclParamGetParameter(const char* key, const char** value, int* valueLen) {
  return api::guarded("ncclParamGetParameter", nullptr, [&] {
    api::requireNonNull(value, "value");
    api::requireNonNull(valueLen, "valueLen");
    *value = nullptr;
    *valueLen = 0;
    const params::ListedParameter p = requireKnown(key);
    static thread_local std::string text;
    text = params::valueText(params::process(), p);
    *value = text.c_str();
    *valueLen = static_cast<int>(text.size());
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclParamGetAllParameterKeys, const char*** table, int* tableLen);
ncclResult_t pncclParamGetAllParameterKeys(const char*** table, int* tableLen) {
  return api::guarded("ncclParamGetAllParameterKeys", nullptr, [&] {
    api::requireNonNull(table, "table");
    api::requireNonNull(tableLen, "tableLen");
    // The names are static strings of the registry; only the table is per thread.
    static thread_local std::vector<const char*> keys;
    keys.clear();
    for (const auto& p : params::listedParameters(params::process())) keys.push_back(p.name);
    *table = keys.data();
    *tableLen = static_cast<int>(keys.size());
    return ncclSuccess;
  });
}

BRAID_API(void, ncclParamDumpAll, void);
void pncclParamDumpAll(void) {
  // NCCL prints the dump to standard output, whatever NCCL_DEBUG says.
  api::guarded("ncclParamDumpAll", nullptr, [&] {
    params::Store& store = params::process();
    std::string text = "=== Braid parameters (" + std::string(params::dumpAllRequested(store) ? "all" : "declared") +
                       "; NCCL_PARAM_DUMP_ALL=1 adds the NCCL variables Braid does not read) ===\n";
    for (const auto& p : params::listedParameters(store)) text += params::describe(store, p);
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
    return ncclSuccess;
  });
}
