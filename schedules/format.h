// Numbers and strings as the renderers and measured-timeline writers put them
// into JSON, SVG and text: one place for the formats. Pure C++.
#pragma once

#include <cstdio>
#include <string>

namespace trident::sched {

// `v` with `decimals` digits after the point ("%.*f").
inline std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// `v` with up to 10 significant digits, no trailing zeros ("%.10g").
inline std::string general(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

// A JSON string literal: quotes and backslashes escaped, control characters
// (which schedule files and titles never mean) written as spaces.
inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
      continue;
    }
    out += c;
  }
  return out + "\"";
}

}  // namespace trident::sched
