// Brown corpus detagging; the spacing rule is documented in brown.h.
#include "datasets/brown.h"

#include <sstream>
#include <vector>

namespace trident::data {
namespace {

bool is_closing(const std::string& w) {
  return w == "," || w == "." || w == ";" || w == ":" || w == "?" || w == "!" || w == ")" || w == "]" || w == "}" ||
         w == "''";
}
bool is_opening(const std::string& w) { return w == "(" || w == "[" || w == "{" || w == "``"; }

// Appends one sentence's tokens to `out`; `glue` says whether the previous token
// (across sentences too) forbids a space before the next one.
void append_sentence(const std::string& line, std::string& out, bool& glue) {
  std::istringstream ss(line);
  for (std::string token; ss >> token;) {
    const size_t slash = token.rfind('/');
    std::string word = (slash == std::string::npos || slash == 0) ? token : token.substr(0, slash);
    const bool closing = is_closing(word);
    const bool opening = is_opening(word);
    if (!out.empty() && out.back() != '\n' && !glue && !closing) out += ' ';
    out += (word == "``" || word == "''") ? std::string("\"") : word;
    glue = opening;
  }
}

}  // namespace

std::string brown_to_text(const std::string& tagged) {
  std::string out;
  std::istringstream in(tagged);
  bool in_paragraph = false;
  bool glue = false;
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) {
      in_paragraph = false;
      continue;
    }
    if (!in_paragraph && !out.empty()) out += "\n\n";
    if (!in_paragraph) glue = false;
    append_sentence(line, out, glue);
    in_paragraph = true;
  }
  if (!out.empty()) out += '\n';
  return out;
}

bool is_brown_document_name(const std::string& f) {
  return f.size() == 4 && f[0] == 'c' && f[1] >= 'a' && f[1] <= 'r' && f[2] >= '0' && f[2] <= '9' && f[3] >= '0' &&
         f[3] <= '9';
}

}  // namespace trident::data
