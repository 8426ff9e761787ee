// Hugging Face tokenizer.json: loading, encoding and (streaming) decoding.
//
// Supported pipeline pieces (anything else is rejected with kUnsupported naming it):
//   normalizer    null | NFC | Replace(String) | Sequence of these
//   pre_tokenizer null | Split(String, Isolated|MergedWithPrevious) | Split(Regex: the Qwen2/3
//                 pattern) | ByteLevel(use_regex=false, add_prefix_space=false) | Sequence
//   model         BPE (byte_fallback, unk_token, fuse_unk, ignore_merges; no dropout, no
//                 continuing_subword_prefix / end_of_word_suffix)
//   post_processor null | ByteLevel | TemplateProcessing (single sequence)
//   decoder       null | ByteLevel | Replace(String) | ByteFallback | Fuse | Strip | Sequence
//   added_tokens  normalized=false, lstrip=rstrip=single_word=false (as in Qwen3 and Gemma3)
//
// Thread safety: a loaded Tokenizer is immutable and may be used from many threads at once.
// A StreamDecoder is single-threaded state over a shared Tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace hlx::tok {

struct AddedToken {
  uint32_t id = 0;
  std::string content;
  bool special = false;
};

class Tokenizer {
 public:
  // kNotFound / kIo for the file, kParse for malformed JSON or fields of the wrong type,
  // kUnsupported for pipeline pieces hlx does not implement.
  static Result<std::shared_ptr<const Tokenizer>> load(const std::string& tokenizer_json_path);
  static Result<std::shared_ptr<const Tokenizer>> from_json(std::string_view json_text, const std::string& source_name);
  ~Tokenizer();

  // Text (valid UTF-8, else kInvalidArgument) to ids. Added tokens are matched first in the raw
  // text; add_special_tokens applies the post-processor (e.g. Gemma's leading <bos>).
  Result<std::vector<uint32_t>> encode(std::string_view text, bool add_special_tokens) const;
  // As above, but gives up with kCapacityExceeded as soon as the result would hold more than
  // `max_tokens` ids (special tokens included): pieces are pre-tokenized and merged one at a
  // time, so the work and memory past the limit are never spent. Same ids when it succeeds.
  Result<std::vector<uint32_t>> encode(std::string_view text, bool add_special_tokens, size_t max_tokens) const;

  // An upper bound on the input bytes one id can stand for (the longest token in input bytes
  // times what the normalizers can shrink), so text longer than max_tokens * this cannot fit in
  // max_tokens ids; nullopt when there is no bound (fused unknown tokens, a Replace that
  // deletes). Computed on first use (one pass over the vocabulary), then cached.
  std::optional<size_t> max_bytes_per_token() const;

  // Ids to text through the decoder; kOutOfRange naming the first unknown id. Invalid byte
  // sequences decode to U+FFFD exactly as Hugging Face does.
  Result<std::string> decode(std::span<const uint32_t> ids, bool skip_special_tokens) const;
  // One id's own bytes through the decoder, without the U+FFFD repair and without a Strip
  // step: a byte-level token that holds part of a UTF-8 character gives that part, a "▁word"
  // piece its leading space (OpenAI's logprobs "bytes"). kOutOfRange for an unknown id.
  Result<std::string> token_bytes(uint32_t id) const;

  std::optional<uint32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(uint32_t id) const;
  bool is_special(uint32_t id) const;
  // One past the largest token id (model vocabulary and added tokens): the embedding row count.
  size_t vocab_size() const;
  const std::vector<AddedToken>& added_tokens() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  Result<std::string> decode_impl(std::span<const uint32_t> ids, bool skip_special_tokens, bool raw) const;
  static Result<std::shared_ptr<const Tokenizer>> from_json_impl(std::string_view json_text);
  std::unique_ptr<Impl> impl_;
};

// Incremental detokenization: feed ids one at a time and get back only complete, valid UTF-8.
// Text whose last character is still incomplete (a multi-byte character split across byte tokens)
// is held back. The concatenation of every step() and finish() equals
// tokenizer.decode(all ids, skip_special_tokens).
class StreamDecoder {
 public:
  StreamDecoder(std::shared_ptr<const Tokenizer> tokenizer, bool skip_special_tokens);
  // Returns the newly completed text (possibly empty). Ids the tokenizer does not know (padding
  // rows of the model's embedding) produce no text, as HF's decode drops them.
  Result<std::string> step(uint32_t id);
  // Flushes what is held back (incomplete sequences come out as U+FFFD), then resets.
  Result<std::string> finish();

 private:
  std::shared_ptr<const Tokenizer> tok_;
  bool skip_special_;
  std::vector<uint32_t> ids_;  // context ids (already emitted) followed by pending ids
  size_t prefix_count_ = 0;    // how many of ids_ were already emitted
  std::string prefix_text_;    // decode of ids_[0, prefix_count_)
};

}  // namespace hlx::tok
