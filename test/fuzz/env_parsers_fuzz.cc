// libFuzzer target: the parsers of NCCL_ALGO / NCCL_PROTO, NCCL_SOCKET_IFNAME, NCCL_IB_HCA and
// the path levels (NCCL_P2P_LEVEL, NCCL_NET_GDR_LEVEL), split at the input's first newline; and
// the whole input as a config file (NCCL_CONF_FILE: every value kept is a bounded line's).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "core/interfaces.h"
#include "core/params.h"
#include "core/status.h"
#include "plan/algo_proto.h"
#include "topology/paths.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t cut = input.find('\n');
  const std::string first = input.substr(0, cut);
  const std::string second = cut == std::string::npos ? "" : input.substr(cut + 1);
  try {
    braid::plan::parseAlgoProto(first, second);
  } catch (const braid::Error&) {
  }
  try {
    braid::net::InterfaceFilter filter = braid::net::InterfaceFilter::parse(first);
    filter.matches(second);
  } catch (const braid::Error&) {
  }
  {
    const braid::net::HcaFilter hca = braid::net::HcaFilter::parse(first);
    hca.matches(second, static_cast<int>(second.size()));
  }
  braid::topo::PathType level;
  braid::topo::parsePathLevel(first, &level);
  std::map<std::string, std::string> conf;
  std::vector<braid::params::Problem> problems;
  braid::params::parseConfig(input, "fuzz.conf", conf, &problems);
  for (const auto& [name, value] : conf) {
    if (name.empty() || name.size() + value.size() > braid::params::kConfigMaxLine) std::abort();
  }
  return 0;
}
