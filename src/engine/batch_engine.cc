#include "engine/batch_engine.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <set>

#include "engine/image_cache.h"
#include "engine/json_constraint.h"
#include "engine/multimodal_prompt.h"
#include "engine/prefill_plan.h"
#include "engine/vision_model.h"
#include "multimodal/qwen3_vl_processor.h"
#include "tokenizer/tokenizer.h"

namespace hlx::engine {

namespace {

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Length of the longest suffix of text[from, size) that is a proper prefix of some stop string.
size_t stop_holdback(const std::string& text, size_t from, const std::vector<std::string>& stops) {
  size_t best = 0;
  const size_t n = text.size() - from;
  for (const std::string& s : stops) {
    for (size_t k = std::min(n, s.size() - 1); k > best; --k)
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        best = k;
        break;
      }
  }
  return best;
}

}  // namespace

struct BatchEngine::Active {
  RequestId id = 0;
  GenerationRequest req;
  std::vector<int64_t> eos;
  std::optional<Sampler> sampler;
  std::unique_ptr<tok::StreamDecoder> decoder;
  int64_t slot = -1;
  // Image requests: where the images' rows lie in the (expanded) prompt and the side tensors,
  // each released as soon as the next stage has consumed it.
  bool multimodal = false;
  ExpandedPrompt expanded;
  std::vector<PreparedImage> prepared;          // per image, pixels until encoded
  std::vector<std::string> image_keys;          // per image, its image-feature cache key (cache or reuse on)
  std::vector<ImageSpanKey> image_spans;        // per image, its rows and key (prefix reuse on)
  size_t skipped_images = 0;                    // leading images inside the reused prefix: never encoded
  std::vector<EncodedImage> features;           // per encoded image, until merged
  Tensor merged;                                // [rows, hidden], until the last prefill chunk
  std::optional<TextModel::MropeInputs> mrope;  // M-RoPE models: positions, DeepStack rows
  bool merged_ready = false;
  std::vector<PrefillChunk> chunks;
  size_t next_chunk = 0;
  int64_t written = 0;                    // prompt rows already in the slot
  int64_t pending = -1;                   // the token the next decode feeds (decoding when >= 0)
  int64_t position = 0;                   // its cache row
  std::string text;                       // decoded generated text so far (cut at a stop string)
  size_t emitted = 0;                     // bytes of `text` already sent in events
  std::optional<TokenLogprobs> logprobs;  // of the token being pushed (sampling.logprobs)
  std::optional<JsonConstraint> json;     // structured output: where the text is in the grammar
  std::vector<float> masked;              // the row the sampler sees under the JSON mask
  bool finished = false;
  Completion done;
  Clock::time_point submitted, admitted, first_token;

  int64_t rows() const { return multimodal ? expanded.size() : int64_t(req.prompt.size()); }
  void release_side_tensors() {
    prepared.clear();
    features.clear();
    merged = Tensor();
    mrope.reset();
  }
};

BatchEngine::BatchEngine(TextModel& model, BatchEngineOptions options)
    : model_(model),
      options_(std::move(options)),
      owner_(std::this_thread::get_id()),
      slot_released_(size_t(model.shape().slots), 0) {
  if (options_.vision) tower_id_ = options_.vision->describe();
  if (options_.vision && options_.image_cache_bytes > 0)
    image_cache_ = std::make_unique<ImageFeatureCache>(options_.image_cache_bytes);
}

BatchEngine::~BatchEngine() {
  // Give the slots back so the model can be reused by someone else.
  for (auto& a : active_)
    if (a->slot >= 0) (void)model_.release(a->slot);
}

Result<RequestId> BatchEngine::submit(GenerationRequest request, Admission* admission) {
  // Images: each image's token count (from its size) is checked against the prompt's image rows
  // before admission, which counts the whole prompt (it arrives expanded).
  VisionModel* vision = options_.vision;
  const int64_t num_images = int64_t(request.images.size());
  const bool multimodal = num_images > 0;
  auto refuse = [&](Status s) -> Status {
    if (admission)
      *admission =
          Admission{s, int64_t(request.prompt.size()), request.max_new_tokens, model_.shape().context_capacity};
    return s;
  };
  ImagePromptLimits image_limits;
  if (vision) image_limits = {true, vision->image_token_id(), options_.max_images_per_request};
  // Counted only when they can be accepted: locate_image_rows refuses images on a text-only engine
  // and too many images before it reads the counts.
  std::vector<int64_t> image_tokens(size_t(num_images), 1);
  if (vision && num_images <= options_.max_images_per_request)
    for (int64_t i = 0; i < num_images; ++i) {
      Result<int64_t> t = vision->image_tokens(request.images[size_t(i)]);
      if (!t.ok()) return refuse(t.status().with_context(str_cat("image ", i)));
      image_tokens[size_t(i)] = *t;
    }
  Result<ExpandedPrompt> located = locate_image_rows(request.prompt, image_tokens, image_limits);
  if (!located.ok()) return refuse(located.status());
  if (multimodal) {
    if (!model_.has_embeddings_entries())
      return refuse(make_error(ErrorKind::kInvalidArgument,
                               "image requests need the text model loaded with prefill_embeddings entries"));
    if (vision->hidden_size() != model_.spec().hidden_size)
      return refuse(make_error(ErrorKind::kInvalidArgument, "the vision model's features have width ",
                               vision->hidden_size(), " but the text model's hidden size is ",
                               model_.spec().hidden_size));
  }
  // Admission is pure (limits are fixed at load), so it runs here on the caller's thread.
  const std::vector<int64_t> text_ids = multimodal ? located->text_ids() : std::vector<int64_t>();
  Admission adm =
      multimodal ? check_admission(model_.limits(), AdmissionRequest{located->size(), request.max_new_tokens, text_ids})
                 : check_text_admission(model_.limits(), request.prompt, request.max_new_tokens);
  if (multimodal && !adm.ok())
    adm.status = adm.status.with_context(str_cat("prompt of ", request.prompt.size(), " tokens, ",
                                                 located->size() - int64_t(text_ids.size()), " of them the rows of ",
                                                 num_images, " image(s)"));
  if (admission) *admission = adm;
  if (!adm.ok()) return adm.status;
  auto sampler = Sampler::create(request.sampling, request.prompt);
  if (!sampler.ok()) return sampler.status();
  for (size_t i = 0; i < request.stop.size(); ++i)
    if (request.stop[i].empty()) return make_error(ErrorKind::kInvalidArgument, "stop string ", i, " is empty");
  if (!request.stop.empty() && !options_.tokenizer)
    return make_error(ErrorKind::kInvalidArgument, "stop strings need a tokenizer; the engine has none");
  const int64_t vocab = model_.spec().vocab_size;
  for (const auto& [id, bias] : request.sampling.logit_bias)
    if (id >= vocab)
      return make_error(ErrorKind::kInvalidArgument, "logit_bias token id ", id, " is outside the vocabulary [0, ",
                        vocab, ")");
  if (request.eos_token_ids)
    for (int64_t t : *request.eos_token_ids)
      if (t < 0 || t >= vocab)
        return make_error(ErrorKind::kInvalidArgument, "eos token id ", t, " is outside the vocabulary [0, ", vocab,
                          ")");

  auto a = std::make_unique<Active>();
  if (request.json_grammar) {
    if (!options_.tokenizer)
      return make_error(ErrorKind::kInvalidArgument,
                        "structured output (a JSON grammar) needs a tokenizer; the engine has none");
    std::lock_guard<std::mutex> lock(json_mu_);
    if (!json_trie_) {
      HLX_ASSIGN_OR_RETURN(json_trie_, TokenTrie::build(*options_.tokenizer, vocab));
    }
    // Drop the caches of grammars gone, and past 8 those of grammars no request uses (only
    // compile_cached's list holds them): each cache may hold ~10 MB of masks.
    for (auto it = json_caches_.begin(); it != json_caches_.end();)
      it = it->second.first.expired() || (json_caches_.size() > 8 && it->second.first.use_count() <= 1)
               ? json_caches_.erase(it)
               : std::next(it);
    auto& entry = json_caches_[request.json_grammar.get()];
    if (!entry.second) entry = {request.json_grammar, std::make_shared<JsonMaskCache>()};
    a->json.emplace(request.json_grammar, json_trie_, entry.second);
  }
  if (multimodal) {
    // Preprocessing is pure and may be slow (resize): done here, on the submitting thread.
    Clock::time_point t0 = Clock::now();
    for (int64_t i = 0; i < num_images; ++i) {
      auto px = vision->preprocess(request.images[size_t(i)]);
      if (!px.ok()) return px.status().with_context(str_cat("image ", i));
      if (px->tokens != image_tokens[size_t(i)])
        return make_error(ErrorKind::kInternal, "image ", i, ": preprocessing gives ", px->tokens,
                          " tokens, its size promised ", image_tokens[size_t(i)]);
      // The cache key is a hash of the pixels: computed here, off the engine thread. It also keys
      // the image's rows for prefix reuse.
      if (image_cache_ || options_.prefix_cache) a->image_keys.push_back(ImageFeatureCache::key(*px, tower_id_));
      a->prepared.push_back(std::move(*px));
    }
    if (model_.has_mrope_entries()) {
      Result<mm::MropePositions> mp = vision->mrope_positions(located->ids, a->prepared);
      if (!mp.ok()) return mp.status();
      a->mrope.emplace();
      a->mrope->positions = Tensor::empty(DType::kI32, {3, located->size()});
      std::memcpy(a->mrope->positions.data<int32_t>(), mp->positions.data(), mp->positions.size() * sizeof(int32_t));
      a->mrope->rope_delta = mp->rope_delta;
    }
    a->done.preprocess_ms = ms_between(t0, Clock::now());
    a->multimodal = true;
    a->expanded = std::move(*located);
    if (options_.prefix_cache)
      for (int64_t i = 0; i < num_images; ++i) {
        const int64_t row = a->expanded.image_rows[size_t(i)];
        a->image_spans.push_back({row, row + a->expanded.image_tokens[size_t(i)], a->image_keys[size_t(i)]});
      }
    a->done.images = num_images;
    std::vector<mm::Image>().swap(request.images);  // the decoded images are not needed any more
  }
  a->eos = request.eos_token_ids ? *request.eos_token_ids : model_.spec().eos_token_ids;
  a->sampler.emplace(std::move(*sampler));
  if (options_.tokenizer)
    a->decoder = std::make_unique<tok::StreamDecoder>(options_.tokenizer, options_.skip_special_tokens);
  a->req = std::move(request);
  a->done.prompt_tokens = a->rows();
  a->submitted = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  a->id = a->done.id = next_id_++;
  RequestId id = a->id;
  live_.insert(id);
  inbox_.push_back(std::move(a));
  ++queued_count_;
  return id;
}

Status BatchEngine::cancel(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!live_.count(id)) return make_error(ErrorKind::kNotFound, "request ", id, " is not queued or running");
    cancel_inbox_.push_back(id);
  }
  if (std::this_thread::get_id() == owner_ && !in_step_) drain_inbox();
  return ok_status();
}

void BatchEngine::publish_counts() {
  std::lock_guard<std::mutex> lock(mu_);
  queued_count_ = int64_t(inbox_.size() + waiting_.size());
  running_count_ = int64_t(active_.size());
}

void BatchEngine::drain_inbox() {
  std::vector<RequestId> cancels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (!inbox_.empty()) {
      waiting_.push_back(std::move(inbox_.front()));
      inbox_.pop_front();
    }
    cancels.swap(cancel_inbox_);
  }
  for (RequestId id : cancels) apply_cancel(id);
  reap();
}

void BatchEngine::apply_cancel(RequestId id) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it)
    if ((*it)->id == id) {
      std::unique_ptr<Active> a = std::move(*it);
      waiting_.erase(it);
      finish(*a, Finish::kCancelled);
      store(*a);
      return;
    }
  for (auto& a : active_)
    if (a->id == id && !a->finished) {
      finish(*a, Finish::kCancelled);
      return;
    }
}

void BatchEngine::emit(Active& a, Event e) {
  e.id = a.id;
  if (a.req.on_event) {
    a.req.on_event(e);
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  outbox_.push_back(std::move(e));
}

void BatchEngine::finish(Active& a, Finish why, Status error) {
  if (a.finished) return;
  a.finished = true;
  a.release_side_tensors();
  if (a.slot >= 0) {
    Status r = model_.release(a.slot);
    slot_released_[size_t(a.slot)] = ++tick_;
    if (!r.ok() && error.ok() && why != Finish::kError) {
      why = Finish::kError;
      error = r;
    }
    a.slot = -1;
  }
  Clock::time_point now = Clock::now();
  if (a.first_token != Clock::time_point()) a.done.decode_ms = ms_between(a.first_token, now);
  if (a.admitted == Clock::time_point()) a.done.queue_ms = ms_between(a.submitted, now);
  a.done.finish = why;
  a.done.error = error;
  a.done.text = a.text;
  Event e;
  e.kind = Event::Kind::kFinished;
  e.text = a.text.substr(std::min(a.emitted, a.text.size()));
  a.emitted = a.text.size();
  e.finish = why;
  e.error = error;
  e.prompt_tokens = a.done.prompt_tokens;
  e.cached_tokens = a.done.cached_tokens;
  e.preprocess_ms = a.done.preprocess_ms;
  e.encode_ms = a.done.encode_ms;
  e.prefill_ms = a.done.prefill_ms;
  e.decode_ms = a.done.decode_ms;
  emit(a, std::move(e));
  std::lock_guard<std::mutex> lock(mu_);
  live_.erase(a.id);
}

void BatchEngine::store(Active& a) {
  if (options_.keep_completions) completions_[a.id] = std::move(a.done);
}

bool BatchEngine::push_token(Active& a, int64_t token) {
  a.done.tokens.push_back(token);
  if (a.first_token == Clock::time_point()) a.first_token = Clock::now();
  // A closed JSON value ends the request as an EOS would (nothing else may follow it).
  const bool eos = std::find(a.eos.begin(), a.eos.end(), token) != a.eos.end() || (a.json && a.json->done());
  const bool length = int64_t(a.done.tokens.size()) >= a.req.max_new_tokens;
  Status err;
  if (a.decoder) {
    auto piece = a.decoder->step(uint32_t(token));
    if (piece.ok()) {
      a.text += *piece;
      if (eos || length) {
        auto rest = a.decoder->finish();
        if (rest.ok())
          a.text += *rest;
        else
          err = rest.status();
      }
    } else {
      err = piece.status();
    }
  }
  Finish f = Finish::kNone;
  if (!a.req.stop.empty()) {
    size_t cut = std::string::npos;
    for (const std::string& s : a.req.stop) cut = std::min(cut, a.text.find(s, a.emitted));
    if (cut != std::string::npos) {
      a.text.resize(cut);
      f = Finish::kStop;
    }
  }
  if (f == Finish::kNone) {
    if (eos)
      f = Finish::kStop;
    else if (length)
      f = Finish::kLength;
  }
  size_t upto = a.text.size();
  if (f == Finish::kNone && err.ok()) upto -= stop_holdback(a.text, a.emitted, a.req.stop);
  Event e;
  e.kind = Event::Kind::kToken;
  e.token = token;
  e.text = a.text.substr(a.emitted, upto - a.emitted);
  a.emitted = upto;
  if (a.logprobs) {
    e.logprobs = *a.logprobs;
    a.done.logprobs.push_back(std::move(*a.logprobs));
    a.logprobs.reset();
  }
  emit(a, std::move(e));
  if (!err.ok()) {
    finish(a, Finish::kError, err.with_context(str_cat("decoding generated token ", token)));
    return true;
  }
  if (f != Finish::kNone) {
    finish(a, f);
    return true;
  }
  return false;
}

bool BatchEngine::prefilling(RequestId id) const {
  for (const auto& a : active_)
    if (a->id == id) return !a->finished && a->pending < 0;
  return false;
}

void BatchEngine::admit_waiting() {
  while (!waiting_.empty()) {
    Active& a = *waiting_.front();
    if (a.req.max_new_tokens == 0) {  // nothing to generate: no slot, no prefill
      std::unique_ptr<Active> p = std::move(waiting_.front());
      waiting_.pop_front();
      p->admitted = Clock::now();
      p->done.queue_ms = ms_between(p->submitted, p->admitted);
      finish(*p, Finish::kLength);
      store(*p);
      continue;
    }
    if (model_.slot_pool().free_count() == 0) break;
    if (a.req.prefill_after && prefilling(a.req.prefill_after)) break;
    std::unique_ptr<Active> p = std::move(waiting_.front());
    waiting_.pop_front();
    p->admitted = Clock::now();
    p->done.queue_ms = ms_between(p->submitted, p->admitted);
    // Image requests' ids were checked in submit (image rows are not embedding-table ids). With
    // the prefix cache on, their prefix key adds each image's content key to the ids.
    Result<int64_t> slot = Status(ErrorKind::kInternal, "unset");
    int64_t keep = 0;
    if (p->multimodal && !options_.prefix_cache) {
      slot = model_.admit(AdmissionRequest{p->rows(), p->req.max_new_tokens, {}}, nullptr, -1);
    } else if (options_.prefix_cache) {
      const PromptKey key = p->multimodal ? PromptKey{p->expanded.ids, p->image_spans} : PromptKey{p->req.prompt, {}};
      const Placement pl = place(key);
      slot = model_.admit_reusing(key, p->req.max_new_tokens, pl.slot, pl.keep, pl.source);
      keep = pl.keep;
    } else {
      slot = model_.admit(p->req.prompt, p->req.max_new_tokens);
    }
    Result<std::vector<PrefillChunk>> chunks =
        slot.ok() ? model_.plan_chunks(p->multimodal ? std::span<const int64_t>(p->expanded.ids) : p->req.prompt, keep,
                                       p->rows() - keep, p->multimodal)
                  : Result<std::vector<PrefillChunk>>(slot.status());
    if (slot.ok()) {
      p->slot = *slot;
      p->written = keep;
      p->done.cached_tokens = keep;
    }
    if (!chunks.ok()) {
      finish(*p, Finish::kError, chunks.status());
      store(*p);
      continue;
    }
    p->chunks = std::move(*chunks);
    if (p->multimodal) {
      // Images wholly before the first row any chunk reads (a replaying chunk near the capacity
      // reads rows before `keep`) are in the cache already: no encode, not even a cache lookup.
      const int64_t first = p->chunks.empty() ? keep : p->chunks.front().start;
      while (p->skipped_images < p->prepared.size() &&
             p->expanded.image_rows[p->skipped_images] + p->expanded.image_tokens[p->skipped_images] <= first) {
        p->prepared[p->skipped_images].pixels = Tensor();
        ++p->skipped_images;
        ++p->done.reused_images;
      }
    }
    active_.push_back(std::move(p));
  }
}

BatchEngine::Placement BatchEngine::place(const PromptKey& prompt) const {
  // TextModel matches ids, image keys and writer, and leaves the last prompt row to prefill.
  auto match = [&](int64_t s) { return model_.reusable_rows(s, prompt); };
  const SlotPool& pool = model_.slot_pool();
  Placement best;
  int64_t lru = -1;
  for (int64_t s = 0; s < pool.slots(); ++s) {
    if (pool.in_use(s)) continue;
    const int64_t m = match(s);
    const uint64_t used = slot_released_[size_t(s)];
    if (best.slot < 0 || m > best.keep || (m == best.keep && used < slot_released_[size_t(best.slot)]))
      best = {s, m, s};
    if (lru < 0 || used < slot_released_[size_t(lru)]) lru = s;
  }
  // A slot in use may hold a longer prefix (a shared system prompt): copy it into the least
  // recently used free slot. (A free slot holding it was already found above.)
  for (int64_t s = 0; s < pool.slots(); ++s) {
    if (!pool.in_use(s)) continue;
    const int64_t m = match(s);
    if (m > best.keep) best = {lru, m, s};
  }
  return best;
}

void BatchEngine::prefill_one() {
  for (auto& ap : active_) {
    Active& a = *ap;
    if (a.finished || a.next_chunk >= a.chunks.size()) continue;
    if (a.multimodal && !a.merged_ready) {
      if (prepare_image_rows(a)) return;  // an image encoded (or the request failed): this step's work
    }
    const PrefillChunk& c = a.chunks[a.next_chunk++];
    // The rows this chunk adds; TextModel plans exactly this chunk for them (a replaying chunk
    // near the capacity included), so the bits equal one prefill() of the whole prompt.
    const int64_t end = c.start + c.length;
    Clock::time_point t0 = Clock::now();
    Result<Tensor> logits = Status(ErrorKind::kInternal, "unset");
    if (a.multimodal) {
      logits = model_.prefill_image_prompt(a.slot, a.merged, a.expanded.ids, end, a.mrope ? &*a.mrope : nullptr);
    } else {
      std::span<const int64_t> piece(a.req.prompt.data() + a.written, size_t(end - a.written));
      logits = model_.prefill(a.slot, piece);
    }
    a.done.prefill_ms += ms_between(t0, Clock::now());
    ++a.done.prefill_chunks;
    if (!logits.ok()) {
      finish(a, Finish::kError, logits.status().with_context(str_cat("request ", a.id, " prefill")));
      return;
    }
    a.written = end;
    if (a.next_chunk < a.chunks.size()) return;
    a.release_side_tensors();  // the merged rows are in the cache now
    const Tensor& lg = *logits;
    if (a.req.on_logits) a.req.on_logits(std::span<const float>(lg.data<float>(), size_t(lg.num_elements())));
    auto tok = sample(a, std::span<const float>(lg.data<float>(), size_t(lg.num_elements())));
    if (!tok.ok()) {
      finish(a, Finish::kError, tok.status());
      return;
    }
    if (!push_token(a, *tok)) {
      a.pending = *tok;
      a.position = a.rows();
    }
    return;  // one chunk per step
  }
}

bool BatchEngine::prepare_image_rows(Active& a) {
  // Cached images take no encode call: their features are the tensors an earlier encode returned.
  // (With the cache on, submit() gave every prepared image its key.)
  // Images inside the reused prefix: placeholders (their rows are never read).
  while (a.features.size() < a.skipped_images) a.features.push_back(EncodedImage{});
  while (image_cache_ && a.features.size() < a.prepared.size()) {
    std::optional<EncodedImage> hit = image_cache_->find(a.image_keys[a.features.size()]);
    if (!hit) break;
    a.prepared[a.features.size()].pixels = Tensor();
    a.features.push_back(std::move(*hit));
    ++a.done.cached_images;
  }
  if (a.features.size() < a.prepared.size()) {
    const size_t i = a.features.size();
    Clock::time_point t0 = Clock::now();
    auto f = options_.vision->encode(a.prepared[i]);
    a.done.encode_ms += ms_between(t0, Clock::now());
    if (!f.ok()) {
      finish(a, Finish::kError, f.status().with_context(str_cat("request ", a.id, " image ", i, " encode")));
      return true;
    }
    a.prepared[i].pixels = Tensor();  // encoded: the pixels are not needed any more
    if (image_cache_) image_cache_->put(a.image_keys[i], *f);
    a.features.push_back(std::move(*f));
    return true;
  }
  Clock::time_point t0 = Clock::now();
  Status s = merge_image_rows(a);
  a.done.prefill_ms += ms_between(t0, Clock::now());
  if (!s.ok()) {
    finish(a, Finish::kError, s.with_context(str_cat("request ", a.id, " merge")));
    return true;
  }
  a.features.clear();
  a.prepared.clear();
  a.merged_ready = true;
  return false;
}

Status BatchEngine::merge_image_rows(Active& a) {
  HLX_ASSIGN_OR_RETURN(Tensor text, model_.embed_tokens(a.expanded.text_ids()));
  std::vector<Tensor> features;
  const int64_t hidden = model_.spec().hidden_size;
  for (size_t i = 0; i < a.features.size(); ++i)  // zeros for the rows of reused images (never read)
    features.push_back(i < a.skipped_images ? Tensor::zeros(DType::kF32, {a.expanded.image_tokens[i], hidden})
                                            : a.features[i].features);
  HLX_ASSIGN_OR_RETURN(a.merged, merge_embeddings(a.expanded, text, features));
  if (!a.mrope || model_.spec().deepstack_layers.empty()) return ok_status();
  // DeepStack: every image row of the prompt past the reused images, image after image, with its
  // K feature rows.
  const int64_t nv = std::accumulate(a.expanded.image_tokens.begin() + int64_t(a.skipped_images),
                                     a.expanded.image_tokens.end(), int64_t(0));
  const int64_t k_layers = int64_t(model_.spec().deepstack_layers.size());
  DeepstackPayload ds{Tensor::empty(DType::kI32, {nv}), Tensor::empty(DType::kF32, {k_layers, nv, hidden}), nv};
  int64_t v = 0;
  for (size_t i = a.skipped_images; i < a.features.size(); ++i) {
    const Tensor& d = a.features[i].deepstack;
    const int64_t t = a.expanded.image_tokens[i];
    if (d.dtype() != DType::kF32 || d.shape() != Shape{k_layers, t, hidden})
      return make_error(ErrorKind::kInternal, "image ", i, " DeepStack features are ", d.type_string(),
                        ", expected f32 [", k_layers, ", ", t, ", ", hidden, "]");
    for (int64_t r = 0; r < t; ++r) ds.visual_positions.data<int32_t>()[v + r] = int32_t(a.expanded.image_rows[i] + r);
    for (int64_t k = 0; k < k_layers; ++k)
      std::memcpy(ds.layer_features.data<float>() + (k * nv + v) * hidden, d.data<float>() + k * t * hidden,
                  size_t(t * hidden) * sizeof(float));
    v += t;
  }
  a.mrope->deepstack = std::move(ds);
  return ok_status();
}

void BatchEngine::decode_all() {
  std::vector<Active*> rows_of;
  std::vector<DecodeRow> rows;
  for (auto& ap : active_)
    if (!ap->finished && ap->pending >= 0) {
      rows_of.push_back(ap.get());
      rows.push_back(DecodeRow{ap->slot, ap->pending, ap->position});
    }
  if (rows.empty()) return;
  auto out = model_.decode(rows);
  if (!out.ok()) {
    for (Active* a : rows_of)
      finish(*a, Finish::kError, out.status().with_context(str_cat("decode of ", rows.size(), " rows")));
    return;
  }
  const int64_t v = model_.spec().vocab_size;
  const float* base = out->data<float>();
  for (size_t i = 0; i < rows_of.size(); ++i) {
    Active& a = *rows_of[i];
    if (a.req.on_logits) a.req.on_logits(std::span<const float>(base + int64_t(i) * v, size_t(v)));
    auto tok = sample(a, std::span<const float>(base + int64_t(i) * v, size_t(v)));
    if (!tok.ok()) {
      finish(a, Finish::kError, tok.status());
      continue;
    }
    if (!push_token(a, *tok)) {
      a.pending = *tok;
      ++a.position;
    }
  }
}

Result<int64_t> BatchEngine::sample(Active& a, std::span<const float> logits) {
  if (!a.json) return a.sampler->next(logits, &a.logprobs);
  a.masked.assign(logits.begin(), logits.end());
  HLX_RETURN_IF_ERROR(a.json->mask_logits(a.masked, a.eos));
  HLX_ASSIGN_OR_RETURN(int64_t t, a.sampler->next(a.masked, &a.logprobs));
  if (std::find(a.eos.begin(), a.eos.end(), t) == a.eos.end()) HLX_RETURN_IF_ERROR(a.json->accept(t));
  return t;
}

void BatchEngine::reap() {
  for (auto it = active_.begin(); it != active_.end();) {
    if ((*it)->finished) {
      store(**it);
      it = active_.erase(it);
    } else {
      ++it;
    }
  }
  publish_counts();
}

Status BatchEngine::step() {
  if (std::this_thread::get_id() != owner_)
    return make_error(ErrorKind::kInvalidArgument,
                      "BatchEngine::step called from a thread that does not own the engine");
  if (in_step_) return make_error(ErrorKind::kInternal, "BatchEngine::step re-entered from an on_event callback");
  in_step_ = true;
  drain_inbox();
  admit_waiting();
  prefill_one();
  decode_all();
  // Cancels that arrived during this step (other threads, on_event callbacks) free their slots now.
  drain_inbox();
  in_step_ = false;
  return ok_status();
}

Status BatchEngine::run_until_idle() {
  while (!idle()) HLX_RETURN_IF_ERROR(step());
  return ok_status();
}

std::vector<Event> BatchEngine::events() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Event> out(std::make_move_iterator(outbox_.begin()), std::make_move_iterator(outbox_.end()));
  outbox_.clear();
  return out;
}

std::optional<Completion> BatchEngine::take_completion(RequestId id) {
  auto it = completions_.find(id);
  if (it == completions_.end()) return std::nullopt;
  Completion c = std::move(it->second);
  completions_.erase(it);
  return c;
}

bool BatchEngine::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return inbox_.empty() && cancel_inbox_.empty() && queued_count_ == 0 && running_count_ == 0;
}

int64_t BatchEngine::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_count_;
}

size_t BatchEngine::side_tensor_bytes() const {
  size_t total = 0;
  auto bytes = [](const Tensor& t) { return t.raw() ? t.nbytes() : size_t(0); };
  auto add = [&](const Active& a) {
    for (const PreparedImage& p : a.prepared) total += bytes(p.pixels);
    for (const EncodedImage& f : a.features) total += bytes(f.features) + bytes(f.deepstack);
    total += bytes(a.merged);
    if (a.mrope) {
      total += bytes(a.mrope->positions);
      if (a.mrope->deepstack)
        total += bytes(a.mrope->deepstack->visual_positions) + bytes(a.mrope->deepstack->layer_features);
    }
  };
  for (const auto& a : waiting_) add(*a);
  for (const auto& a : active_) add(*a);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& a : inbox_) add(*a);
  return total;
}

size_t BatchEngine::image_cache_bytes() const { return image_cache_ ? image_cache_->bytes() : 0; }

int64_t BatchEngine::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_count_;
}

}  // namespace hlx::engine
