#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <limits>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "io/file.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode.h"

namespace hlx::tok {

using nlohmann::json;

namespace {

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

// Typed JSON accessors: every mismatch is a kParse error naming the field, never an exception.
Result<const json*> field(const json& obj, const char* key, const std::string& ctx) {
  if (!obj.is_object()) return make_error(ErrorKind::kParse, ctx, ": expected a JSON object");
  auto it = obj.find(key);
  if (it == obj.end()) return make_error(ErrorKind::kParse, ctx, ": missing field \"", key, "\"");
  return &*it;
}

Result<std::string> get_string(const json& obj, const char* key, const std::string& ctx) {
  HLX_ASSIGN_OR_RETURN(const json* v, field(obj, key, ctx));
  if (!v->is_string())
    return make_error(ErrorKind::kParse, ctx, ".", key, ": expected a string, got ",
                      v->type_name());
  return v->get<std::string>();
}

Result<bool> get_bool(const json& obj, const char* key, bool fallback, const std::string& ctx) {
  if (!obj.is_object()) return make_error(ErrorKind::kParse, ctx, ": expected a JSON object");
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    return make_error(ErrorKind::kParse, ctx, ".", key, ": expected a boolean, got ",
                      it->type_name());
  return it->get<bool>();
}

Result<uint32_t> as_id(const json& v, const std::string& ctx) {
  if (!v.is_number_unsigned() || v.get<uint64_t>() > 0x7FFFFFFFull)
    return make_error(ErrorKind::kParse, ctx, ": expected a token id (non-negative integer), got ",
                      v.dump());
  return uint32_t(v.get<uint64_t>());
}

// {"String": "x"} -> x; {"Regex": ...} -> kUnsupported unless the caller handles regexes.
Result<std::pair<bool, std::string>> get_pattern(const json& obj, const std::string& ctx) {
  HLX_ASSIGN_OR_RETURN(const json* p, field(obj, "pattern", ctx));
  if (p->is_object() && p->contains("String") && (*p)["String"].is_string())
    return std::pair<bool, std::string>{false, (*p)["String"].get<std::string>()};
  if (p->is_object() && p->contains("Regex") && (*p)["Regex"].is_string())
    return std::pair<bool, std::string>{true, (*p)["Regex"].get<std::string>()};
  return make_error(ErrorKind::kParse, ctx, ".pattern: expected {\"String\"|\"Regex\": ...}");
}

DecStep dec_step(DecStep::Kind kind) {
  DecStep d;
  d.kind = kind;
  return d;
}

}  // namespace

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

Status Tokenizer::Impl::parse_normalizer(const json& j, const std::string& ctx) {
  if (j.is_null()) return ok_status();
  HLX_ASSIGN_OR_RETURN(std::string type, get_string(j, "type", ctx));
  if (type == "Sequence") {
    HLX_ASSIGN_OR_RETURN(const json* list, field(j, "normalizers", ctx));
    if (!list->is_array()) return make_error(ErrorKind::kParse, ctx, ".normalizers: expected an array");
    for (size_t i = 0; i < list->size(); ++i)
      HLX_RETURN_IF_ERROR(parse_normalizer((*list)[i], str_cat(ctx, ".normalizers[", i, "]")));
    return ok_status();
  }
  if (type == "NFC") {
    normalizers.push_back({NormStep::kNfc, "", ""});
    return ok_status();
  }
  if (type == "Replace") {
    HLX_ASSIGN_OR_RETURN(auto pat, get_pattern(j, ctx));
    if (pat.first)
      return make_error(ErrorKind::kUnsupported, ctx, ": Replace normalizer with a Regex pattern");
    HLX_ASSIGN_OR_RETURN(std::string content, get_string(j, "content", ctx));
    normalizers.push_back({NormStep::kReplace, pat.second, content});
    return ok_status();
  }
  return make_error(ErrorKind::kUnsupported, ctx, ": normalizer type \"", type, "\"");
}

Status Tokenizer::Impl::parse_pretokenizer(const json& j, const std::string& ctx) {
  if (j.is_null()) return ok_status();
  HLX_ASSIGN_OR_RETURN(std::string type, get_string(j, "type", ctx));
  if (type == "Sequence") {
    HLX_ASSIGN_OR_RETURN(const json* list, field(j, "pretokenizers", ctx));
    if (!list->is_array())
      return make_error(ErrorKind::kParse, ctx, ".pretokenizers: expected an array");
    for (size_t i = 0; i < list->size(); ++i)
      HLX_RETURN_IF_ERROR(parse_pretokenizer((*list)[i], str_cat(ctx, ".pretokenizers[", i, "]")));
    return ok_status();
  }
  if (type == "Split") {
    HLX_ASSIGN_OR_RETURN(auto pat, get_pattern(j, ctx));
    HLX_ASSIGN_OR_RETURN(std::string behavior, get_string(j, "behavior", ctx));
    HLX_ASSIGN_OR_RETURN(bool invert, get_bool(j, "invert", false, ctx));
    if (invert) return make_error(ErrorKind::kUnsupported, ctx, ": Split with invert=true");
    if (pat.first) {
      if (pat.second != kQwenSplitPattern)
        return make_error(ErrorKind::kUnsupported, ctx, ": Split regex \"", pat.second,
                          "\" (only the Qwen2/Qwen3 pattern is implemented)");
      if (behavior != "Isolated")
        return make_error(ErrorKind::kUnsupported, ctx, ": Split regex with behavior \"", behavior,
                          "\"");
      pretokenizers.push_back({PreStep::kQwenRegex, ""});
      return ok_status();
    }
    if (pat.second.empty())
      return make_error(ErrorKind::kUnsupported, ctx, ": Split on an empty string");
    if (behavior == "Isolated")
      pretokenizers.push_back({PreStep::kSplitIsolated, pat.second});
    else if (behavior == "MergedWithPrevious")
      pretokenizers.push_back({PreStep::kSplitMergedWithPrevious, pat.second});
    else
      return make_error(ErrorKind::kUnsupported, ctx, ": Split with behavior \"", behavior, "\"");
    return ok_status();
  }
  if (type == "ByteLevel") {
    HLX_ASSIGN_OR_RETURN(bool prefix, get_bool(j, "add_prefix_space", false, ctx));
    HLX_ASSIGN_OR_RETURN(bool use_regex, get_bool(j, "use_regex", true, ctx));
    if (prefix) return make_error(ErrorKind::kUnsupported, ctx, ": ByteLevel add_prefix_space=true");
    if (use_regex) return make_error(ErrorKind::kUnsupported, ctx, ": ByteLevel use_regex=true");
    pretokenizers.push_back({PreStep::kByteLevel, ""});
    return ok_status();
  }
  return make_error(ErrorKind::kUnsupported, ctx, ": pre_tokenizer type \"", type, "\"");
}

Status Tokenizer::Impl::parse_decoder(const json& j, const std::string& ctx) {
  HLX_ASSIGN_OR_RETURN(std::string type, get_string(j, "type", ctx));
  if (type == "Sequence") {
    HLX_ASSIGN_OR_RETURN(const json* list, field(j, "decoders", ctx));
    if (!list->is_array()) return make_error(ErrorKind::kParse, ctx, ".decoders: expected an array");
    for (size_t i = 0; i < list->size(); ++i)
      HLX_RETURN_IF_ERROR(parse_decoder((*list)[i], str_cat(ctx, ".decoders[", i, "]")));
    return ok_status();
  }
  if (type == "ByteLevel") {
    decoders.push_back(dec_step(DecStep::kByteLevel));
    return ok_status();
  }
  if (type == "ByteFallback") {
    decoders.push_back(dec_step(DecStep::kByteFallback));
    return ok_status();
  }
  if (type == "Fuse") {
    decoders.push_back(dec_step(DecStep::kFuse));
    return ok_status();
  }
  if (type == "Replace") {
    HLX_ASSIGN_OR_RETURN(auto pat, get_pattern(j, ctx));
    if (pat.first)
      return make_error(ErrorKind::kUnsupported, ctx, ": Replace decoder with a Regex pattern");
    HLX_ASSIGN_OR_RETURN(std::string content, get_string(j, "content", ctx));
    DecStep d = dec_step(DecStep::kReplace);
    d.pattern = pat.second;
    d.content = content;
    decoders.push_back(d);
    return ok_status();
  }
  if (type == "Strip") {
    HLX_ASSIGN_OR_RETURN(std::string content, get_string(j, "content", ctx));
    auto cps = decode_utf8(content);
    if (!cps.ok() || cps->size() != 1)
      return make_error(ErrorKind::kParse, ctx, ".content: expected one character, got \"",
                        content, "\"");
    HLX_ASSIGN_OR_RETURN(const json* start, field(j, "start", ctx));
    HLX_ASSIGN_OR_RETURN(const json* stop, field(j, "stop", ctx));
    if (!start->is_number_unsigned() || !stop->is_number_unsigned())
      return make_error(ErrorKind::kParse, ctx, ": Strip start/stop must be non-negative integers");
    DecStep d = dec_step(DecStep::kStrip);
    d.strip_char = (*cps)[0].cp;
    d.start = start->get<size_t>();
    d.stop = stop->get<size_t>();
    decoders.push_back(d);
    return ok_status();
  }
  return make_error(ErrorKind::kUnsupported, ctx, ": decoder type \"", type, "\"");
}

Status Tokenizer::Impl::parse_post_processor(const json& j, const std::string& ctx) {
  if (j.is_null()) return ok_status();
  HLX_ASSIGN_OR_RETURN(std::string type, get_string(j, "type", ctx));
  if (type == "ByteLevel") return ok_status();  // only adjusts offsets; ids are unchanged
  if (type != "TemplateProcessing")
    return make_error(ErrorKind::kUnsupported, ctx, ": post_processor type \"", type, "\"");
  HLX_ASSIGN_OR_RETURN(const json* single, field(j, "single", ctx));
  HLX_ASSIGN_OR_RETURN(const json* specials, field(j, "special_tokens", ctx));
  if (!single->is_array() || !specials->is_object())
    return make_error(ErrorKind::kParse, ctx, ": single must be an array, special_tokens an object");
  for (size_t i = 0; i < single->size(); ++i) {
    const json& item = (*single)[i];
    std::string ictx = str_cat(ctx, ".single[", i, "]");
    if (item.is_object() && item.contains("Sequence")) {
      HLX_ASSIGN_OR_RETURN(std::string id, get_string(item["Sequence"], "id", ictx));
      if (id != "A")
        return make_error(ErrorKind::kUnsupported, ictx, ": sequence \"", id, "\" in single");
      post_single.push_back(std::nullopt);
    } else if (item.is_object() && item.contains("SpecialToken")) {
      HLX_ASSIGN_OR_RETURN(std::string id, get_string(item["SpecialToken"], "id", ictx));
      auto it = specials->find(id);
      if (it == specials->end())
        return make_error(ErrorKind::kParse, ictx, ": special token \"", id,
                          "\" missing from special_tokens");
      HLX_ASSIGN_OR_RETURN(const json* ids, field(*it, "ids", ictx));
      if (!ids->is_array()) return make_error(ErrorKind::kParse, ictx, ": ids must be an array");
      std::vector<uint32_t> v;
      for (const json& x : *ids) {
        HLX_ASSIGN_OR_RETURN(uint32_t id32, as_id(x, ictx));
        v.push_back(id32);
      }
      post_single.push_back(std::move(v));
    } else {
      return make_error(ErrorKind::kParse, ictx, ": expected {\"Sequence\"|\"SpecialToken\": ...}");
    }
  }
  return ok_status();
}

Status Tokenizer::Impl::parse_model(const json& m) {
  HLX_ASSIGN_OR_RETURN(std::string type, get_string(m, "type", "model"));
  if (type != "BPE") return make_error(ErrorKind::kUnsupported, "model type \"", type, "\"");
  if (m.contains("dropout") && !m["dropout"].is_null())
    return make_error(ErrorKind::kUnsupported, "model.dropout=", m["dropout"].dump());
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(key) && !m[key].is_null() &&
        !(m[key].is_string() && m[key].get<std::string>().empty()))
      return make_error(ErrorKind::kUnsupported, "model.", key, "=", m[key].dump());
  }
  BpeOptions opt;
  HLX_ASSIGN_OR_RETURN(opt.fuse_unk, get_bool(m, "fuse_unk", false, "model"));
  HLX_ASSIGN_OR_RETURN(opt.byte_fallback, get_bool(m, "byte_fallback", false, "model"));
  HLX_ASSIGN_OR_RETURN(opt.ignore_merges, get_bool(m, "ignore_merges", false, "model"));
  if (m.contains("unk_token") && !m["unk_token"].is_null()) {
    HLX_ASSIGN_OR_RETURN(std::string unk, get_string(m, "unk_token", "model"));
    opt.unk_token = unk;
  }
  HLX_ASSIGN_OR_RETURN(const json* vocab_j, field(m, "vocab", "model"));
  if (!vocab_j->is_object()) return make_error(ErrorKind::kParse, "model.vocab: expected an object");
  TokenMap vocab;
  vocab.reserve(vocab_j->size());
  for (auto it = vocab_j->begin(); it != vocab_j->end(); ++it) {
    HLX_ASSIGN_OR_RETURN(uint32_t id, as_id(it.value(), str_cat("model.vocab[\"", it.key(), "\"]")));
    vocab.emplace(it.key(), id);
  }
  HLX_ASSIGN_OR_RETURN(const json* merges_j, field(m, "merges", "model"));
  if (!merges_j->is_array()) return make_error(ErrorKind::kParse, "model.merges: expected an array");
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(merges_j->size());
  for (size_t i = 0; i < merges_j->size(); ++i) {
    const json& e = (*merges_j)[i];
    if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    } else if (e.is_string()) {  // legacy "left right" form
      const std::string& s = e.get_ref<const std::string&>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        return make_error(ErrorKind::kParse, "model.merges[", i, "]: \"", s,
                          "\" is not \"left right\"");
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else {
      return make_error(ErrorKind::kParse, "model.merges[", i, "]: expected [left, right], got ",
                        e.dump());
    }
  }
  HLX_ASSIGN_OR_RETURN(bpe, Bpe::create(std::move(vocab), merges, std::move(opt)));
  return ok_status();
}

Status Tokenizer::Impl::parse_added(const json& list) {
  if (list.is_null()) return ok_status();
  if (!list.is_array()) return make_error(ErrorKind::kParse, "added_tokens: expected an array");
  trie_token.assign(1, -1);
  for (size_t i = 0; i < list.size(); ++i) {
    const json& t = list[i];
    std::string ctx = str_cat("added_tokens[", i, "]");
    HLX_ASSIGN_OR_RETURN(const json* idj, field(t, "id", ctx));
    HLX_ASSIGN_OR_RETURN(uint32_t id, as_id(*idj, ctx + ".id"));
    HLX_ASSIGN_OR_RETURN(std::string content, get_string(t, "content", ctx));
    HLX_ASSIGN_OR_RETURN(bool special, get_bool(t, "special", false, ctx));
    for (const char* flag : {"lstrip", "rstrip", "single_word", "normalized"}) {
      HLX_ASSIGN_OR_RETURN(bool on, get_bool(t, flag, false, ctx));
      if (on)
        return make_error(ErrorKind::kUnsupported, ctx, " (\"", content, "\"): ", flag, "=true");
    }
    if (content.empty()) return make_error(ErrorKind::kParse, ctx, ": empty content");
    if (!is_valid_utf8(content))
      return make_error(ErrorKind::kParse, ctx, ": content is not valid UTF-8");
    added_by_id[id] = added.size();
    added_by_content[content] = id;
    if (special) special_ids.insert(id);
    added.push_back({id, content, special});
    uint32_t node = 0;
    for (unsigned char c : content) {
      uint64_t key = (uint64_t(node) << 8) | c;
      auto it = trie_edges.find(key);
      if (it == trie_edges.end()) {
        uint32_t child = uint32_t(trie_token.size());
        trie_token.push_back(-1);
        it = trie_edges.emplace(key, child).first;
      }
      node = it->second;
    }
    trie_token[node] = id;
  }
  return ok_status();
}

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

Result<std::shared_ptr<const Tokenizer>> Tokenizer::load(const std::string& path) {
  auto text = read_file(path);
  if (!text.ok()) return text.status().with_context("tokenizer.json");
  return from_json(*text, path);
}

Result<std::shared_ptr<const Tokenizer>> Tokenizer::from_json(std::string_view json_text,
                                                              const std::string& source_name) {
  auto tok = from_json_impl(json_text);
  if (!tok.ok()) return tok.status().with_context(source_name);
  return tok;
}

Result<std::shared_ptr<const Tokenizer>> Tokenizer::from_json_impl(std::string_view json_text) {
  try {
    json doc = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded())
      return make_error(ErrorKind::kParse, "malformed JSON");
    if (!doc.is_object())
      return make_error(ErrorKind::kParse, "expected a JSON object at top level");
    auto impl = std::make_unique<Impl>();
    auto get = [&](const char* key) -> const json& {
      static const json null_value;
      auto it = doc.find(key);
      return it == doc.end() ? null_value : *it;
    };
    if (!get("truncation").is_null())
      return make_error(ErrorKind::kUnsupported, "truncation (set in tokenizer.json)");
    if (!get("padding").is_null())
      return make_error(ErrorKind::kUnsupported, "padding (set in tokenizer.json)");
    if (!doc.contains("model")) return make_error(ErrorKind::kParse, "missing field \"model\"");
    HLX_RETURN_IF_ERROR(impl->parse_model(doc["model"]));
    HLX_RETURN_IF_ERROR(impl->parse_added(get("added_tokens")));
    HLX_RETURN_IF_ERROR(impl->parse_normalizer(get("normalizer"), "normalizer"));
    HLX_RETURN_IF_ERROR(impl->parse_pretokenizer(get("pre_tokenizer"), "pre_tokenizer"));
    HLX_RETURN_IF_ERROR(impl->parse_post_processor(get("post_processor"), "post_processor"));
    if (!get("decoder").is_null()) {
      impl->has_decoder = true;
      HLX_RETURN_IF_ERROR(impl->parse_decoder(get("decoder"), "decoder"));
    }
    for (const auto& item : impl->post_single)
      if (item) impl->post_extra += item->size();
    impl->vocab_size = impl->bpe->id_bound();
    for (const AddedToken& t : impl->added)
      impl->vocab_size = std::max(impl->vocab_size, size_t(t.id) + 1);
    return std::shared_ptr<const Tokenizer>(new Tokenizer(std::move(impl)));
  } catch (const std::exception& e) {
    // Safety net: a JSON shape we did not anticipate must still come back as an error.
    return make_error(ErrorKind::kParse, e.what());
  }
}

Result<std::vector<uint32_t>> Tokenizer::encode(std::string_view text,
                                                bool add_special_tokens) const {
  return encode(text, add_special_tokens, std::numeric_limits<size_t>::max());
}

Result<std::vector<uint32_t>> Tokenizer::encode(std::string_view text, bool add_special_tokens,
                                                size_t max_tokens) const {
  if (!is_valid_utf8(text)) {
    bool incomplete;
    size_t at = valid_utf8_prefix(text, &incomplete);
    return make_error(ErrorKind::kInvalidArgument, "encode: text is not valid UTF-8 (byte offset ",
                      at, " of ", text.size(), ")");
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

Result<std::string> Tokenizer::decode(std::span<const uint32_t> ids,
                                      bool skip_special_tokens) const {
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
          if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && hex(t[3]) >= 0 &&
              hex(t[4]) >= 0) {
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
  if (text->size() <= prefix_text_.size() || std::string_view(*text).ends_with(kReplacement))
    return std::string();
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
