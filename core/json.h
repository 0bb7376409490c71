// JSON for the files Trident reads and writes (checkpoint indexes, safetensors
// headers, Hugging Face config.json and tokenizer.json, rank summaries):
// nlohmann-json's ordered_json, which keeps key order and holds 64-bit integers
// exactly, plus what Trident asks of every JSON it reads and the typed reads
// that name the field in their errors. Pure C++; include it only where JSON is
// read or written (the header is large).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/json_fwd.h"

namespace trident::json {

using Object = Value::object_t;  // a vector of (key, value) pairs

// A caller error: malformed JSON or a missing/mistyped field. The message
// names the source (a file) and what is wrong.
class JsonError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses a whole document; throws JsonError "<source>: invalid JSON at byte N
// (line L, column C): ...". A key repeated within one object is an error, and
// so is nesting deeper than 64.
Value parse(const std::string& text, const std::string& source);
// JSON text of v: compact, or one member per line indented by `indent` spaces.
// Throws JsonError for a string that is not UTF-8.
std::string dump(const Value& v, int indent = 0);
// A JSON string literal of s (quotes and escapes added). Control characters
// and DEL are written as \u00XX, so the literal is also a TOML basic string;
// bytes that are not UTF-8 become U+FFFD (it is text for a message or a file).
std::string quote(const std::string& s);

// A number; throws JsonError for NaN and infinities, which JSON cannot hold.
Value number(double v);
inline Value number(int64_t v) { return Value(v); }

// Typed reads; each throws JsonError("<what>: expected ...") on the wrong type.
bool as_bool(const Value& v, const std::string& what);
int64_t as_int(const Value& v, const std::string& what);  // an integer number (no fraction or exponent)
double as_double(const Value& v, const std::string& what);
const std::string& as_string(const Value& v, const std::string& what);
const std::vector<Value>& as_array(const Value& v, const std::string& what);
std::vector<int64_t> as_int_array(const Value& v, const std::string& what);
const Object& as_object(const Value& v, const std::string& what);

// Object members: find returns null when absent (or v is no object); at throws
// JsonError naming `what` and the key.
const Value* find(const Value& v, const std::string& key);
const Value& at(const Value& v, const std::string& key, const std::string& what);

}  // namespace trident::json
