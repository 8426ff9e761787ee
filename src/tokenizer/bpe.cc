#include "tokenizer/bpe.h"

#include <cstdio>
#include <queue>

#include "tokenizer/unicode.h"

namespace hlx::tok {
namespace {

// Words longer than this are not cached (Gemma feeds whole inputs as one word), as in HF.
constexpr size_t kMaxCachedWordBytes = 256;
constexpr size_t kMaxCacheEntries = 1 << 16;

uint64_t pair_key(uint32_t a, uint32_t b) { return (uint64_t(a) << 32) | b; }

}  // namespace

Result<std::unique_ptr<Bpe>> Bpe::create(TokenMap vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                                         BpeOptions options) {
  std::unique_ptr<Bpe> bpe(new Bpe());
  uint32_t bound = 0;
  for (const auto& [tok, id] : vocab) bound = std::max(bound, id + 1);
  bpe->id_to_token_.resize(bound);
  bpe->has_id_.assign(bound, false);
  for (const auto& [tok, id] : vocab) {
    bpe->id_to_token_[id] = tok;
    bpe->has_id_[id] = true;
  }
  bpe->vocab_ = std::move(vocab);
  bpe->merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    auto ia = bpe->vocab_.find(a), ib = bpe->vocab_.find(b);
    if (ia == bpe->vocab_.end() || ib == bpe->vocab_.end())
      return make_error(ErrorKind::kParse, "BPE merge ", rank, " (\"", a, "\", \"", b,
                        "\") names a token missing from the vocabulary");
    auto im = bpe->vocab_.find(a + b);
    if (im == bpe->vocab_.end())
      return make_error(ErrorKind::kParse, "BPE merge ", rank, " produces \"", a + b,
                        "\", which is missing from the vocabulary");
    // Later duplicates overwrite earlier ones, as a Rust HashMap collect does.
    bpe->merges_[pair_key(ia->second, ib->second)] = {uint32_t(rank), im->second};
  }
  if (options.unk_token) {
    auto it = bpe->vocab_.find(*options.unk_token);
    if (it == bpe->vocab_.end())
      return make_error(ErrorKind::kParse, "BPE unk_token \"", *options.unk_token, "\" is not in the vocabulary");
    bpe->unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto it = bpe->vocab_.find(std::string_view(name));
    bpe->byte_ids_[b] = it == bpe->vocab_.end() ? -1 : int64_t(it->second);
  }
  bpe->options_ = std::move(options);
  return bpe;
}

std::optional<uint32_t> Bpe::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* Bpe::id_to_token(uint32_t id) const {
  if (id >= id_to_token_.size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

Status Bpe::tokenize(std::string_view word, std::vector<uint32_t>* out) const {
  if (word.empty()) return ok_status();
  if (options_.ignore_merges) {
    if (auto id = token_to_id(word)) {
      out->push_back(*id);
      return ok_status();
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(std::string(word));
    if (it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return ok_status();
    }
  }
  std::vector<uint32_t> ids;
  HLX_RETURN_IF_ERROR(merge_word(word, &ids));
  out->insert(out->end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::string(word), std::move(ids));
  }
  return ok_status();
}

Status Bpe::merge_word(std::string_view word, std::vector<uint32_t>* out) const {
  HLX_ASSIGN_OR_RETURN(std::vector<CodePoint> cps, decode_utf8(word));
  struct Symbol {
    uint32_t id;
    int64_t prev, next;
    bool alive;
  };
  std::vector<Symbol> syms;
  syms.reserve(cps.size());
  auto add = [&](uint32_t id) {
    int64_t idx = int64_t(syms.size());
    syms.push_back({id, idx - 1, -1, true});
    if (idx > 0) syms[size_t(idx - 1)].next = idx;
  };
  bool pending_unk = false;  // an unk not yet added (HF fuses runs of them)
  for (const CodePoint& cp : cps) {
    std::string_view ch = word.substr(cp.offset, cp.length);
    if (auto id = token_to_id(ch)) {
      if (pending_unk) add(*unk_id_), pending_unk = false;
      add(*id);
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (unsigned char b : ch) all = all && byte_ids_[b] >= 0;
      if (all) {
        // HF adds byte tokens without flushing a pending unk first; keep that order.
        for (unsigned char b : ch) add(uint32_t(byte_ids_[b]));
        continue;
      }
    }
    if (!unk_id_)
      return make_error(ErrorKind::kInvalidArgument, "BPE: character \"", ch,
                        "\" is not in the vocabulary and the model has no unk_token");
    if (pending_unk && options_.fuse_unk) continue;
    if (pending_unk) add(*unk_id_);
    pending_unk = true;
  }
  if (pending_unk) add(*unk_id_);

  // Lowest rank first, then leftmost position: HF's Word::merge_all.
  struct Merge {
    uint32_t rank;
    size_t pos;
    uint32_t new_id;
    bool operator>(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Merge, std::vector<Merge>, std::greater<Merge>> queue;
  for (size_t i = 0; i + 1 < syms.size(); ++i) {
    auto it = merges_.find(pair_key(syms[i].id, syms[i + 1].id));
    if (it != merges_.end()) queue.push({it->second.first, i, it->second.second});
  }
  while (!queue.empty()) {
    Merge top = queue.top();
    queue.pop();
    Symbol& cur = syms[top.pos];
    if (!cur.alive || cur.next < 0) continue;
    size_t right = size_t(cur.next);
    auto it = merges_.find(pair_key(cur.id, syms[right].id));
    if (it == merges_.end() || it->second.second != top.new_id) continue;  // stale entry
    cur.id = top.new_id;
    cur.next = syms[right].next;
    syms[right].alive = false;
    if (cur.next >= 0) syms[size_t(cur.next)].prev = int64_t(top.pos);
    if (cur.prev >= 0) {
      auto p = merges_.find(pair_key(syms[size_t(cur.prev)].id, cur.id));
      if (p != merges_.end()) queue.push({p->second.first, size_t(cur.prev), p->second.second});
    }
    if (cur.next >= 0) {
      auto n = merges_.find(pair_key(cur.id, syms[size_t(cur.next)].id));
      if (n != merges_.end()) queue.push({n->second.first, top.pos, n->second.second});
    }
  }
  for (const Symbol& s : syms)
    if (s.alive) out->push_back(s.id);
  return ok_status();
}

}  // namespace hlx::tok
