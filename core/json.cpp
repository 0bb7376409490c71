// JSON reader (recursive descent) and writer: see json.h.
#include "core/json.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace trident::json {

Value Value::boolean(bool b) {
  Value v;
  v.type_ = Type::Bool;
  v.bool_ = b;
  return v;
}
Value Value::number(int64_t n) {
  Value v;
  v.type_ = Type::Number;
  v.text_ = std::to_string(n);
  return v;
}
Value Value::number(double d) {
  if (!std::isfinite(d)) throw JsonError("JSON cannot hold the number " + std::to_string(d));
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", d);
  // The shortest text that reads back exactly (1e-05, not 1.0000000000000001e-05).
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  Value v;
  v.type_ = Type::Number;
  v.text_ = buf;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.type_ = Type::String;
  v.text_ = std::move(s);
  return v;
}
Value Value::array(std::vector<Value> items) {
  Value v;
  v.type_ = Type::Array;
  v.items_ = std::move(items);
  return v;
}
Value Value::object() {
  Value v;
  v.type_ = Type::Object;
  return v;
}

namespace {
[[noreturn]] void wrong(const std::string& what, const char* expected) {
  throw JsonError(what + ": expected " + expected);
}
}  // namespace

bool Value::as_bool(const std::string& what) const {
  if (type_ != Type::Bool) wrong(what, "true or false");
  return bool_;
}
int64_t Value::as_int(const std::string& what) const {
  if (type_ != Type::Number || text_.find_first_of(".eE") != std::string::npos) wrong(what, "an integer");
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text_.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') wrong(what, "an integer that fits in 64 bits");
  return v;
}
double Value::as_double(const std::string& what) const {
  if (type_ != Type::Number) wrong(what, "a number");
  return std::strtod(text_.c_str(), nullptr);
}
const std::string& Value::as_string(const std::string& what) const {
  if (type_ != Type::String) wrong(what, "a string");
  return text_;
}
const std::vector<Value>& Value::as_array(const std::string& what) const {
  if (type_ != Type::Array) wrong(what, "an array");
  return items_;
}
std::vector<int64_t> Value::as_int_array(const std::string& what) const {
  std::vector<int64_t> out;
  for (const Value& v : as_array(what)) out.push_back(v.as_int(what + "[" + std::to_string(out.size()) + "]"));
  return out;
}
const std::vector<std::pair<std::string, Value>>& Value::as_object(const std::string& what) const {
  if (type_ != Type::Object) wrong(what, "an object");
  return members_;
}
const Value* Value::find(const std::string& key) const {
  for (const auto& [k, v] : members_)
    if (k == key) return &v;
  return nullptr;
}
const Value& Value::at(const std::string& key, const std::string& what) const {
  as_object(what);
  const Value* v = find(key);
  if (!v) throw JsonError(what + ": missing \"" + key + "\"");
  return *v;
}
Value& Value::set(const std::string& key, Value v) {
  type_ = Type::Object;
  for (auto& [k, old] : members_)
    if (k == key) return old = std::move(v);
  members_.emplace_back(key, std::move(v));
  return members_.back().second;
}
void Value::push(Value v) {
  type_ = Type::Array;
  items_.push_back(std::move(v));
}

// ---- reading ----------------------------------------------------------------

class Parser {
 public:
  Parser(const std::string& s, const std::string& source) : s_(s), source_(source) {}

  Value document() {
    Value v = value(0);
    space();
    if (pos_ != s_.size()) fail("trailing characters after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw JsonError(source_ + ": invalid JSON at byte " + std::to_string(pos_) + ": " + what);
  }
  void space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(std::string("expected '") + c + "'");
  }
  void word(const char* w) {
    for (const char* p = w; *p; ++p, ++pos_)
      if (pos_ >= s_.size() || s_[pos_] != *p) fail(std::string("expected ") + w);
  }

  Value value(int depth) {
    if (depth > 64) fail("nesting deeper than 64");
    space();
    if (pos_ >= s_.size()) fail("unexpected end of text");
    const char c = s_[pos_];
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') return Value::string(string());
    if (c == 't') return word("true"), Value::boolean(true);
    if (c == 'f') return word("false"), Value::boolean(false);
    if (c == 'n') return word("null"), Value();
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) return number();
    fail(std::string("unexpected character '") + c + "'");
  }

  Value object(int depth) {
    Value v = Value::object();
    ++pos_;
    if (eat('}')) return v;
    const size_t start = pos_ - 1;  // the '{'
    do {
      space();
      if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a string key");
      std::string key = string();
      expect(':');
      v.members_.emplace_back(std::move(key), value(depth + 1));
    } while (eat(','));
    expect('}');
    // A repeated key is an error: readers disagree on which value wins (Python's
    // json takes the last, a first-match lookup the first), so the file is ambiguous.
    // Sorted views keep this O(n log n) on a tokenizer's 100k-entry vocabulary.
    if (v.members_.size() > 1) {
      std::vector<std::string_view> keys;
      keys.reserve(v.members_.size());
      for (const auto& m : v.members_) keys.emplace_back(m.first);
      std::sort(keys.begin(), keys.end());
      const auto dup = std::adjacent_find(keys.begin(), keys.end());
      if (dup != keys.end()) {
        pos_ = start;
        fail("the object starting here has the key \"" + std::string(*dup) + "\" twice");
      }
    }
    return v;
  }

  Value array(int depth) {
    Value v = Value::array();
    ++pos_;
    if (eat(']')) return v;
    do v.items_.push_back(value(depth + 1));
    while (eat(','));
    expect(']');
    return v;
  }

  Value number() {
    const size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    auto digits = [&] {
      const size_t d = pos_;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      if (pos_ == d) fail("expected a digit");
    };
    digits();
    if (pos_ < s_.size() && s_[pos_] == '.') ++pos_, digits();
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      digits();
    }
    Value v;
    v.type_ = Value::Type::Number;
    v.text_ = s_.substr(start, pos_ - start);
    return v;
  }

  uint32_t hex4() {
    if (pos_ + 4 > s_.size()) fail("truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else fail("bad hex digit in \\u escape");
    }
    return v;
  }

  std::string string() {
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) fail("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) fail("unterminated escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (s_.compare(pos_, 2, "\\u") != 0) fail("high surrogate without a low surrogate");
            pos_ += 2;
            const uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("high surrogate followed by a non-low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("lone low surrogate");
          }
          append_utf8(cp, out);
          break;
        }
        default: fail(std::string("unknown escape \\") + e);
      }
    }
  }

  const std::string& s_;
  const std::string& source_;
  size_t pos_ = 0;
};

Value parse(const std::string& text, const std::string& source) { return Parser(text, source).document(); }

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// ---- writing ----------------------------------------------------------------

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (ch < 0x20 || ch == 0x7f) {  // DEL too, so the literal is also a TOML basic string
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", ch);
          out += buf;
        } else {
          out += static_cast<char>(ch);
        }
    }
  }
  return out + "\"";
}

void write_value(const Value& v, int indent, int level, std::string& out) {
  auto newline = [&](int lv) {
    if (indent <= 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * lv), ' ');
  };
  switch (v.type_) {
    case Value::Type::Null: out += "null"; break;
    case Value::Type::Bool: out += v.bool_ ? "true" : "false"; break;
    case Value::Type::Number: out += v.text_; break;
    case Value::Type::String: out += quote(v.text_); break;
    case Value::Type::Array: {
      // Arrays of scalars stay on one line (shapes, offsets).
      bool flat = true;
      for (const Value& x : v.items_) flat = flat && x.type_ != Value::Type::Array && x.type_ != Value::Type::Object;
      out += '[';
      for (size_t i = 0; i < v.items_.size(); ++i) {
        if (i) out += ",";
        if (!flat) newline(level + 1);
        else if (i && indent > 0) out += ' ';
        write_value(v.items_[i], indent, level + 1, out);
      }
      if (!flat && !v.items_.empty()) newline(level);
      out += ']';
      break;
    }
    case Value::Type::Object: {
      out += '{';
      for (size_t i = 0; i < v.members_.size(); ++i) {
        if (i) out += ',';
        newline(level + 1);
        out += quote(v.members_[i].first);
        out += indent > 0 ? ": " : ":";
        write_value(v.members_[i].second, indent, level + 1, out);
      }
      if (!v.members_.empty()) newline(level);
      out += '}';
      break;
    }
  }
}

std::string dump(const Value& v, int indent) {
  std::string out;
  write_value(v, indent, 0, out);
  return out;
}

}  // namespace trident::json
