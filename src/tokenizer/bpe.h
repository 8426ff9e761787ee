// Byte-pair-encoding model as Hugging Face tokenizers' `models/bpe` defines it: a vocabulary, merges
// applied lowest rank first (leftmost on ties), optional byte fallback to <0xNN> tokens and an
// unknown token. Thread-safe after construction (the word cache is guarded by a mutex).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"

namespace hlx::tok {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>>;

struct BpeOptions {
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

class Bpe {
 public:
  // `merges` are (left, right) token strings in rank order. Fails (kParse) when a merge names a
  // token, or produces a token, missing from `vocab`, or when unk_token is not in `vocab`.
  static Result<std::unique_ptr<Bpe>> create(TokenMap vocab,
                                             const std::vector<std::pair<std::string, std::string>>& merges,
                                             BpeOptions options);

  // Ids of one pre-tokenized word (valid UTF-8). kInvalidArgument when a character is neither in
  // the vocabulary nor coverable by byte fallback and there is no unknown token.
  Status tokenize(std::string_view word, std::vector<uint32_t>* out) const;

  std::optional<uint32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(uint32_t id) const;
  // One past the largest id of the vocabulary.
  size_t id_bound() const { return id_to_token_.size(); }
  // True when one unk id may stand for a run of characters (fuse_unk, and no byte fallback that
  // would cover them first).
  bool fuses_unknown() const {
    if (!unk_id_ || !options_.fuse_unk) return false;
    if (!options_.byte_fallback) return true;
    for (int64_t id : byte_ids_)
      if (id < 0) return true;
    return false;
  }

 private:
  Bpe() = default;
  Status merge_word(std::string_view word, std::vector<uint32_t>* out) const;

  TokenMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<uint32_t, uint32_t>> merges_;
  BpeOptions options_;
  std::optional<uint32_t> unk_id_;
  std::array<int64_t, 256> byte_ids_{};  // id of "<0xNN>" or -1

  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<uint32_t>> cache_;
};

}  // namespace hlx::tok
