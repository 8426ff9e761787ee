#include "tokenizer/tokenizer.h"

#include <functional>
#include <limits>

#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace hlx::tok {

namespace {

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(s);
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (true) {
    size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s.substr(pos));
  return out;
}

}  // namespace

Result<std::string> Tokenizer::Impl::normalize(std::string_view s) const {
  std::string cur(s);
  for (const NormStep& n : normalizers) {
    if (n.kind == NormStep::kNfc) {
      HLX_ASSIGN_OR_RETURN(cur, nfc(cur));
    } else {
      cur = replace_all(cur, n.pattern, n.content);
    }
  }
  return cur;
}

Status Tokenizer::Impl::encode_segment(std::string_view s, std::vector<uint32_t>* ids, size_t limit) const {
  HLX_ASSIGN_OR_RETURN(std::string normalized, normalize(s));
  // Depth first: each piece goes through the remaining pre-tokenizers and into the BPE model
  // before the next piece is split, so no step materializes copies of the whole segment and the
  // work stops at the first piece that takes the count past `limit`.
  std::function<Status(std::string_view, size_t)> run = [&](std::string_view piece, size_t step) -> Status {
    if (step == pretokenizers.size()) {
      HLX_RETURN_IF_ERROR(bpe->tokenize(piece, ids));
      if (ids->size() > limit)
        return make_error(ErrorKind::kCapacityExceeded, "the text is longer than ", limit, " tokens");
      return ok_status();
    }
    const PreStep& p = pretokenizers[step];
    switch (p.kind) {
      case PreStep::kQwenRegex: {
        HLX_ASSIGN_OR_RETURN(auto parts, split_qwen(piece));
        for (std::string_view part : parts) HLX_RETURN_IF_ERROR(run(part, step + 1));
        return ok_status();
      }
      case PreStep::kSplitMergedWithPrevious:
        for (std::string_view part : split_merged_with_previous(piece, p.pattern))
          HLX_RETURN_IF_ERROR(run(part, step + 1));
        return ok_status();
      case PreStep::kSplitIsolated: {
        size_t start = 0;
        while (start < piece.size()) {
          size_t hit = piece.find(p.pattern, start);
          if (hit == std::string_view::npos) hit = piece.size();
          if (hit > start) HLX_RETURN_IF_ERROR(run(piece.substr(start, hit - start), step + 1));
          if (hit < piece.size()) HLX_RETURN_IF_ERROR(run(p.pattern, step + 1));
          start = hit + (hit < piece.size() ? p.pattern.size() : 0);
        }
        return ok_status();
      }
      case PreStep::kByteLevel: {
        std::string mapped = byte_level_encode(piece);
        return run(mapped, step + 1);
      }
    }
    return ok_status();
  };
  return run(normalized, 0);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

Result<std::vector<uint32_t>> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return encode(text, add_special_tokens, std::numeric_limits<size_t>::max());
}

Result<std::vector<uint32_t>> Tokenizer::encode(std::string_view text, bool add_special_tokens,
                                                size_t max_tokens) const {
  if (!is_valid_utf8(text)) {
    bool incomplete;
    size_t at = valid_utf8_prefix(text, &incomplete);
    return make_error(ErrorKind::kInvalidArgument, "encode: text is not valid UTF-8 (byte offset ", at, " of ",
                      text.size(), ")");
  }
  const Impl& m = *impl_;
  const size_t extra = add_special_tokens ? m.post_extra : 0;
  if (extra > max_tokens)
    return make_error(ErrorKind::kCapacityExceeded, "the text is longer than ", max_tokens, " tokens");
  const size_t limit = max_tokens - extra;
  std::vector<uint32_t> ids;
  // Added tokens are found first, leftmost-longest, in the raw text (all are normalized=false).
  size_t last = 0, i = 0;
  while (i < text.size()) {
    uint32_t node = 0;
    size_t best_end = 0;
    int64_t best_id = -1;
    for (size_t j = i; j < text.size(); ++j) {
      auto it = m.trie_edges.find((uint64_t(node) << 8) | uint8_t(text[j]));
      if (it == m.trie_edges.end()) break;
      node = it->second;
      if (m.trie_token[node] >= 0) {
        best_end = j + 1;
        best_id = m.trie_token[node];
      }
    }
    if (best_id < 0) {
      ++i;
      continue;
    }
    if (i > last) HLX_RETURN_IF_ERROR(m.encode_segment(text.substr(last, i - last), &ids, limit));
    ids.push_back(uint32_t(best_id));
    if (ids.size() > limit)
      return make_error(ErrorKind::kCapacityExceeded, "the text is longer than ", max_tokens, " tokens");
    i = last = best_end;
  }
  if (last < text.size()) HLX_RETURN_IF_ERROR(m.encode_segment(text.substr(last), &ids, limit));
  if (add_special_tokens && !m.post_single.empty()) {
    std::vector<uint32_t> out;
    for (const auto& item : m.post_single) {
      if (item)
        out.insert(out.end(), item->begin(), item->end());
      else
        out.insert(out.end(), ids.begin(), ids.end());
    }
    return out;
  }
  return ids;
}

std::optional<size_t> Tokenizer::max_bytes_per_token() const {
  const Impl& m = *impl_;
  std::call_once(m.max_bytes_once, [&] {
    // The most input bytes one id can stand for, times how much the normalizers can shrink the
    // input before the model sees it. Unbounded (nullopt) when one token may stand for any
    // amount. A vocabulary string is in the model's input alphabet: after a ByteLevel
    // pre-tokenizer each of its code points is one input byte; otherwise its bytes bound the
    // input's (SentencePiece's U+2581 stands for a 1-byte space, <0xNN> for one byte).
    bool byte_level = false;
    for (const PreStep& p : m.pretokenizers) byte_level = byte_level || p.kind == PreStep::kByteLevel;
    size_t longest = 4;  // an unknown character (up to 4 UTF-8 bytes) may become one unk id
    for (uint32_t id = 0; id < m.bpe->id_bound(); ++id) {
      const std::string* t = m.bpe->id_to_token(id);
      if (!t) continue;
      size_t n = t->size();
      if (byte_level) {
        n = 0;
        for (unsigned char c : *t) n += (c & 0xC0) != 0x80;  // code points
      }
      longest = std::max(longest, n);
    }
    for (const AddedToken& a : m.added) longest = std::max(longest, a.content.size());
    size_t shrink = 1;
    for (const NormStep& n : m.normalizers) {
      if (n.kind == NormStep::kNfc) {
        shrink *= 3;  // canonical composition: at most 3 input bytes per output byte (Hangul LVT)
      } else if (n.pattern.size() > n.content.size()) {
        if (n.content.empty()) return;  // Replace(x, ""): any amount of input may vanish
        shrink *= (n.pattern.size() + n.content.size() - 1) / n.content.size();
      }
    }
    if (m.bpe->fuses_unknown()) return;  // one unk id may cover a run of unknown characters
    m.max_bytes_per_token = longest * shrink;
  });
  return m.max_bytes_per_token;
}

Result<std::string> Tokenizer::decode(std::span<const uint32_t> ids, bool skip_special_tokens) const {
  return decode_impl(ids, skip_special_tokens, /*raw=*/false);
}

Result<std::string> Tokenizer::token_bytes(uint32_t id) const {
  return decode_impl(std::span<const uint32_t>(&id, 1), /*skip_special_tokens=*/false, /*raw=*/true);
}

// raw: invalid UTF-8 from byte-level and byte-fallback pieces is kept as bytes, not replaced.
Result<std::string> Tokenizer::decode_impl(std::span<const uint32_t> ids, bool skip_special_tokens, bool raw) const {
  const Impl& m = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    uint32_t id = ids[i];
    const std::string* tok = nullptr;
    auto a = m.added_by_id.find(id);
    if (a != m.added_by_id.end())
      tok = &m.added[a->second].content;
    else
      tok = m.bpe->id_to_token(id);
    if (!tok)
      return make_error(ErrorKind::kOutOfRange, "decode: id ", id, " at position ", i,
                        " is not in the vocabulary (size ", m.vocab_size, ")");
    if (skip_special_tokens && m.special_ids.count(id)) continue;
    tokens.push_back(*tok);
  }
  if (!m.has_decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  for (const DecStep& d : m.decoders) {
    switch (d.kind) {
      case DecStep::kByteLevel: {
        std::string bytes;
        for (const std::string& t : tokens)
          if (!byte_level_decode(t, &bytes)) bytes += t;  // outside the alphabet: raw bytes
        tokens.assign(1, raw ? bytes : utf8_lossy(bytes));
        break;
      }
      case DecStep::kReplace:
        for (std::string& t : tokens) t = replace_all(t, d.pattern, d.content);
        break;
      case DecStep::kByteFallback: {
        std::vector<std::string> out;
        std::string pending;
        size_t pending_count = 0;
        auto flush = [&] {
          if (!pending_count) return;
          if (raw || is_valid_utf8(pending)) {
            out.push_back(pending);
          } else {
            // HF emits one U+FFFD per byte token of an invalid run.
            for (size_t k = 0; k < pending_count; ++k) out.push_back("\xEF\xBF\xBD");
          }
          pending.clear();
          pending_count = 0;
        };
        auto hex = [](char c) -> int {
          if (c >= '0' && c <= '9') return c - '0';
          if (c >= 'A' && c <= 'F') return c - 'A' + 10;
          if (c >= 'a' && c <= 'f') return c - 'a' + 10;
          return -1;
        };
        for (std::string& t : tokens) {
          if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && hex(t[3]) >= 0 && hex(t[4]) >= 0) {
            pending += char(hex(t[3]) * 16 + hex(t[4]));
            ++pending_count;
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        tokens = std::move(out);
        break;
      }
      case DecStep::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case DecStep::kStrip:
        // A sequence-start strip (Llama's leading space): a token's own bytes keep it, as the
        // token contributes it to running text.
        if (raw) break;
        for (std::string& t : tokens) {
          auto cps = decode_utf8(t);
          if (!cps.ok()) continue;
          size_t n = cps->size(), b = 0, e = n;
          while (b < n && b < d.start && (*cps)[b].cp == d.strip_char) ++b;
          while (e > b && n - e < d.stop && (*cps)[e - 1].cp == d.strip_char) --e;
          size_t from = b < n ? (*cps)[b].offset : t.size();
          size_t to = e < n ? (*cps)[e].offset : t.size();
          t = t.substr(from, to - from);
        }
        break;
    }
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

std::optional<uint32_t> Tokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->added_by_content.find(token);
  if (it != impl_->added_by_content.end()) return it->second;
  return impl_->bpe->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(uint32_t id) const {
  auto a = impl_->added_by_id.find(id);
  if (a != impl_->added_by_id.end()) return impl_->added[a->second].content;
  if (const std::string* t = impl_->bpe->id_to_token(id)) return *t;
  return std::nullopt;
}

bool Tokenizer::is_special(uint32_t id) const { return impl_->special_ids.count(id) > 0; }
size_t Tokenizer::vocab_size() const { return impl_->vocab_size; }
const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }

StreamDecoder::StreamDecoder(std::shared_ptr<const Tokenizer> tokenizer, bool skip_special_tokens)
    : tok_(std::move(tokenizer)), skip_special_(skip_special_tokens) {}

Result<std::string> StreamDecoder::step(uint32_t id) {
  if (!tok_) return make_error(ErrorKind::kInvalidArgument, "StreamDecoder has no tokenizer");
  // A model may sample an embedding row the tokenizer has no token for (Qwen3's rows 151669..
  // 151935 are padding); HF's decode drops such ids, so a stream renders them as nothing.
  if (!tok_->id_to_token(id)) return std::string();
  ids_.push_back(id);
  auto text = tok_->decode(ids_, skip_special_);
  if (!text.ok()) {
    ids_.pop_back();  // leave the state as it was before the bad id
    return text.status();
  }
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  // Hold back while the text is no longer than what was emitted or ends in an incomplete
  // character (decoded as U+FFFD); a later byte token may complete it.
  if (text->size() <= prefix_text_.size() || std::string_view(*text).ends_with(kReplacement)) return std::string();
  if (!std::string_view(*text).starts_with(prefix_text_))
    return make_error(ErrorKind::kInternal, "StreamDecoder: decode of ", ids_.size(),
                      " ids no longer starts with the already emitted text");
  std::string out = text->substr(prefix_text_.size());
  // Keep the just-emitted ids as context for the next step (decoders may look at neighbours).
  ids_.erase(ids_.begin(), ids_.begin() + std::ptrdiff_t(prefix_count_));
  prefix_count_ = ids_.size();
  HLX_ASSIGN_OR_RETURN(prefix_text_, tok_->decode(ids_, skip_special_));
  return out;
}

Result<std::string> StreamDecoder::finish() {
  if (!tok_) return make_error(ErrorKind::kInvalidArgument, "StreamDecoder has no tokenizer");
  HLX_ASSIGN_OR_RETURN(std::string text, tok_->decode(ids_, skip_special_));
  std::string out;
  if (text.size() > prefix_text_.size() && std::string_view(text).starts_with(prefix_text_))
    out = text.substr(prefix_text_.size());
  ids_.clear();
  prefix_count_ = 0;
  prefix_text_.clear();
  return out;
}

}  // namespace hlx::tok