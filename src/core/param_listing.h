// The public face of the parameter registry: which parameters the C API
// (ncclParamGetAllParameterKeys, ncclParamDumpAll) and braid-info list, and their values as
// NCCL 2.30's parameter API reports them. Keys are the variables' full names ("NCCL_P2P_LEVEL",
// "BRAID_BACKEND"), as NCCL's registry names its parameters.
#pragma once

#include <string>
#include <vector>

#include "core/params.h"

namespace braid::params {

/// One listed parameter. spec is null for an NCCL variable Braid recognises but does not read
/// (unhonouredNcclVariables()): its value is the raw text it was set to.
struct ListedParameter {
  const char* name;
  const KnobSpec* spec;
};

/// True when NCCL_PARAM_DUMP_ALL asks for every parameter (NCCL's "all, private ones too").
bool dumpAllRequested(Store& store);

/// The declared knobs, and with NCCL_PARAM_DUMP_ALL also the recognised-but-unread NCCL
/// variables; sorted by name.
std::vector<ListedParameter> listedParameters(Store& store);

/// The listed parameter named name (any of the two groups, whatever NCCL_PARAM_DUMP_ALL says),
/// or one with a null name.
ListedParameter findListed(const std::string& name);

/// The value as text: an integer knob's parsed value in decimal, a string's text.
std::string valueText(Store& store, const ListedParameter& p);

/// Two lines describing p (name, type, whether Braid honours it, help; value, origin, default),
/// as braid-info and ncclParamDumpAll print them.
std::string describe(Store& store, const ListedParameter& p);

}  // namespace braid::params
