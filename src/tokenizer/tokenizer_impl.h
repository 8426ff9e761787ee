// Tokenizer internals shared by tokenizer_json.cc (reading tokenizer.json) and tokenizer.cc
// (encode, decode, streaming). Not part of the public API.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer.h"

namespace hlx::tok {

using nlohmann::json;

struct NormStep {
  enum Kind { kNfc, kReplace } kind;
  std::string pattern, content;
};

struct PreStep {
  enum Kind { kQwenRegex, kSplitIsolated, kSplitMergedWithPrevious, kByteLevel } kind;
  std::string pattern;
};

struct DecStep {
  enum Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip } kind = kByteLevel;
  std::string pattern, content;
  char32_t strip_char = 0;
  size_t start = 0, stop = 0;
};

struct Tokenizer::Impl {
  std::unique_ptr<Bpe> bpe;
  std::vector<AddedToken> added;
  std::unordered_map<uint32_t, size_t> added_by_id;
  TokenMap added_by_content;
  std::unordered_set<uint32_t> special_ids;
  // Byte trie over added-token contents for leftmost-longest matching.
  std::unordered_map<uint64_t, uint32_t> trie_edges;  // (node << 8 | byte) -> child node
  std::vector<int64_t> trie_token;                    // node -> token id or -1
  std::vector<NormStep> normalizers;
  std::vector<PreStep> pretokenizers;
  bool has_decoder = false;
  std::vector<DecStep> decoders;
  // TemplateProcessing "single": nullopt is the input sequence, otherwise ids to insert.
  std::vector<std::optional<std::vector<uint32_t>>> post_single;
  size_t vocab_size = 0;

  Status parse_normalizer(const json& j, const std::string& ctx);
  Status parse_pretokenizer(const json& j, const std::string& ctx);
  Status parse_decoder(const json& j, const std::string& ctx);
  Status parse_post_processor(const json& j, const std::string& ctx);
  Status parse_model(const json& j);
  Status parse_added(const json& j);

  Result<std::string> normalize(std::string_view s) const;
  // Appends the ids of `s`; kCapacityExceeded as soon as `ids` holds more than `limit`.
  Status encode_segment(std::string_view s, std::vector<uint32_t>* ids, size_t limit) const;
  size_t post_extra = 0;  // ids the post-processor adds around the sequence
  mutable std::once_flag max_bytes_once;
  mutable std::optional<size_t> max_bytes_per_token;
};

}  // namespace hlx::tok
