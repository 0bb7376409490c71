// A small JSON value, reader and writer for the files Trident writes and reads
// itself: checkpoint indexes, safetensors headers, Hugging Face config.json.
// Pure C++. Numbers keep their text so 64-bit integers (byte offsets) survive
// exactly; objects keep their key order.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace trident::json {

// A caller error: malformed JSON or a missing/mistyped field. The message
// names the source (a file) and what is wrong.
class JsonError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Value {
 public:
  enum class Type { Null, Bool, Number, String, Array, Object };

  Value() = default;
  static Value null() { return Value(); }
  static Value boolean(bool b);
  static Value number(int64_t v);
  static Value number(double v);
  static Value string(std::string s);
  static Value array(std::vector<Value> items = {});
  static Value object();

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::Null; }
  bool is_object() const { return type_ == Type::Object; }
  bool is_array() const { return type_ == Type::Array; }
  bool is_string() const { return type_ == Type::String; }
  bool is_number() const { return type_ == Type::Number; }

  // Typed access; throws JsonError("<what>: expected ...") on the wrong type.
  bool as_bool(const std::string& what) const;
  int64_t as_int(const std::string& what) const;  // an integer number (no fraction or exponent)
  double as_double(const std::string& what) const;
  const std::string& as_string(const std::string& what) const;
  const std::vector<Value>& as_array(const std::string& what) const;
  std::vector<int64_t> as_int_array(const std::string& what) const;
  const std::vector<std::pair<std::string, Value>>& as_object(const std::string& what) const;

  // Objects: find returns null when absent; at throws JsonError naming `what` and the key.
  const Value* find(const std::string& key) const;
  const Value& at(const std::string& key, const std::string& what) const;
  Value& set(const std::string& key, Value v);  // replaces or appends
  void push(Value v);                            // arrays

 private:
  friend class Parser;
  friend void write_value(const Value&, int, int, std::string&);
  Type type_ = Type::Null;
  bool bool_ = false;
  std::string text_;  // number text or string contents
  std::vector<Value> items_;
  std::vector<std::pair<std::string, Value>> members_;
};

// Parses a whole document; throws JsonError "<source>: invalid JSON at byte N: ...".
Value parse(const std::string& text, const std::string& source);
// JSON text of v: compact, or one member per line indented by `indent` spaces.
std::string dump(const Value& v, int indent = 0);
// A JSON string literal of s (quotes and escapes added). Control characters
// and DEL are written as \u00XX, so the literal is also a TOML basic string.
std::string quote(const std::string& s);

// Appends code point cp (< 0x110000) to out as UTF-8.
void append_utf8(uint32_t cp, std::string& out);

}  // namespace trident::json
