// The JSON value's name without nlohmann-json's whole header (about 2 s of
// compile time per file): for headers that only declare functions taking or
// returning a json::Value. Code that reads or writes JSON includes core/json.h.
#pragma once

#include <nlohmann/json_fwd.hpp>

namespace trident::json {

// Objects keep their members in the file's order (a first-match lookup, as
// the file was written); integers stay int64/uint64, fractions double.
using Value = nlohmann::ordered_json;

}  // namespace trident::json
