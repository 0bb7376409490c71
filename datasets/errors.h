// Error type thrown by trident::data for caller mistakes (bad files, bad arguments).
#pragma once

#include <stdexcept>
#include <string>

namespace trident::data {

// A caller error: a missing/corrupt file, an unknown tokenizer, a sequence length
// the data cannot serve. The message names the offending value and the expectation.
class DataError : public std::runtime_error {
 public:
  explicit DataError(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace trident::data
