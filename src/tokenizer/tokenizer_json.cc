// Reading tokenizer.json into Tokenizer::Impl: model, added tokens, normalizer, pre-tokenizer,
// post-processor and decoder. Every unexpected shape is a typed kParse/kUnsupported error.
#include <nlohmann/json.hpp>

#include "io/file.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace hlx::tok {

namespace {

// Typed JSON accessors: every mismatch is a kParse error naming the field, never an exception.
Result<const json*> field(const json& obj, const char* key, const std::string& ctx) {
  if (!obj.is_object()) return make_error(ErrorKind::kParse, ctx, ": expected a JSON object");
  auto it = obj.find(key);
  if (it == obj.end()) return make_error(ErrorKind::kParse, ctx, ": missing field \"", key, "\"");
  return &*it;
}

Result<std::string> get_string(const json& obj, const char* key, const std::string& ctx) {
  HLX_ASSIGN_OR_RETURN(const json* v, field(obj, key, ctx));
  if (!v->is_string()) return make_error(ErrorKind::kParse, ctx, ".", key, ": expected a string, got ", v->type_name());
  return v->get<std::string>();
}

Result<bool> get_bool(const json& obj, const char* key, bool fallback, const std::string& ctx) {
  if (!obj.is_object()) return make_error(ErrorKind::kParse, ctx, ": expected a JSON object");
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    return make_error(ErrorKind::kParse, ctx, ".", key, ": expected a boolean, got ", it->type_name());
  return it->get<bool>();
}

Result<uint32_t> as_id(const json& v, const std::string& ctx) {
  if (!v.is_number_unsigned() || v.get<uint64_t>() > 0x7FFFFFFFull)
    return make_error(ErrorKind::kParse, ctx, ": expected a token id (non-negative integer), got ", v.dump());
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
    if (pat.first) return make_error(ErrorKind::kUnsupported, ctx, ": Replace normalizer with a Regex pattern");
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
    if (!list->is_array()) return make_error(ErrorKind::kParse, ctx, ".pretokenizers: expected an array");
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
        return make_error(ErrorKind::kUnsupported, ctx, ": Split regex with behavior \"", behavior, "\"");
      pretokenizers.push_back({PreStep::kQwenRegex, ""});
      return ok_status();
    }
    if (pat.second.empty()) return make_error(ErrorKind::kUnsupported, ctx, ": Split on an empty string");
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
    if (pat.first) return make_error(ErrorKind::kUnsupported, ctx, ": Replace decoder with a Regex pattern");
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
      return make_error(ErrorKind::kParse, ctx, ".content: expected one character, got \"", content, "\"");
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
      if (id != "A") return make_error(ErrorKind::kUnsupported, ictx, ": sequence \"", id, "\" in single");
      post_single.push_back(std::nullopt);
    } else if (item.is_object() && item.contains("SpecialToken")) {
      HLX_ASSIGN_OR_RETURN(std::string id, get_string(item["SpecialToken"], "id", ictx));
      auto it = specials->find(id);
      if (it == specials->end())
        return make_error(ErrorKind::kParse, ictx, ": special token \"", id, "\" missing from special_tokens");
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
    if (m.contains(key) && !m[key].is_null() && !(m[key].is_string() && m[key].get<std::string>().empty()))
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
        return make_error(ErrorKind::kParse, "model.merges[", i, "]: \"", s, "\" is not \"left right\"");
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else {
      return make_error(ErrorKind::kParse, "model.merges[", i, "]: expected [left, right], got ", e.dump());
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
      if (on) return make_error(ErrorKind::kUnsupported, ctx, " (\"", content, "\"): ", flag, "=true");
    }
    if (content.empty()) return make_error(ErrorKind::kParse, ctx, ": empty content");
    if (!is_valid_utf8(content)) return make_error(ErrorKind::kParse, ctx, ": content is not valid UTF-8");
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
    if (doc.is_discarded()) return make_error(ErrorKind::kParse, "malformed JSON");
    if (!doc.is_object()) return make_error(ErrorKind::kParse, "expected a JSON object at top level");
    auto impl = std::make_unique<Impl>();
    auto get = [&](const char* key) -> const json& {
      static const json null_value;
      auto it = doc.find(key);
      return it == doc.end() ? null_value : *it;
    };
    if (!get("truncation").is_null()) return make_error(ErrorKind::kUnsupported, "truncation (set in tokenizer.json)");
    if (!get("padding").is_null()) return make_error(ErrorKind::kUnsupported, "padding (set in tokenizer.json)");
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
    for (const AddedToken& t : impl->added) impl->vocab_size = std::max(impl->vocab_size, size_t(t.id) + 1);
    return std::shared_ptr<const Tokenizer>(new Tokenizer(std::move(impl)));
  } catch (const std::exception& e) {
    // Safety net: a JSON shape we did not anticipate must still come back as an error.
    return make_error(ErrorKind::kParse, e.what());
  }
}

}  // namespace hlx::tok
