#include "engine/json_constraint.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <list>
#include <mutex>
#include <numeric>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace hlx::engine {

// ordered_json keeps properties in their declared order (plain json sorts keys).
using json = nlohmann::ordered_json;

// --- the compiled grammar ---

namespace {

// kTagged: anyOf over objects told apart by their first property, a required const string (the
// tool-call shape {"name": const, "arguments": ...}): keys/values/required hold that one
// property (its value: the literals of every branch, sorted), branches[i] the object of literal i.
enum NodeKind : uint8_t { kAny, kObject, kAnyObject, kArray, kString, kNumber, kInteger, kLiterals, kUnion, kTagged };

// One pattern position: a byte class (bits 128..255 = any non-ASCII character's lead byte) and
// how often it may repeat.
struct PatternAtom {
  uint64_t cls[4] = {0, 0, 0, 0};
  enum Rep : uint8_t { kOnce, kOptional, kStar } rep = kOnce;
  bool has(uint8_t c) const { return (cls[c >> 6] >> (c & 63)) & 1; }
};

struct Node {
  NodeKind kind = kAny;
  // kObject
  std::vector<std::string> keys;  // serialized with quotes: "\"name\""
  std::vector<int> values;
  std::vector<bool> required;
  // kArray (items; min; max, -1 = none)
  int items = 0;
  int64_t min_items = 0, max_items = -1;
  // kString
  int64_t min_len = 0, max_len = -1;
  std::vector<PatternAtom> pattern;  // empty = any
  bool has_pattern = false;
  // kLiterals: compact JSON texts
  std::vector<std::string> literals;
  // kUnion: branches
  std::vector<int> branches;
};

// Fixed nodes of every grammar.
constexpr int kNodeAnyValue = 0, kNodeAnyString = 1, kNodeAnyNumber = 2, kNodeAnyLiterals = 3, kNodeAnyObject = 4,
              kNodeAnyArray = 5;

enum FrameKind : uint8_t { kFValue, kFObject, kFAnyObject, kFArray, kFString, kFNumber, kFLiteral };

}  // namespace

struct JsonGrammarImpl {
  std::vector<Node> nodes;
  int root = kNodeAnyObject;
};

namespace {

JsonGrammarImpl base_grammar() {
  JsonGrammarImpl g;
  g.nodes.resize(6);
  g.nodes[kNodeAnyValue].kind = kAny;
  g.nodes[kNodeAnyString].kind = kString;
  g.nodes[kNodeAnyNumber].kind = kNumber;
  g.nodes[kNodeAnyLiterals].kind = kLiterals;
  g.nodes[kNodeAnyLiterals].literals = {"true", "false", "null"};
  g.nodes[kNodeAnyObject].kind = kAnyObject;
  g.nodes[kNodeAnyArray].kind = kArray;
  g.nodes[kNodeAnyArray].items = kNodeAnyValue;
  return g;
}

// The bytes a node's value can start with (256-bit set).
struct ByteSet {
  uint64_t w[4] = {0, 0, 0, 0};
  void add(uint8_t c) { w[c >> 6] |= uint64_t(1) << (c & 63); }
  bool has(uint8_t c) const { return (w[c >> 6] >> (c & 63)) & 1; }
  bool overlaps(const ByteSet& o) const {
    return (w[0] & o.w[0]) || (w[1] & o.w[1]) || (w[2] & o.w[2]) || (w[3] & o.w[3]);
  }
};

ByteSet first_bytes(const JsonGrammarImpl& g, int n) {
  const Node& node = g.nodes[size_t(n)];
  ByteSet s;
  auto number = [&] {
    s.add('-');
    for (char c = '0'; c <= '9'; ++c) s.add(uint8_t(c));
  };
  switch (node.kind) {
    case kAny:
      s.add('{'), s.add('['), s.add('"'), s.add('t'), s.add('f'), s.add('n');
      number();
      break;
    case kObject:
    case kAnyObject:
    case kTagged:
      s.add('{');
      break;
    case kArray:
      s.add('[');
      break;
    case kString:
      s.add('"');
      break;
    case kNumber:
    case kInteger:
      number();
      break;
    case kLiterals:
      for (const auto& l : node.literals) s.add(uint8_t(l[0]));
      break;
    case kUnion:
      for (int b : node.branches) {
        ByteSet t = first_bytes(g, b);
        for (int i = 0; i < 4; ++i) s.w[i] |= t.w[i];
      }
      break;
  }
  return s;
}

// --- schema compiler ---

class Compiler {
 public:
  explicit Compiler(JsonGrammarImpl& g) : g_(g) {}

  Result<int> compile(const json& s, const std::string& path, int depth) {
    if (depth > kJsonMaxDepth - 2)
      return make_error(ErrorKind::kUnsupported, "json_schema: ", path, " nests deeper than ", kJsonMaxDepth - 2,
                        " levels");
    if (s.is_boolean()) {
      if (s.get<bool>()) return kNodeAnyValue;
      return make_error(ErrorKind::kUnsupported, "json_schema: ", path, " is `false` (matches nothing)");
    }
    if (!s.is_object()) return make_error(ErrorKind::kInvalidArgument, "json_schema: ", path, " is not an object");
    static const char* kKnown[] = {"type",    "properties", "required",    "additionalProperties",
                                   "items",   "minItems",   "maxItems",    "enum",
                                   "const",   "anyOf",      "minLength",   "maxLength",
                                   "pattern", "title",      "description", "$schema",
                                   "strict",  "default",    "examples"};
    std::vector<std::string> unknown;
    for (auto it = s.begin(); it != s.end(); ++it)
      if (std::find_if(std::begin(kKnown), std::end(kKnown), [&](const char* k) { return it.key() == k; }) ==
          std::end(kKnown))
        unknown.push_back(it.key());
    if (!unknown.empty()) {
      std::string list;
      for (const auto& u : unknown) list += (list.empty() ? "" : ", ") + u;
      return make_error(ErrorKind::kUnsupported, "json_schema: ", path, " uses unsupported keyword(s): ", list);
    }
    if (s.contains("enum") || s.contains("const")) {
      Node n;
      n.kind = kLiterals;
      if (s.contains("const")) n.literals.push_back(s["const"].dump());
      if (s.contains("enum")) {
        const json& e = s["enum"];
        if (!e.is_array() || e.empty())
          return make_error(ErrorKind::kInvalidArgument, "json_schema: ", path, ".enum is not a non-empty array");
        for (const json& v : e) n.literals.push_back(v.dump());
      }
      std::sort(n.literals.begin(), n.literals.end());
      n.literals.erase(std::unique(n.literals.begin(), n.literals.end()), n.literals.end());
      if (n.literals.size() > 64)
        return make_error(ErrorKind::kUnsupported, "json_schema: ", path, ".enum has ", n.literals.size(),
                          " values, more than 64");
      return add(std::move(n));
    }
    if (s.contains("anyOf")) {
      const json& a = s["anyOf"];
      if (!a.is_array() || a.empty())
        return make_error(ErrorKind::kInvalidArgument, "json_schema: ", path, ".anyOf is not a non-empty array");
      std::vector<int> branches;
      for (size_t i = 0; i < a.size(); ++i) {
        HLX_ASSIGN_OR_RETURN(int b, compile(a[i], str_cat(path, ".anyOf[", i, "]"), depth + 1));
        branches.push_back(b);
      }
      return make_union(std::move(branches), path + ".anyOf");
    }
    if (!s.contains("type")) {
      for (const char* k :
           {"properties", "required", "items", "minItems", "maxItems", "minLength", "maxLength", "pattern"})
        if (s.contains(k))
          return make_error(ErrorKind::kUnsupported, "json_schema: ", path, " has `", k, "` but no `type`");
      return kNodeAnyValue;
    }
    const json& t = s["type"];
    if (t.is_array()) {
      if (t.empty()) return make_error(ErrorKind::kInvalidArgument, "json_schema: ", path, ".type is an empty list");
      std::vector<int> branches;
      // Each keyword applies to the branches of its type (JSON schema ignores it for the others)
      // but must apply to one of them.
      std::vector<std::string> names;
      for (const json& name : t) {
        if (!name.is_string())
          return make_error(ErrorKind::kInvalidArgument, "json_schema: ", path, ".type lists a non-string");
        names.push_back(name.get<std::string>());
      }
      for (const char* k : kTypedKeywords)
        if (s.contains(k) &&
            std::none_of(names.begin(), names.end(), [&](const std::string& n) { return applies(k, n); }))
          return make_error(ErrorKind::kUnsupported, "json_schema: ", path, ": `", k,
                            "` does not apply to any of its types");
      for (const std::string& name : names) {
        HLX_ASSIGN_OR_RETURN(int b, typed(s, name, path, depth, /*foreign_ok=*/true));
        branches.push_back(b);
      }
      return branches.size() == 1 ? Result<int>(branches[0]) : make_union(std::move(branches), path + ".type");
    }
    if (!t.is_string()) return make_error(ErrorKind::kInvalidArgument, "json_schema: ", path, ".type is not a string");
    return typed(s, t.get<std::string>(), path, depth);
  }

 private:
  int add(Node n) {
    g_.nodes.push_back(std::move(n));
    return int(g_.nodes.size() - 1);
  }

  Result<int> make_union(std::vector<int> branches, const std::string& path) {
    // integer and number both start with a digit: number covers integer.
    auto kind = [&](int b) { return g_.nodes[size_t(b)].kind; };
    bool has_number = std::any_of(branches.begin(), branches.end(), [&](int b) { return kind(b) == kNumber; });
    if (has_number)
      branches.erase(std::remove_if(branches.begin(), branches.end(), [&](int b) { return kind(b) == kInteger; }),
                     branches.end());
    if (branches.size() > 1)
      if (Result<int> t = tagged(branches); !t.ok() || *t >= 0) return t;
    for (size_t i = 0; i < branches.size(); ++i)
      for (size_t j = i + 1; j < branches.size(); ++j)
        if (first_bytes(g_, branches[i]).overlaps(first_bytes(g_, branches[j])))
          return make_error(ErrorKind::kUnsupported, "json_schema: ", path, ": branches ", i, " and ", j,
                            " can start with the same character (only branches of different types are supported)");
    if (branches.size() == 1) return branches[0];
    Node n;
    n.kind = kUnion;
    n.branches = std::move(branches);
    return add(std::move(n));
  }

  // Branches that are all objects whose first property is required, has the same key in each and
  // a const string value that differs between them: a kTagged node. -1: not that shape.
  Result<int> tagged(const std::vector<int>& branches) {
    std::vector<std::pair<std::string, int>> tags;  // literal text, branch node
    for (int b : branches) {
      const Node& n = g_.nodes[size_t(b)];
      if (n.kind != kObject || n.keys.empty() || !n.required[0] || n.keys[0] != g_.nodes[size_t(branches[0])].keys[0])
        return -1;
      const Node& v = g_.nodes[size_t(n.values[0])];
      if (v.kind != kLiterals || v.literals.size() != 1 || v.literals[0][0] != '"') return -1;
      tags.emplace_back(v.literals[0], b);
    }
    if (tags.size() > 64) return -1;
    std::sort(tags.begin(), tags.end());
    for (size_t i = 1; i < tags.size(); ++i)
      if (tags[i].first == tags[i - 1].first) return -1;
    Node lits;
    lits.kind = kLiterals;
    Node n;
    n.kind = kTagged;
    for (const auto& [text, b] : tags) {
      lits.literals.push_back(text);
      n.branches.push_back(b);
    }
    n.keys = {g_.nodes[size_t(branches[0])].keys[0]};
    n.values = {add(std::move(lits))};
    n.required = {true};
    return add(std::move(n));
  }

  Result<int64_t> count(const json& s, const char* key, const std::string& path) {
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      return make_error(ErrorKind::kInvalidArgument, "json_schema: ", path, ".", key, " = ", v.dump(),
                        " is not a non-negative integer");
    return v.get<int64_t>();
  }

  static constexpr const char* kTypedKeywords[] = {"properties", "required",  "additionalProperties",
                                                   "items",      "minItems",  "maxItems",
                                                   "minLength",  "maxLength", "pattern"};
  static bool applies(const char* k, const std::string& type) {
    const std::string key = k;
    if (type == "object") return key == "properties" || key == "required" || key == "additionalProperties";
    if (type == "array") return key == "items" || key == "minItems" || key == "maxItems";
    if (type == "string") return key == "minLength" || key == "maxLength" || key == "pattern";
    return false;
  }

  bool foreign_ok_ = false;  // typed() of one name of a type list: other types' keywords are fine

  Status only(const json& s, const std::string& type, const std::string& path, std::initializer_list<const char*>) {
    if (foreign_ok_) return ok_status();
    for (const char* k : kTypedKeywords)
      if (s.contains(k) && !applies(k, type))
        return make_error(ErrorKind::kUnsupported, "json_schema: ", path, ": `", k, "` does not apply to type ", type);
    return ok_status();
  }

  Result<int> typed(const json& s, const std::string& type, const std::string& path, int depth,
                    bool foreign_ok = false) {
    foreign_ok_ = foreign_ok;
    if (type == "object") {
      HLX_RETURN_IF_ERROR(only(s, type, path, {"properties", "required", "additionalProperties"}));
      if (s.contains("additionalProperties")) {
        const json& ap = s["additionalProperties"];
        if (!(ap.is_boolean() && !ap.get<bool>()) && s.contains("properties"))
          return make_error(ErrorKind::kUnsupported, "json_schema: ", path,
                            ".additionalProperties must be false (extra properties are not generated)");
      }
      if (!s.contains("properties")) {
        if (s.contains("required") && !s["required"].empty())
          return make_error(ErrorKind::kUnsupported, "json_schema: ", path, ".required without properties");
        return kNodeAnyObject;
      }
      const json& props = s["properties"];
      if (!props.is_object())
        return make_error(ErrorKind::kInvalidArgument, "json_schema: ", path, ".properties is not an object");
      if (props.size() > 64)
        return make_error(ErrorKind::kUnsupported, "json_schema: ", path, " has ", props.size(),
                          " properties, more than 64");
      Node n;
      n.kind = kObject;
      // nlohmann::json sorts keys; the declared order is the text's, kept by ordered_json.
      for (const auto& [k, v] : props.items()) {
        HLX_ASSIGN_OR_RETURN(int c, compile(v, path + ".properties." + k, depth + 1));
        n.keys.push_back(json(k).dump());
        n.values.push_back(c);
        n.required.push_back(false);
      }
      if (s.contains("required")) {
        const json& r = s["required"];
        if (!r.is_array())
          return make_error(ErrorKind::kInvalidArgument, "json_schema: ", path, ".required is not an array");
        for (const json& name : r) {
          if (!name.is_string())
            return make_error(ErrorKind::kInvalidArgument, "json_schema: ", path, ".required lists a non-string");
          const std::string quoted = json(name.get<std::string>()).dump();
          auto it = std::find(n.keys.begin(), n.keys.end(), quoted);
          if (it == n.keys.end())
            return make_error(ErrorKind::kInvalidArgument, "json_schema: ", path, ".required names \"",
                              name.get<std::string>(), "\", which is not among its properties");
          n.required[size_t(it - n.keys.begin())] = true;
        }
      }
      return add(std::move(n));
    }
    if (type == "array") {
      HLX_RETURN_IF_ERROR(only(s, type, path, {"items", "minItems", "maxItems"}));
      Node n;
      n.kind = kArray;
      n.items = kNodeAnyValue;
      if (s.contains("items")) {
        HLX_ASSIGN_OR_RETURN(n.items, compile(s["items"], path + ".items", depth + 1));
      }
      if (s.contains("minItems")) {
        HLX_ASSIGN_OR_RETURN(n.min_items, count(s, "minItems", path));
      }
      if (s.contains("maxItems")) {
        HLX_ASSIGN_OR_RETURN(n.max_items, count(s, "maxItems", path));
      }
      if (n.max_items >= 0 && n.max_items < n.min_items)
        return make_error(ErrorKind::kInvalidArgument, "json_schema: ", path, ".maxItems = ", n.max_items,
                          " is below minItems = ", n.min_items);
      return add(std::move(n));
    }
    if (type == "string") {
      HLX_RETURN_IF_ERROR(only(s, type, path, {"minLength", "maxLength", "pattern"}));
      Node n;
      n.kind = kString;
      if (s.contains("minLength")) {
        HLX_ASSIGN_OR_RETURN(n.min_len, count(s, "minLength", path));
      }
      if (s.contains("maxLength")) {
        HLX_ASSIGN_OR_RETURN(n.max_len, count(s, "maxLength", path));
      }
      if (n.max_len >= 0 && n.max_len < n.min_len)
        return make_error(ErrorKind::kInvalidArgument, "json_schema: ", path, ".maxLength = ", n.max_len,
                          " is below minLength = ", n.min_len);
      if (s.contains("pattern")) {
        if (!s["pattern"].is_string())
          return make_error(ErrorKind::kInvalidArgument, "json_schema: ", path, ".pattern is not a string");
        HLX_ASSIGN_OR_RETURN(n.pattern, compile_pattern(s["pattern"].get<std::string>(), path + ".pattern"));
        n.has_pattern = true;
      }
      if (!n.has_pattern && n.min_len == 0 && n.max_len < 0) return kNodeAnyString;
      return add(std::move(n));
    }
    HLX_RETURN_IF_ERROR(only(s, type, path, {}));
    if (type == "number") return kNodeAnyNumber;
    if (type == "integer") {
      Node n;
      n.kind = kInteger;
      return add(std::move(n));
    }
    Node n;
    n.kind = kLiterals;
    if (type == "boolean")
      n.literals = {"false", "true"};
    else if (type == "null")
      n.literals = {"null"};
    else
      return make_error(ErrorKind::kUnsupported, "json_schema: ", path, ".type \"", type,
                        "\" is not a JSON-schema type");
    return add(std::move(n));
  }

  static Result<std::vector<PatternAtom>> compile_pattern(const std::string& p, const std::string& path) {
    auto bad = [&](const std::string& why) {
      return make_error(ErrorKind::kUnsupported, "json_schema: ", path, " \"", p, "\": ", why,
                        " (supported: literals, \\d \\w \\s, '.', [classes], ? * + {m,n}; no groups or '|')");
    };
    size_t i = 0, end = p.size();
    if (i < end && p[i] == '^') ++i;
    if (end > i && p[end - 1] == '$' && !(end >= 2 && p[end - 2] == '\\')) --end;
    std::vector<PatternAtom> out;
    auto set_range = [](PatternAtom& a, int lo, int hi) {
      for (int c = lo; c <= hi; ++c) a.cls[c >> 6] |= uint64_t(1) << (c & 63);
    };
    auto set_escape = [&](PatternAtom& a, char e) -> bool {
      switch (e) {
        case 'd':
          set_range(a, '0', '9');
          return true;
        case 'w':
          set_range(a, '0', '9'), set_range(a, 'a', 'z'), set_range(a, 'A', 'Z'), set_range(a, '_', '_');
          return true;
        case 's':
          set_range(a, ' ', ' '), set_range(a, '\t', '\r');
          return true;
        default:
          if (std::isalnum(uint8_t(e))) return false;  // \b, \S, \1 ...: not supported
          set_range(a, uint8_t(e), uint8_t(e));
          return true;
      }
    };
    while (i < end) {
      PatternAtom a;
      const char c = p[i];
      if (c == '(' || c == ')' || c == '|' || c == '^' || c == '$') return bad(str_cat("'", c, "' at ", i));
      if (c == '*' || c == '+' || c == '?' || c == '{')
        return bad(str_cat("quantifier '", c, "' without an atom at ", i));
      if (c == '.') {
        set_range(a, 0, 255);
        a.cls[0] &= ~(uint64_t(1) << '\n');
        ++i;
      } else if (c == '\\') {
        if (i + 1 >= end || !set_escape(a, p[i + 1])) return bad(str_cat("escape at ", i));
        i += 2;
      } else if (c == '[') {
        ++i;
        bool negate = i < end && p[i] == '^';
        if (negate) ++i;
        bool first = true;
        while (i < end && (p[i] != ']' || first)) {
          first = false;
          int lo;
          if (p[i] == '\\') {
            if (i + 1 >= end) return bad("escape at end");
            PatternAtom e;
            if (!set_escape(e, p[i + 1])) return bad(str_cat("escape in class at ", i));
            for (int w = 0; w < 4; ++w) a.cls[w] |= e.cls[w];
            i += 2;
            continue;
          }
          lo = uint8_t(p[i]);
          if (lo >= 128) return bad("non-ASCII character in a class");
          if (i + 2 < end && p[i + 1] == '-' && p[i + 2] != ']') {
            const int hi = uint8_t(p[i + 2]);
            if (hi < lo || hi >= 128) return bad(str_cat("class range at ", i));
            set_range(a, lo, hi);
            i += 3;
          } else {
            set_range(a, lo, lo);
            ++i;
          }
        }
        if (i >= end) return bad("unterminated class");
        ++i;  // ]
        if (negate)
          for (int w = 0; w < 4; ++w) a.cls[w] = ~a.cls[w];
      } else {
        if (uint8_t(c) >= 128) return bad("non-ASCII literal");
        set_range(a, uint8_t(c), uint8_t(c));
        ++i;
      }
      // Never '"', '\' or control characters: pattern strings are written without escapes.
      for (int ch = 0; ch < 32; ++ch) a.cls[0] &= ~(uint64_t(1) << ch);
      a.cls[0] &= ~(uint64_t(1) << '"');
      a.cls[1] &= ~(uint64_t(1) << ('\\' - 64));
      a.cls[1] &= ~(uint64_t(1) << (127 - 64));
      int64_t lo = 1, hi = 1;  // repeat count; hi -1 = unbounded
      if (i < end && (p[i] == '?' || p[i] == '*' || p[i] == '+')) {
        lo = p[i] == '+' ? 1 : 0;
        hi = p[i] == '?' ? 1 : -1;
        ++i;
      } else if (i < end && p[i] == '{') {
        size_t close = p.find('}', i);
        if (close == std::string::npos || close >= end) return bad("unterminated {m,n}");
        const std::string body = p.substr(i + 1, close - i - 1);
        const size_t comma = body.find(',');
        try {
          lo = std::stoll(body.substr(0, comma));
          hi = comma == std::string::npos ? lo : (comma + 1 == body.size() ? -1 : std::stoll(body.substr(comma + 1)));
        } catch (...) {
          return bad(str_cat("count {", body, "}"));
        }
        if (lo < 0 || (hi >= 0 && hi < lo) || lo > 64 || hi > 64) return bad(str_cat("count {", body, "}"));
        i = close + 1;
      }
      if (i < end && (p[i] == '?' || p[i] == '+')) return bad("lazy or possessive quantifier");
      for (int64_t k = 0; k < lo; ++k) out.push_back(a);
      if (hi < 0) {
        a.rep = PatternAtom::kStar;
        out.push_back(a);
      } else {
        a.rep = PatternAtom::kOptional;
        for (int64_t k = lo; k < hi; ++k) out.push_back(a);
      }
      if (out.size() > 63) return bad("more than 63 positions after expanding counts");
    }
    return out;
  }

  JsonGrammarImpl& g_;
};

// --- the automaton ---

// Pattern NFA: bit i = "about to match atom i"; bit n = matched all.
uint64_t pattern_closure(const std::vector<PatternAtom>& atoms, uint64_t set) {
  for (size_t i = 0; i < atoms.size(); ++i)
    if (((set >> i) & 1) && atoms[i].rep != PatternAtom::kOnce) set |= uint64_t(1) << (i + 1);
  return set;
}

uint64_t pattern_step(const std::vector<PatternAtom>& atoms, uint64_t set, uint8_t c) {
  uint64_t next = 0;
  for (size_t i = 0; i < atoms.size(); ++i)
    if (((set >> i) & 1) && atoms[i].has(c)) next |= uint64_t(1) << (atoms[i].rep == PatternAtom::kStar ? i : i + 1);
  return pattern_closure(atoms, next);
}

enum Step { kConsumed, kReject, kPopRetry, kRetry };

bool push(JsonState& s, FrameKind kind, int node) {
  if (s.depth >= kJsonMaxDepth) return false;
  JsonFrame& f = s.frames[s.depth++];
  f = JsonFrame{};
  f.kind = kind;
  f.node = node;
  return true;
}

// Object candidates after property `last`: the next ones up to and including the first required.
uint64_t candidates(const Node& n, int last) {
  uint64_t m = 0;
  for (size_t j = size_t(last + 1); j < n.keys.size(); ++j) {
    m |= uint64_t(1) << j;
    if (n.required[j]) break;
  }
  return m;
}

bool can_close(const Node& n, int last) {
  for (size_t j = size_t(last + 1); j < n.keys.size(); ++j)
    if (n.required[j]) return false;
  return true;
}

// Number phases: 0 start, 1 after '-', 2 int digits, 3 leading 0, 4 after '.', 5 fraction,
// 6 after 'e', 7 after exponent sign, 8 exponent digits. Complete: 2, 3, 5, 8. Digits per part
// are capped (aux) so a runaway model cannot write a number forever.
constexpr int kMaxDigits = 16;
bool number_complete(int phase) { return phase == 2 || phase == 3 || phase == 5 || phase == 8; }

Step step_number(JsonFrame& f, bool integer, uint8_t c) {
  const bool digit = c >= '0' && c <= '9';
  auto digits = [&](int phase) {
    if (f.phase == phase) {
      if (f.aux >= kMaxDigits) return kReject;
      ++f.aux;
    } else {
      f.phase = uint8_t(phase);
      f.aux = 1;
    }
    return kConsumed;
  };
  switch (f.phase) {
    case 0:
      if (c == '-') return f.phase = 1, kConsumed;
      [[fallthrough]];
    case 1:
      if (c == '0') return f.phase = 3, kConsumed;
      if (digit) return digits(2);
      return kReject;
    case 2:
      if (digit) return digits(2);
      [[fallthrough]];
    case 3:
      if (!integer && c == '.') return f.phase = 4, f.aux = 0, kConsumed;
      if (!integer && (c == 'e' || c == 'E')) return f.phase = 6, f.aux = 0, kConsumed;
      return kPopRetry;
    case 4:
      return digit ? digits(5) : kReject;
    case 5:
      if (digit) return digits(5);
      if (c == 'e' || c == 'E') return f.phase = 6, f.aux = 0, kConsumed;
      return kPopRetry;
    case 6:
      if (c == '+' || c == '-') return f.phase = 7, kConsumed;
      [[fallthrough]];
    case 7:
      if (digit) return f.phase = 8, f.aux = 1, kConsumed;
      return kReject;
    case 8:
      if (digit) {
        if (f.aux >= 3) return kReject;
        return ++f.aux, kConsumed;
      }
      return kPopRetry;
  }
  return kReject;
}

// Literal frame: a = bytes matched, mask = literals still matching.
Step step_literal(JsonFrame& f, const std::vector<std::string>& lits, uint8_t c) {
  uint64_t alive = 0;
  bool complete = false;
  for (size_t i = 0; i < lits.size(); ++i) {
    if (!((f.mask >> i) & 1)) continue;
    if (lits[i].size() == size_t(f.a))
      complete = true;
    else if (uint8_t(lits[i][size_t(f.a)]) == c)
      alive |= uint64_t(1) << i;
  }
  if (!alive) return complete ? kPopRetry : kReject;
  f.mask = alive;
  ++f.a;
  return kConsumed;
}

bool literal_complete(const JsonFrame& f, const std::vector<std::string>& lits) {
  for (size_t i = 0; i < lits.size(); ++i)
    if (((f.mask >> i) & 1) && lits[i].size() == size_t(f.a)) return true;
  return false;
}

bool literal_can_continue(const JsonFrame& f, const std::vector<std::string>& lits) {
  for (size_t i = 0; i < lits.size(); ++i)
    if (((f.mask >> i) & 1) && lits[i].size() > size_t(f.a)) return true;
  return false;
}

// String phases: 0 before '"', 1 content, 2 after '\', 3 in \u (aux = hex digits read), 4 in a
// UTF-8 character (aux = continuation bytes left; b = low/high bound of the next one).
// a = characters so far (saturated when it no longer matters), mask = pattern NFA set.
Step step_string(JsonFrame& f, const Node& n, uint8_t c) {
  auto count_char = [&]() {
    if (n.max_len >= 0 && f.a >= n.max_len) return false;
    if (n.max_len >= 0 || f.a < n.min_len) ++f.a;
    return true;
  };
  switch (f.phase) {
    case 0:
      if (c != '"') return kReject;
      f.phase = 1;
      if (n.has_pattern) f.mask = pattern_closure(n.pattern, 1);
      return kConsumed;
    case 1: {
      if (c == '"') {
        if (f.a < n.min_len) return kReject;
        if (n.has_pattern && !((f.mask >> n.pattern.size()) & 1)) return kReject;
        return kPopRetry;  // handled by the caller: consumed and popped
      }
      if (c < 0x20) return kReject;
      if (c == '\\') {
        if (n.has_pattern || !count_char()) return kReject;
        f.phase = 2;
        return kConsumed;
      }
      if (c >= 0x80) {
        int left;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF)
          left = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
          left = 2;
          if (c == 0xE0) lo = 0xA0;
          if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
          left = 3;
          if (c == 0xF0) lo = 0x90;
          if (c == 0xF4) hi = 0x8F;
        } else {
          return kReject;
        }
        if (!count_char()) return kReject;
        if (n.has_pattern) {
          f.mask = pattern_step(n.pattern, f.mask, c);
          if (!f.mask) return kReject;
        }
        f.phase = 4;
        f.aux = uint16_t(left);
        f.b = lo << 8 | hi;
        return kConsumed;
      }
      if (!count_char()) return kReject;
      if (n.has_pattern) {
        f.mask = pattern_step(n.pattern, f.mask, c);
        if (!f.mask) return kReject;
      }
      return kConsumed;
    }
    case 2:
      if (c == 'u') return f.phase = 3, f.aux = 0, kConsumed;
      if (std::strchr("\"\\/bfnrt", c) && c != 0) return f.phase = 1, kConsumed;
      return kReject;
    case 3: {
      const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
      if (!hex || (f.aux == 0 && (c == 'd' || c == 'D'))) return kReject;  // no surrogates
      if (++f.aux == 4) f.phase = 1, f.aux = 0;
      return kConsumed;
    }
    case 4: {
      const uint8_t lo = uint8_t(f.b >> 8), hi = uint8_t(f.b & 0xff);
      if (c < lo || c > hi) return kReject;
      f.b = 0x80 << 8 | 0xBF;
      if (--f.aux == 0) f.phase = 1, f.b = 0;
      return kConsumed;
    }
  }
  return kReject;
}

// Pops a complete literal frame. Under a kTagged object the literal was the tag: the object
// continues as the branch it names (after its first property, which the tag was).
void pop_literal(const JsonGrammarImpl& g, JsonState& s) {
  const JsonFrame& f = s.frames[--s.depth];
  if (s.depth == 0) return;
  JsonFrame& parent = s.frames[s.depth - 1];
  const Node& pn = g.nodes[size_t(parent.node)];
  if (parent.kind != kFObject || pn.kind != kTagged) return;
  const auto& lits = g.nodes[size_t(f.node)].literals;
  for (size_t i = 0; i < lits.size(); ++i)
    if (((f.mask >> i) & 1) && lits[i].size() == size_t(f.a)) parent.node = pn.branches[i];
}

}  // namespace

bool json_feed(const JsonGrammarImpl& g, JsonState& s, uint8_t c) {
  for (;;) {
    if (s.depth == 0) return false;
    JsonFrame& f = s.frames[s.depth - 1];
    const Node& n = g.nodes[size_t(f.node)];
    Step r = kReject;
    switch (f.kind) {
      case kFValue: {
        int node = f.node;
        // A union picks the branch this byte starts.
        while (g.nodes[size_t(node)].kind == kUnion) {
          int pick = -1;
          for (int b : g.nodes[size_t(node)].branches)
            if (first_bytes(g, b).has(c)) pick = b;
          if (pick < 0) return false;
          node = pick;
        }
        const Node& v = g.nodes[size_t(node)];
        --s.depth;  // replaced by the concrete frame
        FrameKind k;
        switch (v.kind) {
          case kAny:
            if (c == '{')
              node = kNodeAnyObject, k = kFAnyObject;
            else if (c == '[')
              node = kNodeAnyArray, k = kFArray;
            else if (c == '"')
              node = kNodeAnyString, k = kFString;
            else if (c == '-' || (c >= '0' && c <= '9'))
              node = kNodeAnyNumber, k = kFNumber;
            else
              node = kNodeAnyLiterals, k = kFLiteral;
            break;
          case kObject:
          case kTagged:  // an object frame on the tag property; the tag's value picks the branch
            k = kFObject;
            break;
          case kAnyObject:
            k = kFAnyObject;
            break;
          case kArray:
            k = kFArray;
            break;
          case kString:
            k = kFString;
            break;
          case kNumber:
          case kInteger:
            k = kFNumber;
            break;
          default:
            k = kFLiteral;
            break;
        }
        push(s, k, node);
        if (k == kFLiteral) {
          const size_t count = g.nodes[size_t(node)].literals.size();
          s.frames[s.depth - 1].mask = count >= 64 ? ~uint64_t(0) : (uint64_t(1) << count) - 1;
        }
        r = kRetry;
        break;
      }
      case kFObject:
        // phase 0 before '{', 1 after '{', 2 after ',', 3 in a key (aux = bytes matched, mask =
        // keys still matching), 4 before ':', 5 after a value; a = last property (-1 none)
        switch (f.phase) {
          case 0:
            if (c != '{') return false;
            f.phase = 1;
            f.a = -1;
            return true;
          case 1:
          case 5:
            if (c == '}' && can_close(n, f.a)) {
              --s.depth;
              return true;
            }
            if (f.phase == 5) {
              if (c != ',' || !candidates(n, f.a)) return false;
              f.phase = 2;
              return true;
            }
            [[fallthrough]];
          case 2:
            if (c != '"') return false;
            f.mask = candidates(n, f.a);
            if (!f.mask) return false;
            f.phase = 3;
            f.aux = 0;
            [[fallthrough]];
          case 3: {
            uint64_t alive = 0;
            int chosen = -1;
            for (size_t i = 0; i < n.keys.size(); ++i) {
              if (!((f.mask >> i) & 1) || n.keys[i].size() <= f.aux || uint8_t(n.keys[i][f.aux]) != c) continue;
              alive |= uint64_t(1) << i;
              if (n.keys[i].size() == size_t(f.aux) + 1) chosen = int(i);
            }
            if (!alive) return false;
            f.mask = alive;
            ++f.aux;
            if (chosen >= 0) {  // keys are quoted, so none is a prefix of another
              f.a = chosen;
              f.phase = 4;
              f.mask = 0;
              f.aux = 0;
            }
            return true;
          }
          case 4:
            if (c != ':') return false;
            f.phase = 5;
            return push(s, kFValue, n.values[size_t(f.a)]);
        }
        return false;
      case kFAnyObject:
        // phase 0 before '{', 1 after '{', 2 after ',', 3 after the key, 4 after a value
        switch (f.phase) {
          case 0:
            if (c != '{') return false;
            f.phase = 1;
            return true;
          case 1:
          case 4:
            if (c == '}') {
              --s.depth;
              return true;
            }
            if (f.phase == 4) {
              if (c != ',') return false;
              f.phase = 2;
              return true;
            }
            [[fallthrough]];
          case 2:
            if (c != '"') return false;
            f.phase = 3;
            if (!push(s, kFString, kNodeAnyString)) return false;
            r = kRetry;
            break;
          case 3:
            if (c != ':') return false;
            f.phase = 4;
            return push(s, kFValue, kNodeAnyValue);
        }
        break;
      case kFArray: {
        // phase 0 before '[', 1 after '[', 2 after a value, 3 after ','; a = items (saturated)
        auto item = [&]() {
          if (n.max_items >= 0 && f.a >= n.max_items) return false;
          if (n.max_items >= 0 || f.a < n.min_items) ++f.a;
          f.phase = 2;
          return push(s, kFValue, n.items);
        };
        switch (f.phase) {
          case 0:
            if (c != '[') return false;
            f.phase = 1;
            return true;
          case 1:
          case 2:
            if (c == ']') {
              if (f.a < n.min_items) return false;
              --s.depth;
              return true;
            }
            if (f.phase == 2) {
              if (c != ',' || (n.max_items >= 0 && f.a >= n.max_items)) return false;
              f.phase = 3;
              return true;
            }
            [[fallthrough]];
          case 3:
            if (!item()) return false;
            r = kRetry;
            break;
        }
        break;
      }
      case kFString:
        r = step_string(f, n, c);
        if (r == kPopRetry) {  // the closing quote: consumed
          --s.depth;
          return true;
        }
        break;
      case kFNumber:
        r = step_number(f, n.kind == kInteger, c);
        break;
      case kFLiteral:
        r = step_literal(f, n.literals, c);
        if (r == kConsumed && literal_complete(f, n.literals) && !literal_can_continue(f, n.literals)) {
          pop_literal(g, s);  // nothing more can follow inside it
          return true;
        }
        if (r == kPopRetry) {
          pop_literal(g, s);
          r = kRetry;
        }
        break;
    }
    switch (r) {
      case kConsumed:
        return true;
      case kReject:
        return false;
      case kPopRetry:
        --s.depth;
        break;
      case kRetry:
        break;
    }
  }
}

bool json_can_end(const JsonGrammarImpl& g, const JsonState& s) {
  for (int d = s.depth - 1; d >= 0; --d) {
    const JsonFrame& f = s.frames[d];
    const Node& n = g.nodes[size_t(f.node)];
    if (f.kind == kFNumber && number_complete(f.phase)) continue;
    if (f.kind == kFLiteral && literal_complete(f, n.literals)) continue;
    return false;
  }
  return true;
}

JsonState json_initial(const JsonGrammarImpl& g) {
  JsonState s;
  push(s, kFValue, g.root);
  return s;
}

JsonGrammar::JsonGrammar(std::unique_ptr<JsonGrammarImpl> impl) : impl_(std::move(impl)) {}
JsonGrammar::~JsonGrammar() = default;

std::shared_ptr<const JsonGrammar> JsonGrammar::any_object() {
  // One instance, so that every json_object request shares one mask cache in the engine.
  static const std::shared_ptr<const JsonGrammar> g = [] {
    auto impl = std::make_unique<JsonGrammarImpl>(base_grammar());
    impl->root = kNodeAnyObject;
    return std::shared_ptr<const JsonGrammar>(new JsonGrammar(std::move(impl)));
  }();
  return g;
}

Result<std::shared_ptr<const JsonGrammar>> JsonGrammar::compile(std::string_view schema) {
  json doc = json::parse(schema, nullptr, false);
  if (doc.is_discarded()) return make_error(ErrorKind::kInvalidArgument, "json_schema is not valid JSON");
  auto g = std::make_unique<JsonGrammarImpl>(base_grammar());
  Compiler c(*g);
  HLX_ASSIGN_OR_RETURN(g->root, c.compile(doc, "schema", 0));
  return std::shared_ptr<const JsonGrammar>(new JsonGrammar(std::move(g)));
}

Result<std::shared_ptr<const JsonGrammar>> JsonGrammar::compile_cached(std::string_view schema) {
  static std::mutex mu;
  static std::list<std::pair<std::string, std::shared_ptr<const JsonGrammar>>> lru;  // newest first
  {
    std::lock_guard<std::mutex> lock(mu);
    for (auto it = lru.begin(); it != lru.end(); ++it)
      if (it->first == schema) {
        lru.splice(lru.begin(), lru, it);
        return lru.front().second;
      }
  }
  HLX_ASSIGN_OR_RETURN(auto g, compile(schema));
  std::lock_guard<std::mutex> lock(mu);
  lru.emplace_front(std::string(schema), g);
  if (lru.size() > 64) lru.pop_back();
  return g;
}

// --- token trie ---

namespace {

std::shared_ptr<const TokenTrie> make_trie(std::vector<std::string> bytes, int64_t vocab);

}  // namespace

std::shared_ptr<const TokenTrie> TokenTrie::from_bytes(const std::vector<std::string>& tokens) {
  return make_trie(tokens, int64_t(tokens.size()));
}

Result<std::shared_ptr<const TokenTrie>> TokenTrie::build(const tok::Tokenizer& tokenizer, int64_t vocab) {
  std::vector<std::string> bytes{size_t(vocab), std::string()};
  const int64_t n = std::min<int64_t>(vocab, int64_t(tokenizer.vocab_size()));
  for (int64_t i = 0; i < n; ++i) {
    if (tokenizer.is_special(uint32_t(i))) continue;
    Result<std::string> b = tokenizer.token_bytes(uint32_t(i));
    if (b.ok()) bytes[size_t(i)] = std::move(*b);
  }
  return make_trie(std::move(bytes), vocab);
}

namespace {

std::shared_ptr<const TokenTrie> make_trie(std::vector<std::string> bytes, int64_t vocab) {
  auto t = std::make_shared<TokenTrie>();
  std::vector<uint32_t> order;
  for (size_t i = 0; i < bytes.size(); ++i)
    if (!bytes[i].empty()) order.push_back(uint32_t(i));
  std::sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) { return bytes[x] < bytes[y]; });
  std::vector<uint32_t> path;  // node per depth of the current prefix
  std::vector<std::vector<uint32_t>> ends;
  auto close_to = [&](size_t len) {
    while (path.size() > len) {
      t->skip_[path.back()] = uint32_t(t->byte_.size());
      path.pop_back();
    }
  };
  const std::string* prev = nullptr;
  for (uint32_t id : order) {
    const std::string& b = bytes[id];
    size_t common = 0;
    if (prev)
      while (common < prev->size() && common < b.size() && (*prev)[common] == b[common]) ++common;
    close_to(common);
    for (size_t k = common; k < b.size(); ++k) {
      path.push_back(uint32_t(t->byte_.size()));
      t->byte_.push_back(uint8_t(b[k]));
      t->depth_.push_back(uint16_t(std::min<size_t>(k + 1, 65535)));
      t->skip_.push_back(0);
      ends.emplace_back();
    }
    ends[path.back()].push_back(id);
    prev = &b;
  }
  close_to(0);
  t->ids_begin_.push_back(0);
  for (const auto& e : ends) {
    t->ids_.insert(t->ids_.end(), e.begin(), e.end());
    t->ids_begin_.push_back(uint32_t(t->ids_.size()));
  }
  t->vocab_ = vocab;
  bytes.resize(size_t(vocab));
  t->bytes_ = std::move(bytes);
  return t;
}

}  // namespace

// --- the per-request constraint ---

JsonConstraint::JsonConstraint(std::shared_ptr<const JsonGrammar> grammar, std::shared_ptr<const TokenTrie> trie,
                               std::shared_ptr<JsonMaskCache> cache)
    : grammar_(std::move(grammar)),
      trie_(std::move(trie)),
      cache_(cache ? std::move(cache) : std::make_shared<JsonMaskCache>()) {
  state_ = json_initial(grammar_->impl());
}

bool JsonConstraint::can_end() const { return json_can_end(grammar_->impl(), state_); }

const std::vector<uint64_t>& JsonConstraint::allowed() {
  std::string key(reinterpret_cast<const char*>(state_.frames), size_t(state_.depth) * sizeof(JsonFrame));
  auto& masks = cache_->masks;
  auto it = masks.find(key);
  if (it != masks.end()) return it->second;
  if (masks.size() >= kJsonMaxCachedStates) masks.clear();  // bound the memory
  std::vector<uint64_t> mask(size_t((trie_->vocab() + 63) / 64), 0);
  const JsonGrammarImpl& g = grammar_->impl();
  const TokenTrie& t = *trie_;
  std::vector<JsonState>& walk = cache_->walk;
  walk.resize(1);
  walk[0] = state_;
  const size_t nodes = t.byte_.size();
  for (size_t i = 0; i < nodes;) {
    const size_t d = t.depth_[i];
    if (walk.size() <= d) walk.resize(d + 1);
    JsonState& s = walk[d];
    const JsonState& parent = walk[d - 1];
    s.depth = parent.depth;
    std::memcpy(s.frames, parent.frames, size_t(parent.depth) * sizeof(JsonFrame));
    if (json_feed(g, s, t.byte_[i])) {
      for (uint32_t k = t.ids_begin_[i]; k < t.ids_begin_[i + 1]; ++k)
        mask[t.ids_[k] >> 6] |= uint64_t(1) << (t.ids_[k] & 63);
      ++i;
    } else {
      i = t.skip_[i];
    }
  }
  return masks.emplace(std::move(key), std::move(mask)).first->second;
}

Status JsonConstraint::mask_logits(std::span<float> logits, std::span<const int64_t> eos) {
  if (int64_t(logits.size()) != trie_->vocab())
    return make_error(ErrorKind::kInvalidArgument, "json constraint: a logits row of ", logits.size(),
                      " for a vocabulary of ", trie_->vocab());
  const std::vector<uint64_t>& m = allowed();
  const bool end = can_end();
  const float ninf = -std::numeric_limits<float>::infinity();
  // Keep EOS logits aside: the mask never holds special tokens.
  std::vector<std::pair<int64_t, float>> keep;
  if (end)
    for (int64_t e : eos)
      if (e >= 0 && e < int64_t(logits.size())) keep.emplace_back(e, logits[size_t(e)]);
  bool any = !keep.empty();
  const size_t n = logits.size();
  for (size_t w = 0; w < m.size(); ++w) {
    const uint64_t bits = m[w];
    const size_t base = w * 64, e = std::min(n, base + 64);
    if (bits == ~uint64_t(0)) {
      any = true;
      continue;
    }
    if (bits == 0) {
      std::fill(logits.begin() + base, logits.begin() + e, ninf);
      continue;
    }
    any = true;
    for (size_t i = base; i < e; ++i)
      if (!((bits >> (i - base)) & 1)) logits[i] = ninf;
  }
  for (const auto& [id, l] : keep) logits[size_t(id)] = l;
  if (!any) return make_error(ErrorKind::kInternal, "json constraint: no token can continue the output here");
  return ok_status();
}

bool JsonConstraint::feed(std::string_view bytes) {
  JsonState s = state_;
  for (char c : bytes)
    if (!json_feed(grammar_->impl(), s, uint8_t(c))) return false;
  state_ = s;
  return true;
}

Status JsonConstraint::accept(int64_t token) {
  if (token < 0 || token >= trie_->vocab() || trie_->bytes(token).empty() || !feed(trie_->bytes(token)))
    return make_error(ErrorKind::kInvalidArgument, "json constraint: token ", token, " does not continue the output");
  return ok_status();
}

}  // namespace hlx::engine
