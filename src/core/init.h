// Once-per-process library initialisation, run by the first call into the C API.
#pragma once

#include <string>

namespace braid::core {

/// Configures logging, prints the version banner (NCCL_DEBUG=VERSION and above) and
/// notes every NCCL variable that is set but not honoured. Safe to call from any thread.
void initOnce();

/// "Braid 0.1.0 (NCCL ABI 2.30.7)" and similar: the text of the banner.
std::string versionText();

}  // namespace braid::core
