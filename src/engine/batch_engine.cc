#include "engine/batch_engine.h"

#include <algorithm>
#include <set>

#include "engine/multimodal_prompt.h"
#include "engine/prefill_plan.h"
#include "engine/vision_model.h"
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
  // Image requests: the prompt as the slot holds it (placeholders expanded) and the side tensors,
  // each released as soon as the next stage has consumed it.
  bool multimodal = false;
  ExpandedPrompt expanded;
  std::vector<Tensor> pixels;    // per image, until encoded
  std::vector<Tensor> features;  // per encoded image, until merged
  Tensor merged;                 // [rows, hidden], until the last prefill chunk
  bool merged_ready = false;
  std::vector<PrefillChunk> chunks;
  size_t next_chunk = 0;
  int64_t written = 0;   // prompt rows already in the slot
  int64_t pending = -1;  // the token the next decode feeds (decoding when >= 0)
  int64_t position = 0;  // its cache row
  std::string text;      // decoded generated text so far (cut at a stop string)
  size_t emitted = 0;    // bytes of `text` already sent in events
  bool finished = false;
  Completion done;
  Clock::time_point submitted, admitted, first_token;

  int64_t rows() const { return multimodal ? expanded.size() : int64_t(req.prompt.size()); }
  void release_side_tensors() {
    pixels.clear();
    features.clear();
    merged = Tensor();
  }
};

BatchEngine::BatchEngine(TextModel& model, BatchEngineOptions options)
    : model_(model), options_(std::move(options)), owner_(std::this_thread::get_id()) {}

BatchEngine::~BatchEngine() {
  // Give the slots back so the model can be reused by someone else.
  for (auto& a : active_)
    if (a->slot >= 0) (void)model_.release(a->slot);
}

Result<RequestId> BatchEngine::submit(GenerationRequest request, Admission* admission) {
  // Images: placeholders checked and expanded before admission, which counts the expanded rows.
  ImagePromptLimits image_limits;
  if (options_.vision)
    image_limits = {true, options_.vision->image_token_id(), options_.vision->tokens_per_image(),
                    options_.max_images_per_request};
  const int64_t num_images = int64_t(request.images.size());
  auto refuse = [&](Status s) -> Status {
    if (admission)
      *admission = Admission{s, int64_t(request.prompt.size()), request.max_new_tokens, model_.shape().context_capacity};
    return s;
  };
  Result<ExpandedPrompt> expanded = expand_image_placeholders(request.prompt, num_images, image_limits);
  if (!expanded.ok()) return refuse(expanded.status());
  const bool multimodal = num_images > 0;
  if (multimodal) {
    if (!model_.has_embeddings_entries())
      return refuse(make_error(ErrorKind::kInvalidArgument,
                               "image requests need the text model loaded with prefill_embeddings entries"));
    if (options_.vision->hidden_size() != model_.spec().hidden_size)
      return refuse(make_error(ErrorKind::kInvalidArgument, "the vision model's features have width ",
                               options_.vision->hidden_size(), " but the text model's hidden size is ",
                               model_.spec().hidden_size));
  }
  // Admission is pure (limits are fixed at load), so it runs here on the caller's thread.
  const std::vector<int64_t> text_ids = multimodal ? expanded->text_ids() : std::vector<int64_t>();
  Admission adm = multimodal ? check_admission(model_.limits(), AdmissionRequest{expanded->size(), request.max_new_tokens, text_ids})
                             : check_text_admission(model_.limits(), request.prompt, request.max_new_tokens);
  if (multimodal && !adm.ok())
    adm.status = adm.status.with_context(str_cat("prompt of ", request.prompt.size(), " tokens with ", num_images,
                                                 " image(s) expanded to ", expanded->size(), " tokens (",
                                                 expanded->tokens_per_image, " per image)"));
  if (admission) *admission = adm;
  if (!adm.ok()) return adm.status;
  auto sampler = Sampler::create(request.sampling, request.prompt);
  if (!sampler.ok()) return sampler.status();
  for (size_t i = 0; i < request.stop.size(); ++i)
    if (request.stop[i].empty())
      return make_error(ErrorKind::kInvalidArgument, "stop string ", i, " is empty");
  if (!request.stop.empty() && !options_.tokenizer)
    return make_error(ErrorKind::kInvalidArgument, "stop strings need a tokenizer; the engine has none");
  const int64_t vocab = model_.spec().vocab_size;
  if (request.eos_token_ids)
    for (int64_t t : *request.eos_token_ids)
      if (t < 0 || t >= vocab)
        return make_error(ErrorKind::kInvalidArgument, "eos token id ", t, " is outside the vocabulary [0, ", vocab, ")");

  auto a = std::make_unique<Active>();
  if (multimodal) {
    // Preprocessing is pure and may be slow (resize): done here, on the submitting thread.
    Clock::time_point t0 = Clock::now();
    for (int64_t i = 0; i < num_images; ++i) {
      auto px = options_.vision->preprocess(request.images[size_t(i)]);
      if (!px.ok()) return px.status().with_context(str_cat("image ", i));
      a->pixels.push_back(std::move(*px));
    }
    a->done.preprocess_ms = ms_between(t0, Clock::now());
    a->multimodal = true;
    a->expanded = std::move(*expanded);
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
  const bool eos = std::find(a.eos.begin(), a.eos.end(), token) != a.eos.end();
  const bool length = int64_t(a.done.tokens.size()) >= a.req.max_new_tokens;
  Status err;
  if (a.decoder) {
    auto piece = a.decoder->step(uint32_t(token));
    if (piece.ok()) {
      a.text += *piece;
      if (eos || length) {
        auto rest = a.decoder->finish();
        if (rest.ok()) a.text += *rest;
        else err = rest.status();
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
    if (eos) f = Finish::kStop;
    else if (length) f = Finish::kLength;
  }
  size_t upto = a.text.size();
  if (f == Finish::kNone && err.ok()) upto -= stop_holdback(a.text, a.emitted, a.req.stop);
  Event e;
  e.kind = Event::Kind::kToken;
  e.token = token;
  e.text = a.text.substr(a.emitted, upto - a.emitted);
  a.emitted = upto;
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
    std::unique_ptr<Active> p = std::move(waiting_.front());
    waiting_.pop_front();
    p->admitted = Clock::now();
    p->done.queue_ms = ms_between(p->submitted, p->admitted);
    // Image requests' ids were checked in submit (image rows are not embedding-table ids).
    auto slot = p->multimodal ? model_.admit(AdmissionRequest{p->rows(), p->req.max_new_tokens, {}})
                              : model_.admit(p->req.prompt, p->req.max_new_tokens);
    Result<std::vector<PrefillChunk>> chunks =
        slot.ok() ? plan_prefill_chunks(model_.prefill_buckets(), model_.shape().context_capacity, 0, p->rows())
                  : Result<std::vector<PrefillChunk>>(slot.status());
    if (slot.ok()) p->slot = *slot;
    if (!chunks.ok()) {
      finish(*p, Finish::kError, chunks.status());
      store(*p);
      continue;
    }
    p->chunks = std::move(*chunks);
    active_.push_back(std::move(p));
  }
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
      logits = model_.prefill_embeddings(a.slot, a.merged, a.expanded.ids, end);
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
    auto tok = a.sampler->next(std::span<const float>(lg.data<float>(), size_t(lg.num_elements())));
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
  if (a.features.size() < a.pixels.size()) {
    const size_t i = a.features.size();
    Clock::time_point t0 = Clock::now();
    auto f = options_.vision->encode(a.pixels[i]);
    a.done.encode_ms += ms_between(t0, Clock::now());
    if (!f.ok()) {
      finish(a, Finish::kError, f.status().with_context(str_cat("request ", a.id, " image ", i, " encode")));
      return true;
    }
    a.pixels[i] = Tensor();  // encoded: the pixels are not needed any more
    a.features.push_back(std::move(*f));
    return true;
  }
  Clock::time_point t0 = Clock::now();
  auto text = model_.embed_tokens(a.expanded.text_ids());
  Result<Tensor> merged = text.ok() ? merge_embeddings(a.expanded, *text, a.features) : Result<Tensor>(text.status());
  a.done.prefill_ms += ms_between(t0, Clock::now());
  if (!merged.ok()) {
    finish(a, Finish::kError, merged.status().with_context(str_cat("request ", a.id, " merge")));
    return true;
  }
  a.merged = std::move(*merged);
  a.features.clear();
  a.pixels.clear();
  a.merged_ready = true;
  return false;
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
    for (Active* a : rows_of) finish(*a, Finish::kError, out.status().with_context(str_cat("decode of ", rows.size(), " rows")));
    return;
  }
  const int64_t v = model_.spec().vocab_size;
  const float* base = out->data<float>();
  for (size_t i = 0; i < rows_of.size(); ++i) {
    Active& a = *rows_of[i];
    if (a.req.on_logits) a.req.on_logits(std::span<const float>(base + int64_t(i) * v, size_t(v)));
    auto tok = a.sampler->next(std::span<const float>(base + int64_t(i) * v, size_t(v)));
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
    return make_error(ErrorKind::kInvalidArgument, "BatchEngine::step called from a thread that does not own the engine");
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
  auto add = [&](const Active& a) {
    for (const Tensor& t : a.pixels) total += t.defined() ? t.nbytes() : 0;
    for (const Tensor& t : a.features) total += t.defined() ? t.nbytes() : 0;
    if (a.merged.raw()) total += a.merged.nbytes();
  };
  for (const auto& a : waiting_) add(*a);
  for (const auto& a : active_) add(*a);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& a : inbox_) add(*a);
  return total;
}

int64_t BatchEngine::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_count_;
}

}  // namespace hlx::engine
