// Structured outputs: JSON (OpenAI's response_format json_object) and a JSON-schema subset
// (json_schema) compiled to a pushdown automaton over bytes, and the per-token masks it allows
// over a tokenizer's vocabulary.
//
// Output form: compact JSON (no whitespace outside strings), properties in the schema's declared
// order (an optional one may be left out; a required one never), no duplicate keys for schema
// objects. The automaton walks bytes, so a token may span several JSON characters or hold part of
// a UTF-8 character; every string stays valid UTF-8 (no surrogate \u escapes).
//
// Supported schema keywords (anything else is kUnsupported naming the keyword and its path):
//   type (a name, or a list of names), properties, required, additionalProperties (false only),
//   items, minItems, maxItems, enum, const, anyOf (branches must start with different characters:
//   e.g. a string and null), minLength, maxLength, pattern (see below), title, description,
//   $schema, strict, default, examples (annotations, ignored).
//   {"type":"object"} without properties is any object; {} (no type) is any JSON value.
// pattern: anchored at both ends (leading ^ and trailing $ are optional); a sequence of atoms, each
//   a literal character, an escaped character (\. \- ...), \d \w \s, '.', or a class [a-z0-9_]
//   / [^...], each optionally followed by ?, *, + or {m}, {m,}, {m,n}; no groups, alternation or
//   backreferences; at most 64 positions after expanding counts. Strings with a pattern are
//   generated without escapes ('"', '\' and control characters never match).
// Limits: nesting depth 32, 64 properties per object, 64 enum values.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace hlx::tok {
class Tokenizer;
}

namespace hlx::engine {

struct JsonGrammarImpl;

// A compiled schema. Immutable after compile; shared by requests.
class JsonGrammar {
 public:
  // Any JSON object (response_format json_object); always the same instance.
  static std::shared_ptr<const JsonGrammar> any_object();
  // `schema` is a JSON-schema document (text); kInvalidArgument for malformed JSON or wrong
  // value types, kUnsupported naming keywords outside the subset above.
  static Result<std::shared_ptr<const JsonGrammar>> compile(std::string_view schema);
  // compile() through a process-wide cache of the last 64 schemas (keyed by their text), so that
  // requests of one schema get one grammar and share its masks. Thread-safe.
  static Result<std::shared_ptr<const JsonGrammar>> compile_cached(std::string_view schema);
  ~JsonGrammar();
  const JsonGrammarImpl& impl() const { return *impl_; }

 private:
  explicit JsonGrammar(std::unique_ptr<JsonGrammarImpl> impl);
  std::unique_ptr<JsonGrammarImpl> impl_;
};

// A token vocabulary as a byte trie (tokens in preorder with subtree skips), built once per
// tokenizer. Special tokens and tokens without bytes never take part in JSON.
class TokenTrie {
 public:
  // `vocab` = the model's logits width (ids >= the tokenizer's size are never allowed).
  static Result<std::shared_ptr<const TokenTrie>> build(const tok::Tokenizer& tokenizer, int64_t vocab);
  // From raw token byte strings (tests); empty = never allowed.
  static std::shared_ptr<const TokenTrie> from_bytes(const std::vector<std::string>& tokens);
  int64_t vocab() const { return vocab_; }
  const std::string& bytes(int64_t id) const { return bytes_[size_t(id)]; }

  // Preorder nodes: byte, depth (1 = first byte), the first node after the subtree, and the
  // token ids ending there (ids_[ids_begin_[i], ids_begin_[i+1])).
  std::vector<uint8_t> byte_;
  std::vector<uint16_t> depth_;
  std::vector<uint32_t> skip_;
  std::vector<uint32_t> ids_begin_;
  std::vector<uint32_t> ids_;
  int64_t vocab_ = 0;
  std::vector<std::string> bytes_;
};

// One frame of the automaton's stack (POD, hashed as bytes).
struct JsonFrame {
  uint8_t kind = 0;
  uint8_t phase = 0;
  uint16_t aux = 0;
  int32_t node = 0;
  int32_t a = 0;
  int32_t b = 0;
  uint64_t mask = 0;
};
inline constexpr int kJsonMaxDepth = 32;

struct JsonState {
  int depth = 0;
  JsonFrame frames[kJsonMaxDepth];
};

// Allowed-token masks per automaton state of one grammar over one trie, shared by the requests
// that use that grammar (engine thread only). At most kJsonMaxCachedStates masks (~19 KB each at
// a 152k vocabulary: ~10 MB); when full it starts over.
inline constexpr size_t kJsonMaxCachedStates = 512;
class JsonMaskCache {
 public:
  size_t size() const { return masks.size(); }
  std::unordered_map<std::string, std::vector<uint64_t>> masks;  // state bytes -> bitset
  std::vector<JsonState> walk;                                   // trie walk: a state per depth
};

// A request's position in the grammar, and the allowed tokens there. Masks are cached per
// automaton state (the whole stack, with counters saturated where they no longer matter), so a
// state's mask is computed once (one trie walk) and then looked up. Single-threaded.
class JsonConstraint {
 public:
  // `cache` null: a private one.
  JsonConstraint(std::shared_ptr<const JsonGrammar> grammar, std::shared_ptr<const TokenTrie> trie,
                 std::shared_ptr<JsonMaskCache> cache = nullptr);

  // Bit i set = token i may come next (EOS ids not included; see can_end()).
  const std::vector<uint64_t>& allowed();
  // The top-level value is complete (EOS may come now).
  bool can_end() const;
  // Nothing can follow: the value is complete and closed (no number that could go on).
  bool done() const { return state_.depth == 0; }
  // Sets every disallowed logit to -inf; EOS ids stay only when can_end(). kInvalidArgument when
  // the row is not the trie's width; kInternal when nothing is allowed.
  Status mask_logits(std::span<float> logits, std::span<const int64_t> eos);
  // Advances by a generated token (kInvalidArgument when the grammar does not allow it).
  Status accept(int64_t token);
  // Advances by raw bytes (tests); false when they are not allowed.
  bool feed(std::string_view bytes);
  const JsonState& state() const { return state_; }
  const JsonMaskCache& cache() const { return *cache_; }

 private:
  std::shared_ptr<const JsonGrammar> grammar_;
  std::shared_ptr<const TokenTrie> trie_;
  JsonState state_;
  std::shared_ptr<JsonMaskCache> cache_;
};

// Whether `state` accepts `c` next (advancing it); exposed for the brute-force test.
bool json_feed(const JsonGrammarImpl& g, JsonState& state, uint8_t c);
bool json_can_end(const JsonGrammarImpl& g, const JsonState& state);
JsonState json_initial(const JsonGrammarImpl& g);

}  // namespace hlx::engine
