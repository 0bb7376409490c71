// What Trident adds to nlohmann-json: see json.h.
#include "core/json.h"

#include <cmath>
#include <cstddef>
#include <iterator>
#include <unordered_set>
#include <utility>

namespace trident::json {

namespace {

// The parser reads the text through this iterator, which records how far it
// has read, so that a parse callback can say where in the text it is.
class CountingIterator {
 public:
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  CountingIterator(const char* p, const char* begin, size_t* read) : p_(p), begin_(begin), read_(read) {}
  reference operator*() const { return *p_; }
  CountingIterator& operator++() {
    *read_ = static_cast<size_t>(++p_ - begin_);
    return *this;
  }
  CountingIterator operator++(int) {
    CountingIterator old = *this;
    ++*this;
    return old;
  }
  bool operator==(const CountingIterator& o) const { return p_ == o.p_; }
  bool operator!=(const CountingIterator& o) const { return p_ != o.p_; }

 private:
  const char* p_;
  const char* begin_;
  size_t* read_;
};

// Builds the document from nlohmann's parse events. Its own builder would
// insert each member through ordered_map's linear search for the key, O(n^2)
// on a tokenizer's 100k-entry vocabulary; keys are checked here instead (one
// hash set per open object) and members appended.
class Builder : public nlohmann::json_sax<Value> {
 public:
  explicit Builder(const size_t* read) : read_(read) {}
  Value root;
  bool refused = false;
  size_t byte = 0;  // where the document was refused, and why
  std::string why;

  bool null() override { return put(Value()); }
  bool boolean(bool b) override { return put(Value(b)); }
  bool number_integer(number_integer_t n) override { return put(Value(n)); }
  bool number_unsigned(number_unsigned_t n) override { return put(Value(n)); }
  bool number_float(number_float_t d, const string_t&) override { return put(Value(d)); }
  bool string(string_t& s) override { return put(Value(std::move(s))); }
  bool binary(binary_t&) override { return refuse(*read_ - 1, "binary data"); }  // not produced by JSON text
  bool start_object(std::size_t) override { return open(Value::object()); }
  bool start_array(std::size_t) override { return open(Value::array()); }
  bool end_object() override {
    keys_.pop_back();
    open_.pop_back();
    return true;
  }
  bool end_array() override {
    open_.pop_back();
    return true;
  }
  // A repeated key is an error: readers disagree on which value wins (Python's
  // json takes the last, a first-match lookup the first), so the file is ambiguous.
  bool key(string_t& k) override {
    if (!keys_.back().second.insert(k).second)
      return refuse(keys_.back().first, "the object starting here has the key " + quote(k) + " twice");
    key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::json::exception& e) override {
    // e.what(): "[json.exception.parse_error.101] parse error at line 1, column 13: syntax error ..."
    std::string m = e.what();
    m = m.substr(m.find(']') + 2);
    const size_t at = m.find(" at line "), colon = m.find(": ");
    if (at != std::string::npos && colon != std::string::npos && at < colon)
      m = m.substr(colon + 2) + " (" + m.substr(at + 4, colon - at - 4) + ")";
    return refuse(position > 0 ? position - 1 : 0, m);  // position counts the offending byte
  }

 private:
  bool refuse(size_t at, std::string text) {
    refused = true;
    byte = at;
    why = std::move(text);
    return false;
  }
  // Places v in the open container (after the key just read) or as the root.
  Value* place(Value v) {
    if (open_.empty()) return &(root = std::move(v));
    Value& top = *open_.back();
    if (top.is_array()) return &top.get_ref<Value::array_t&>().emplace_back(std::move(v));
    // ordered_map is a vector of members; appending keeps the file's order.
    auto& members = static_cast<std::vector<Object::value_type>&>(top.get_ref<Object&>());
    return &members.emplace_back(std::move(key_), std::move(v)).second;
  }
  bool put(Value v) {
    place(std::move(v));
    return true;
  }
  bool open(Value container) {
    if (open_.size() >= 64) return refuse(*read_ - 1, "nesting deeper than 64");
    const bool object = container.is_object();
    open_.push_back(place(std::move(container)));
    if (object) keys_.emplace_back(*read_ - 1, std::unordered_set<std::string>{});
    return true;
  }

  const size_t* read_;             // bytes the parser has read: the last is the current token's
  std::vector<Value*> open_;       // the open containers, outermost first
  std::vector<std::pair<size_t, std::unordered_set<std::string>>> keys_;  // each open object's '{' and keys
  std::string key_;                // the key of the member being read
};

[[noreturn]] void wrong(const std::string& what, const char* expected) {
  throw JsonError(what + ": expected " + expected);
}

}  // namespace

Value parse(const std::string& text, const std::string& source) {
  size_t read = 0;
  const char* b = text.data();
  Builder builder(&read);
  Value::sax_parse(CountingIterator(b, b, &read), CountingIterator(b + text.size(), b, &read), &builder);
  if (builder.refused)
    throw JsonError(source + ": invalid JSON at byte " + std::to_string(builder.byte) + ": " + builder.why);
  return std::move(builder.root);
}

std::string dump(const Value& v, int indent) {
  try {
    return indent > 0 ? v.dump(indent) : v.dump();
  } catch (const nlohmann::json::type_error& e) {  // the one dump throws: a string that is not UTF-8
    throw JsonError(std::string("cannot write JSON: ") + e.what());
  }
}

std::string quote(const std::string& s) {
  const std::string text = Value(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\x7f') out += "\\u007f";  // TOML forbids a raw DEL; JSON allows it
    else out += c;
  }
  return out;
}

Value number(double v) {
  if (!std::isfinite(v)) throw JsonError("JSON cannot hold the number " + std::to_string(v));
  return Value(v);
}

bool as_bool(const Value& v, const std::string& what) {
  if (!v.is_boolean()) wrong(what, "true or false");
  return v.get<bool>();
}
int64_t as_int(const Value& v, const std::string& what) {
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    wrong(what, "an integer that fits in 64 bits");
  if (!v.is_number_integer()) wrong(what, "an integer");
  return v.get<int64_t>();
}
double as_double(const Value& v, const std::string& what) {
  if (!v.is_number()) wrong(what, "a number");
  return v.get<double>();
}
const std::string& as_string(const Value& v, const std::string& what) {
  if (!v.is_string()) wrong(what, "a string");
  return v.get_ref<const std::string&>();
}
const std::vector<Value>& as_array(const Value& v, const std::string& what) {
  if (!v.is_array()) wrong(what, "an array");
  return v.get_ref<const Value::array_t&>();
}
std::vector<int64_t> as_int_array(const Value& v, const std::string& what) {
  std::vector<int64_t> out;
  for (const Value& x : as_array(v, what)) out.push_back(as_int(x, what + "[" + std::to_string(out.size()) + "]"));
  return out;
}
const Object& as_object(const Value& v, const std::string& what) {
  if (!v.is_object()) wrong(what, "an object");
  return v.get_ref<const Object&>();
}
const Value* find(const Value& v, const std::string& key) {
  if (!v.is_object()) return nullptr;
  const auto it = v.find(key);
  return it == v.end() ? nullptr : &*it;
}
const Value& at(const Value& v, const std::string& key, const std::string& what) {
  as_object(v, what);
  const Value* x = find(v, key);
  if (!x) throw JsonError(what + ": missing \"" + key + "\"");
  return *x;
}

}  // namespace trident::json
