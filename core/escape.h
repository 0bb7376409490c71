// Bytes as an error message shows them (a name read from a file that may hold anything).
#pragma once

#include <cstdio>
#include <string>

namespace trident {

// Printable ASCII other than space, '"' and '\' as is; every other byte as \xNN,
// so a message names exactly what the file holds, and a name that comes back
// unchanged is one a reader can type.
inline std::string escaped_bytes(const std::string& bytes) {
  std::string out;
  for (const unsigned char c : bytes) {
    if (c > 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

}  // namespace trident
