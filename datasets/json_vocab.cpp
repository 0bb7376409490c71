// GPT-2's encoder.json through core/json's reader: one flat object of
// string keys to token ids.
#include "datasets/json_vocab.h"

#include "datasets/errors.h"
#include "core/json.h"

namespace trident::data {

std::vector<std::pair<std::string, uint32_t>> parse_json_vocab(const std::string& text, const std::string& source) {
  try {
    const json::Value doc = json::parse(text, source);
    const auto& members = json::as_object(doc, source);
    std::vector<std::pair<std::string, uint32_t>> entries;
    entries.reserve(members.size());
    for (const auto& [key, value] : members) {
      const std::string what = source + ": id of " + json::quote(key);
      const int64_t id = json::as_int(value, what);
      if (id < 0 || id > static_cast<int64_t>(UINT32_MAX))
        throw DataError(what + " is " + std::to_string(id) + ", not a token id (0 .. 4294967295)");
      entries.emplace_back(key, static_cast<uint32_t>(id));
    }
    return entries;
  } catch (const json::JsonError& e) {
    throw DataError(e.what());
  }
}

}  // namespace trident::data
