// error_of<E>(f): the message of the E that f throws, "<no error>" when f
// returns. The tests' one way of asserting on an error's text. Header-only.
#pragma once

#include <exception>
#include <string>

namespace trident::testing {

template <class E = std::exception, class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace trident::testing
