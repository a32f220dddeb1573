// docs/parameters.md, written from the parameter registry (knobTable() and the recognised NCCL
// variables) by `braid-info --markdown`, so the page cannot drift from the code: CI compares
// the committed page with a fresh one (test/check_parameters_doc.sh).
#pragma once

#include <string>

namespace braid::params {

/// The whole page: how parameters are set, then one table row per knob (name, type, default,
/// meaning) and the list of NCCL variables Braid recognises but does not read. It depends on
/// the registry alone, never on the environment or the build.
std::string parametersMarkdown();

}  // namespace braid::params
