// The caller-error type of a configuration, shared by everything that checks
// one (the config's validation, the layout, the trainer): the message names
// the key, the value and what was expected.
#pragma once

#include <stdexcept>

namespace trident {

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace trident
