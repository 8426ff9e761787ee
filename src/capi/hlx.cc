// The C API (include/hlx/hlx.h) over engine::TextModel + engine::BatchEngine + tok::Tokenizer.
//
// Every exported function validates its arguments before touching anything, catches every C++
// exception (std::bad_alloc -> HLX_STATUS_OUT_OF_MEMORY, anything else -> HLX_STATUS_INTERNAL) and
// records the message of its outcome in a thread-local string.
#include "hlx/hlx.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <filesystem>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "engine/admission.h"
#include "engine/batch_engine.h"
#include "engine/json_constraint.h"
#include "engine/request.h"
#include "engine/sampling.h"
#include "engine/text_model.h"
#include "engine/vision_model.h"
#include "io/hf_config.h"
#include "models/vision_spec.h"
#include "multimodal/image.h"
#include "tokenizer/tokenizer.h"

// The header's init macros pass the caller's sizeof; here the names are the exported functions
// that programs built before version 2 call (they write the version-1 size only).
#undef hlx_model_options_init
#undef hlx_generation_params_init

struct hlx_model_s {
  std::atomic<int64_t> refs{1};
  std::thread::id owner;
  std::string dir;
  std::shared_ptr<const hlx::tok::Tokenizer> tokenizer;
  std::unique_ptr<hlx::engine::TextModel> model;
  std::unique_ptr<hlx::engine::VisionModel> vision;  // vision-language checkpoints only
  std::unique_ptr<hlx::engine::BatchEngine> engine;  // destroyed before `model` and `vision`
  bool in_step = false;                              // owner thread only

  // Polling: events drained from the engine but not yet handed out, and those handed out by the
  // latest hlx_poll (their strings back the hlx_event_t pointers).
  std::mutex poll_mu;
  std::deque<hlx::engine::Event> pending;
  std::vector<hlx::engine::Event> handed_out;

  // Ids submitted whose result has not been taken (to tell "running" from "unknown").
  std::mutex ids_mu;
  std::set<hlx_request_id_t> untaken;
  std::set<hlx_request_id_t> cancelled;                       // hlx_cancel accepted; erased when the result is taken
  std::map<hlx_request_id_t, int64_t> logprobs_k;             // params.logprobs > 0 of untaken requests
  std::map<hlx_request_id_t, hlx::engine::Completion> stash;  // taken, but copying out failed

  ~hlx_model_s() {
    engine.reset();
    vision.reset();
    model.reset();
  }
};

namespace {

using hlx::ErrorKind;
using hlx::Status;

thread_local std::string t_last_error;
thread_local hlx_admission_t t_last_admission = {0, 0, 0};

hlx_status_t to_c(ErrorKind k) {
  switch (k) {
    case ErrorKind::kOk:
      return HLX_STATUS_OK;
    case ErrorKind::kInvalidArgument:
      return HLX_STATUS_INVALID_ARGUMENT;
    case ErrorKind::kParse:
      return HLX_STATUS_PARSE;
    case ErrorKind::kVerify:
      return HLX_STATUS_VERIFY;
    case ErrorKind::kUnsupported:
      return HLX_STATUS_UNSUPPORTED;
    case ErrorKind::kIo:
      return HLX_STATUS_IO;
    case ErrorKind::kOutOfRange:
      return HLX_STATUS_OUT_OF_RANGE;
    case ErrorKind::kCapacityExceeded:
      return HLX_STATUS_CAPACITY_EXCEEDED;
    case ErrorKind::kNotFound:
      return HLX_STATUS_NOT_FOUND;
    case ErrorKind::kInternal:
      return HLX_STATUS_INTERNAL;
  }
  return HLX_STATUS_INTERNAL;
}

hlx_status_t ok() {
  t_last_error.clear();
  return HLX_STATUS_OK;
}

template <class... Args>
hlx_status_t fail(hlx_status_t code, const Args&... args) {
  try {
    t_last_error = hlx::str_cat(args...);
  } catch (...) {
    t_last_error.clear();
  }
  return code;
}

hlx_status_t fail(const Status& s) {
  if (s.ok()) return ok();
  return fail(to_c(s.kind()), s.message());
}

// Runs `body` (returning hlx_status_t), turning any exception into a status.
template <class F>
hlx_status_t guarded(const char* fn, F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(HLX_STATUS_OUT_OF_MEMORY, fn, ": out of memory");
  } catch (const std::exception& e) {
    return fail(HLX_STATUS_INTERNAL, fn, ": unexpected exception: ", e.what());
  } catch (...) {
    return fail(HLX_STATUS_INTERNAL, fn, ": unexpected exception");
  }
}

hlx_finish_t finish_to_c(hlx::engine::Finish f) {
  using hlx::engine::Finish;
  switch (f) {
    case Finish::kNone:
      return HLX_FINISH_NONE;
    case Finish::kStop:
      return HLX_FINISH_STOP;
    case Finish::kLength:
      return HLX_FINISH_LENGTH;
    case Finish::kCancelled:
      return HLX_FINISH_CANCELLED;
    case Finish::kError:
      return HLX_FINISH_ERROR;
  }
  return HLX_FINISH_ERROR;
}

// Fills a C event whose strings point into `e` (which must outlive the C event).
void event_to_c(const hlx::engine::Event& e, hlx_event_t* out) {
  out->id = e.id;
  out->kind = e.kind == hlx::engine::Event::Kind::kToken ? HLX_EVENT_TOKEN : HLX_EVENT_FINISHED;
  out->finish = e.kind == hlx::engine::Event::Kind::kFinished ? finish_to_c(e.finish) : HLX_FINISH_NONE;
  out->token = e.kind == hlx::engine::Event::Kind::kToken ? e.token : -1;
  out->text = e.text.c_str();
  out->text_len = e.text.size();
  out->error_status = to_c(e.error.kind());
  out->error_message = e.error.ok() ? "" : e.error.message().c_str();
}

// Every size each growable struct has had, oldest first: a struct only grows at its end, and the
// library accepts any of these sizes, giving the fields past the caller's size their defaults.
// Version 1's layouts are frozen here (they must never change); the current one is the header's.
struct ModelOptionsV1 {
  size_t struct_size;
  int64_t context_capacity, slots;
  int32_t threads, kv_dtype, load_tokenizer, skip_special_tokens;
};
struct ModelOptionsV2 {
  ModelOptionsV1 v1;
  int32_t prefix_cache, image_cache_mib;
};
struct GenerationParamsV1 {
  size_t struct_size;
  int64_t max_new_tokens;
  float temperature;
  int64_t top_k;
  float top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty;
  uint64_t seed;
  const char* const* stop;
  size_t stop_count;
  int32_t stop_at_eos;
  hlx_event_callback_t on_event;
  void* user_data;
};
struct GenerationParamsV2 {  // versions 2 and 3
  GenerationParamsV1 v1;
  const int64_t* logit_bias_ids;
  const float* logit_bias_values;
  size_t logit_bias_count;
};
static_assert(offsetof(hlx_model_options_t, skip_special_tokens) == offsetof(ModelOptionsV1, skip_special_tokens) &&
                  sizeof(ModelOptionsV1) <= offsetof(hlx_model_options_t, prefix_cache),
              "hlx_model_options_t must start with version 1's layout");
static_assert(offsetof(hlx_model_options_t, image_cache_mib) == offsetof(ModelOptionsV2, image_cache_mib) &&
                  sizeof(ModelOptionsV2) <= offsetof(hlx_model_options_t, weights),
              "hlx_model_options_t must start with version 2's layout");
static_assert(offsetof(hlx_generation_params_t, user_data) == offsetof(GenerationParamsV1, user_data) &&
                  sizeof(GenerationParamsV1) <= offsetof(hlx_generation_params_t, logit_bias_ids),
              "hlx_generation_params_t must start with version 1's layout");
static_assert(offsetof(hlx_generation_params_t, logit_bias_count) == offsetof(GenerationParamsV2, logit_bias_count) &&
                  sizeof(GenerationParamsV2) <= offsetof(hlx_generation_params_t, json_schema),
              "hlx_generation_params_t must start with version 2's layout");
static_assert(HLX_MAX_LOGIT_BIAS == hlx::engine::kMaxLogitBias);
static_assert(HLX_MAX_TOP_LOGPROBS == hlx::engine::kMaxTopLogprobs);

// A shipped size and the struct version that introduced it (a struct a version left unchanged has
// no entry of that version).
struct StructSize {
  size_t size;
  int version;
};
constexpr StructSize kOptionsSizes[] = {
    {sizeof(ModelOptionsV1), 1}, {sizeof(ModelOptionsV2), 2}, {sizeof(hlx_model_options_t), 3}};
constexpr StructSize kParamsSizes[] = {
    {sizeof(GenerationParamsV1), 1}, {sizeof(GenerationParamsV2), 2}, {sizeof(hlx_generation_params_t), 4}};

std::string known_sizes(const StructSize* sizes, size_t n) {
  std::string known;
  for (size_t v = 0; v < n; ++v)
    known += hlx::str_cat(v ? ", " : "", sizes[v].size, " (version ", sizes[v].version, ")");
  return known;
}

// The full struct from a caller's (possibly older, smaller) one at `in`: `out` holds the defaults
// and gets the caller's struct_size bytes over its start (never more: the caller's object may end
// there). `sizes` lists the accepted struct_size values.
template <class T, size_t N>
hlx_status_t widen(const char* what, const StructSize (&sizes)[N], const T* in, T& out) {
  size_t size;
  std::memcpy(&size, in, sizeof size);  // struct_size, the first field of every version
  for (size_t v = 0; v < N; ++v)
    if (size == sizes[v].size) {
      std::memcpy(&out, in, size);
      out.struct_size = sizeof(T);
      return HLX_STATUS_OK;
    }
  return fail(HLX_STATUS_INVALID_ARGUMENT, what, ".struct_size is ", size, "; this library accepts ",
              known_sizes(sizes, N), " (initialise the struct with the header's _init macro)");
}

// Writes the first `size` bytes of `defaults` to `out` when `size` is one of `sizes`.
template <class T, size_t N>
hlx_status_t init_sized(const char* fn, const StructSize (&sizes)[N], T defaults, T* out, size_t size) {
  if (!out) return fail(HLX_STATUS_INVALID_ARGUMENT, fn, ": the struct pointer is NULL");
  for (size_t v = 0; v < N; ++v)
    if (size == sizes[v].size) {
      defaults.struct_size = size;
      std::memcpy(out, &defaults, size);
      return ok();
    }
  return fail(HLX_STATUS_INVALID_ARGUMENT, fn, ": struct_size ", size,
              " is not one this library accepts: ", known_sizes(sizes, N));
}

hlx_model_options_t default_options() {
  hlx_model_options_t o;
  std::memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.context_capacity = HLX_CONTEXT_CAPACITY_DEFAULT;
  o.slots = 1;
  o.threads = 0;
  o.kv_dtype = HLX_KV_DTYPE_AUTO;
  o.load_tokenizer = 1;
  o.skip_special_tokens = 1;
  o.prefix_cache = 1;
  o.image_cache_mib = 256;
  o.weights = HLX_WEIGHTS_AS_STORED;
  return o;
}

hlx_generation_params_t default_params() {
  hlx_generation_params_t p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.max_new_tokens = 16;
  p.temperature = 0.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repetition_penalty = 1.0f;
  p.presence_penalty = 0.0f;
  p.frequency_penalty = 0.0f;
  p.seed = 0;
  p.stop = nullptr;
  p.stop_count = 0;
  p.stop_at_eos = 1;
  p.on_event = nullptr;
  p.user_data = nullptr;
  p.logit_bias_ids = nullptr;
  p.logit_bias_values = nullptr;
  p.logit_bias_count = 0;
  p.json_schema = nullptr;
  p.json_object = 0;
  p.logprobs = 0;
  return p;
}

// hlx_result_t cannot grow (its caller never sets a size), so what came later lives in this private
// tail of the one allocation hlx_result() makes, read by hlx_result_cached_tokens/_images().
struct ResultExtra {
  uint64_t magic;  // kResultMagic while the result is alive: catches a struct not from hlx_result()
  int64_t cached_tokens;
  int64_t cached_images;
  // Logprobs (version 4): K = params.logprobs (0 = off) and `count` tokens' entries at byte
  // `offset` of the block: double logprob[count], int64 top_count[count], int64 top_id[count * K],
  // double top_logprob[count * K].
  int64_t logprobs_k;
  int64_t logprobs_count;
  uint64_t logprobs_offset;
};
constexpr uint64_t kResultMagic = 0x686c78726573756cULL;  // "hlxresul"
constexpr size_t kResultExtraOffset = (sizeof(hlx_result_t) + 7) & ~size_t(7);

bool is_owner(const hlx_model_t* m) { return std::this_thread::get_id() == m->owner; }

// Owner-thread, not-inside-a-callback check for step/run/result.
hlx_status_t check_driver(const hlx_model_t* m, const char* fn) {
  if (!is_owner(m))
    return fail(HLX_STATUS_INVALID_ARGUMENT, fn,
                ": called from a thread that does not own the model (the thread that called hlx_model_load)");
  if (m->in_step) return fail(HLX_STATUS_INVALID_ARGUMENT, fn, ": called from inside an event callback");
  return HLX_STATUS_OK;
}

// Builds an engine request from C params (validated here; sampling/stop/eos rules are checked
// again by BatchEngine::submit, the single authority).
hlx_status_t build_request(hlx_model_t* m, const hlx_generation_params_t* caller, hlx::engine::GenerationRequest& req) {
  hlx_generation_params_t full = default_params();
  if (caller)
    if (hlx_status_t s = widen("hlx_generation_params_t", kParamsSizes, caller, full)) return s;
  const hlx_generation_params_t* params = &full;
  if (params->max_new_tokens < 0)
    return fail(HLX_STATUS_INVALID_ARGUMENT, "max_new_tokens ", params->max_new_tokens, " is negative");
  if (params->stop_count > HLX_MAX_STOP_STRINGS)
    return fail(HLX_STATUS_INVALID_ARGUMENT, "stop_count ", params->stop_count, " exceeds HLX_MAX_STOP_STRINGS (",
                HLX_MAX_STOP_STRINGS, ")");
  if (params->stop_count > 0 && !params->stop)
    return fail(HLX_STATUS_INVALID_ARGUMENT, "stop is NULL but stop_count is ", params->stop_count);
  if (params->stop_at_eos != 0 && params->stop_at_eos != 1)
    return fail(HLX_STATUS_INVALID_ARGUMENT, "stop_at_eos ", params->stop_at_eos, " must be 0 or 1");
  for (size_t i = 0; i < params->stop_count; ++i) {
    if (!params->stop[i]) return fail(HLX_STATUS_INVALID_ARGUMENT, "stop[", i, "] is NULL");
    if (params->stop[i][0] == '\0') return fail(HLX_STATUS_INVALID_ARGUMENT, "stop[", i, "] is empty");
    req.stop.emplace_back(params->stop[i]);
  }
  if (!req.stop.empty() && !m->tokenizer)
    return fail(HLX_STATUS_INVALID_ARGUMENT, "stop strings need a tokenizer; the model at '", m->dir, "' has none");
  req.max_new_tokens = params->max_new_tokens;
  req.sampling.temperature = params->temperature;
  req.sampling.top_k = params->top_k;
  req.sampling.top_p = params->top_p;
  req.sampling.min_p = params->min_p;
  req.sampling.repetition_penalty = params->repetition_penalty;
  req.sampling.presence_penalty = params->presence_penalty;
  req.sampling.frequency_penalty = params->frequency_penalty;
  req.sampling.seed = params->seed;
  // logit_bias: the count first (never read more than could be accepted), then each entry, naming
  // it; duplicates are left to validate_sampling.
  if (params->logit_bias_count > HLX_MAX_LOGIT_BIAS)
    return fail(HLX_STATUS_INVALID_ARGUMENT, "logit_bias_count ", params->logit_bias_count,
                " exceeds HLX_MAX_LOGIT_BIAS (", HLX_MAX_LOGIT_BIAS, ")");
  if (params->logit_bias_count > 0 && (!params->logit_bias_ids || !params->logit_bias_values))
    return fail(HLX_STATUS_INVALID_ARGUMENT, "logit_bias_", params->logit_bias_ids ? "values" : "ids",
                " is NULL but logit_bias_count is ", params->logit_bias_count);
  const int64_t vocab = m->model->spec().vocab_size;
  for (size_t i = 0; i < params->logit_bias_count; ++i) {
    const int64_t id = params->logit_bias_ids[i];
    const float bias = params->logit_bias_values[i];
    if (id < 0 || id >= vocab)
      return fail(HLX_STATUS_INVALID_ARGUMENT, "logit_bias_ids[", i, "] = ", id, " is outside the vocabulary [0, ",
                  vocab, ")");
    if (!std::isfinite(bias) || bias < -100 || bias > 100)
      return fail(HLX_STATUS_INVALID_ARGUMENT, "logit_bias_values[", i, "] = ", bias, " (token ", id,
                  ") is outside [-100, 100]");
    req.sampling.logit_bias.emplace_back(id, bias);
  }
  if (params->logprobs < 0 || params->logprobs > HLX_MAX_TOP_LOGPROBS)
    return fail(HLX_STATUS_INVALID_ARGUMENT, "logprobs ", params->logprobs, " is outside [0, ", HLX_MAX_TOP_LOGPROBS,
                "] (0 = off)");
  if (params->logprobs > 0) {
    req.sampling.logprobs = true;
    req.sampling.top_logprobs = params->logprobs;
  }
  if (Status s = hlx::engine::validate_sampling(req.sampling); !s.ok()) return fail(s);
  // Structured output: compiled here (through the shared cache, so requests of one schema share
  // its masks); the engine checks for a tokenizer.
  if (params->json_object != 0 && params->json_object != 1)
    return fail(HLX_STATUS_INVALID_ARGUMENT, "json_object ", params->json_object, " must be 0 or 1");
  if (params->json_object && params->json_schema)
    return fail(HLX_STATUS_INVALID_ARGUMENT, "give one of json_object and json_schema, not both");
  if (params->json_object) req.json_grammar = hlx::engine::JsonGrammar::any_object();
  if (params->json_schema) {
    const size_t len = strnlen(params->json_schema, HLX_MAX_JSON_SCHEMA_BYTES + 1);
    if (len == 0) return fail(HLX_STATUS_INVALID_ARGUMENT, "json_schema is empty (NULL = no schema)");
    if (len > HLX_MAX_JSON_SCHEMA_BYTES)
      return fail(HLX_STATUS_INVALID_ARGUMENT, "json_schema is longer than HLX_MAX_JSON_SCHEMA_BYTES (",
                  HLX_MAX_JSON_SCHEMA_BYTES, ")");
    // A schema document is a JSON object (as the server's response_format); compile() alone
    // would also take `true` and the like.
    const std::string_view text(params->json_schema, len);
    const size_t first = text.find_first_not_of(" \t\r\n");
    if (first == std::string_view::npos || text[first] != '{')
      return fail(HLX_STATUS_INVALID_ARGUMENT, "json_schema must be a JSON object (it does not start with '{')");
    auto g = hlx::engine::JsonGrammar::compile_cached(text);
    if (!g.ok()) return fail(g.status());  // its messages start with "json_schema: "
    req.json_grammar = *g;
  }
  if (!params->stop_at_eos) req.eos_token_ids = std::vector<int64_t>{};
  if (params->on_event) {
    hlx_event_callback_t cb = params->on_event;
    void* user = params->user_data;
    req.on_event = [cb, user](const hlx::engine::Event& e) {
      hlx_event_t ce;
      event_to_c(e, &ce);
      cb(user, &ce);
    };
  }
  return HLX_STATUS_OK;
}

hlx_status_t submit(hlx_model_t* m, std::vector<int64_t> prompt, hlx::engine::GenerationRequest req,
                    hlx_request_id_t* out_id) {
  req.prompt = std::move(prompt);
  const int64_t logprobs_k = req.sampling.logprobs ? req.sampling.top_logprobs : 0;
  hlx::engine::Admission adm;
  auto r = m->engine->submit(std::move(req), &adm);
  t_last_admission = {adm.effective_prompt_len, adm.max_new_tokens, adm.context_capacity};
  if (!r.ok()) return fail(r.status());
  {
    std::lock_guard<std::mutex> lock(m->ids_mu);
    m->untaken.insert(*r);
    if (logprobs_k > 0) m->logprobs_k[*r] = logprobs_k;
  }
  *out_id = *r;
  return ok();
}

// The capacity rejection for a prompt too long to even read (count > capacity), made by the same
// admission function as every other rejection.
hlx_status_t reject_oversized(hlx_model_t* m, size_t count, int64_t max_new_tokens) {
  hlx::engine::AdmissionRequest ar;
  ar.effective_prompt_len = int64_t(count > size_t(INT64_MAX) ? INT64_MAX : count);
  ar.max_new_tokens = max_new_tokens;
  hlx::engine::Admission adm = hlx::engine::check_admission(m->model->limits(), ar);
  t_last_admission = {adm.effective_prompt_len, adm.max_new_tokens, adm.context_capacity};
  if (adm.ok()) return fail(HLX_STATUS_INTERNAL, "oversized prompt of ", count, " tokens was admitted");
  return fail(adm.status);
}

}  // namespace

extern "C" {

#define HLX_STR_(x) #x
#define HLX_STR(x) HLX_STR_(x)
const char* hlx_version(void) {
  return HLX_STR(HLX_VERSION_MAJOR) "." HLX_STR(HLX_VERSION_MINOR) "." HLX_STR(HLX_VERSION_PATCH);
}
int hlx_abi_version(void) { return HLX_ABI_VERSION; }

const char* hlx_status_name(int status) {
  switch (status) {
    case HLX_STATUS_OK:
      return "ok";
    case HLX_STATUS_INVALID_ARGUMENT:
      return "invalid_argument";
    case HLX_STATUS_PARSE:
      return "parse";
    case HLX_STATUS_VERIFY:
      return "verify";
    case HLX_STATUS_UNSUPPORTED:
      return "unsupported";
    case HLX_STATUS_IO:
      return "io";
    case HLX_STATUS_OUT_OF_RANGE:
      return "out_of_range";
    case HLX_STATUS_CAPACITY_EXCEEDED:
      return "capacity_exceeded";
    case HLX_STATUS_NOT_FOUND:
      return "not_found";
    case HLX_STATUS_INTERNAL:
      return "internal";
    case HLX_STATUS_OUT_OF_MEMORY:
      return "out_of_memory";
    case HLX_STATUS_UNAVAILABLE:
      return "unavailable";
  }
  return "unknown";
}

const char* hlx_last_error_message(void) { return t_last_error.c_str(); }

hlx_status_t hlx_last_admission(hlx_admission_t* out) {
  if (!out) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_last_admission: out is NULL");
  *out = t_last_admission;
  return ok();
}

hlx_status_t hlx_model_options_init_sized(hlx_model_options_t* o, size_t struct_size) {
  return init_sized("hlx_model_options_init_sized", kOptionsSizes, default_options(), o, struct_size);
}

hlx_status_t hlx_model_options_init(hlx_model_options_t* o) {
  if (!o) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_model_options_init: options is NULL");
  return hlx_model_options_init_sized(o, kOptionsSizes[0].size);
}

hlx_status_t hlx_model_load(const char* model_dir, const hlx_model_options_t* options, hlx_model_t** out_model) {
  return guarded("hlx_model_load", [&]() -> hlx_status_t {
    if (!out_model) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_model_load: out_model is NULL");
    *out_model = nullptr;
    if (!model_dir) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_model_load: model_dir is NULL");
    if (!*model_dir) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_model_load: model_dir is empty");
    hlx_model_options_t o = default_options();
    if (options)
      if (hlx_status_t s = widen("hlx_model_options_t", kOptionsSizes, options, o)) return s;
    if (o.context_capacity != HLX_CONTEXT_CAPACITY_DEFAULT &&
        (o.context_capacity < 1 || o.context_capacity > HLX_MAX_CONTEXT_CAPACITY))
      return fail(HLX_STATUS_INVALID_ARGUMENT, "context_capacity ", o.context_capacity, " is outside [1, ",
                  HLX_MAX_CONTEXT_CAPACITY, "] (HLX_CONTEXT_CAPACITY_DEFAULT = -1 for the default)");
    if (o.slots < 1 || o.slots > HLX_MAX_SLOTS)
      return fail(HLX_STATUS_INVALID_ARGUMENT, "slots ", o.slots, " is outside [1, ", HLX_MAX_SLOTS, "]");
    if (o.threads < 0 || o.threads > HLX_MAX_THREADS)
      return fail(HLX_STATUS_INVALID_ARGUMENT, "threads ", o.threads, " is outside [0, ", HLX_MAX_THREADS, "]");
    if (o.kv_dtype != HLX_KV_DTYPE_BF16 && o.kv_dtype != HLX_KV_DTYPE_F32 && o.kv_dtype != HLX_KV_DTYPE_AUTO &&
        o.kv_dtype != HLX_KV_DTYPE_INT8)
      return fail(HLX_STATUS_INVALID_ARGUMENT, "kv_dtype ", o.kv_dtype,
                  " is unknown (expected HLX_KV_DTYPE_BF16 = 0, HLX_KV_DTYPE_F32 = 1, HLX_KV_DTYPE_AUTO = 2 or "
                  "HLX_KV_DTYPE_INT8 = 3)");
    if (o.load_tokenizer != 0 && o.load_tokenizer != 1)
      return fail(HLX_STATUS_INVALID_ARGUMENT, "load_tokenizer ", o.load_tokenizer, " must be 0 or 1");
    if (o.skip_special_tokens != 0 && o.skip_special_tokens != 1)
      return fail(HLX_STATUS_INVALID_ARGUMENT, "skip_special_tokens ", o.skip_special_tokens, " must be 0 or 1");
    if (o.prefix_cache != 0 && o.prefix_cache != 1)
      return fail(HLX_STATUS_INVALID_ARGUMENT, "prefix_cache ", o.prefix_cache, " must be 0 or 1");
    if (o.image_cache_mib < 0 || o.image_cache_mib > HLX_MAX_IMAGE_CACHE_MIB)
      return fail(HLX_STATUS_INVALID_ARGUMENT, "image_cache_mib ", o.image_cache_mib, " is outside [0, ",
                  HLX_MAX_IMAGE_CACHE_MIB, "] (0 disables the image-feature cache)");
    if (o.weights != HLX_WEIGHTS_AS_STORED && o.weights != HLX_WEIGHTS_INT8 && o.weights != HLX_WEIGHTS_INT4)
      return fail(HLX_STATUS_INVALID_ARGUMENT, "weights ", o.weights,
                  " is unknown (expected HLX_WEIGHTS_AS_STORED = 0, HLX_WEIGHTS_INT8 = 1 or HLX_WEIGHTS_INT4 = 2)");

    auto m = std::make_unique<hlx_model_t>();
    m->owner = std::this_thread::get_id();
    m->dir = model_dir;
    if (o.load_tokenizer) {
      const std::string tj = m->dir + "/tokenizer.json";
      std::error_code ec;
      if (std::filesystem::is_regular_file(tj, ec)) {
        auto t = hlx::tok::Tokenizer::load(tj);
        if (!t.ok()) return fail(t.status().with_context("hlx_model_load: " + tj));
        m->tokenizer = *t;
      }
    }
    hlx::engine::TextModelOptions to;
    to.context_capacity = o.context_capacity == HLX_CONTEXT_CAPACITY_DEFAULT ? 0 : o.context_capacity;
    to.slots = o.slots;
    to.threads = o.threads;
    if (o.kv_dtype != HLX_KV_DTYPE_AUTO)
      to.kv_dtype = o.kv_dtype == HLX_KV_DTYPE_F32    ? hlx::DType::kF32
                    : o.kv_dtype == HLX_KV_DTYPE_INT8 ? hlx::DType::kI8
                                                      : hlx::DType::kBF16;
    to.weight_format = o.weights == HLX_WEIGHTS_INT8   ? hlx::kernels::WeightFormat::kInt8
                       : o.weights == HLX_WEIGHTS_INT4 ? hlx::kernels::WeightFormat::kInt4
                                                       : hlx::kernels::WeightFormat::kAsStored;
    auto model = hlx::engine::TextModel::load(m->dir, to);
    if (!model.ok()) return fail(model.status().with_context("hlx_model_load: '" + m->dir + "'"));
    m->model = std::move(*model);
    auto image_token = hlx::engine::checkpoint_image_token_id(m->dir);
    if (!image_token.ok()) return fail(image_token.status().with_context("hlx_model_load: '" + m->dir + "'"));
    if (*image_token >= 0) {
      auto vision = hlx::engine::VisionModel::load(m->dir, {o.threads, m->tokenizer});
      if (!vision.ok()) return fail(vision.status().with_context("hlx_model_load: '" + m->dir + "' vision tower"));
      m->vision = std::move(*vision);
    }
    hlx::engine::BatchEngineOptions eo;
    eo.tokenizer = m->tokenizer;
    eo.skip_special_tokens = o.skip_special_tokens != 0;
    eo.keep_completions = true;
    eo.vision = m->vision.get();
    eo.prefix_cache = o.prefix_cache != 0;
    eo.image_cache_bytes = size_t(o.image_cache_mib) << 20;
    m->engine = std::make_unique<hlx::engine::BatchEngine>(*m->model, eo);
    *out_model = m.release();
    return ok();
  });
}

void hlx_model_retain(hlx_model_t* model) {
  if (model) model->refs.fetch_add(1, std::memory_order_relaxed);
}

void hlx_model_release(hlx_model_t* model) {
  if (!model) return;
  if (model->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    try {
      delete model;
    } catch (...) {
    }
  }
}

hlx_status_t hlx_model_info(const hlx_model_t* model, hlx_model_info_t* out_info) {
  if (!out_info) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_model_info: out_info is NULL");
  std::memset(out_info, 0, sizeof(*out_info));
  if (!model) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_model_info: model is NULL");
  out_info->context_capacity = model->model->shape().context_capacity;
  out_info->slots = model->model->shape().slots;
  out_info->vocab_size = model->model->spec().vocab_size;
  out_info->has_tokenizer = model->tokenizer ? 1 : 0;
  return ok();
}

hlx_status_t hlx_generation_params_init_sized(hlx_generation_params_t* p, size_t struct_size) {
  return init_sized("hlx_generation_params_init_sized", kParamsSizes, default_params(), p, struct_size);
}

hlx_status_t hlx_generation_params_init(hlx_generation_params_t* p) {
  if (!p) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_generation_params_init: params is NULL");
  return hlx_generation_params_init_sized(p, kParamsSizes[0].size);
}

hlx_status_t hlx_submit_tokens(hlx_model_t* model, const int64_t* ids, size_t count,
                               const hlx_generation_params_t* params, hlx_request_id_t* out_id) {
  t_last_admission = {0, 0, 0};
  return guarded("hlx_submit_tokens", [&]() -> hlx_status_t {
    if (!out_id) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_submit_tokens: out_id is NULL");
    *out_id = 0;
    if (!model) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_submit_tokens: model is NULL");
    if (!ids) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_submit_tokens: ids is NULL");
    if (count == 0) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_submit_tokens: count is 0 (the prompt is empty)");
    hlx::engine::GenerationRequest req;
    if (hlx_status_t s = build_request(model, params, req)) return s;
    // Never read more ids than could possibly be admitted.
    if (count > size_t(model->model->shape().context_capacity))
      return reject_oversized(model, count, req.max_new_tokens);
    return submit(model, std::vector<int64_t>(ids, ids + count), std::move(req), out_id);
  });
}

hlx_status_t hlx_submit_text(hlx_model_t* model, const char* text, const hlx_generation_params_t* params,
                             hlx_request_id_t* out_id) {
  t_last_admission = {0, 0, 0};
  return guarded("hlx_submit_text", [&]() -> hlx_status_t {
    if (!out_id) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_submit_text: out_id is NULL");
    *out_id = 0;
    if (!model) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_submit_text: model is NULL");
    if (!text) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_submit_text: text is NULL");
    if (!model->tokenizer)
      return fail(HLX_STATUS_NOT_FOUND, "hlx_submit_text: the model at '", model->dir,
                  "' was loaded without a tokenizer (no tokenizer.json); use hlx_submit_tokens");
    hlx::engine::GenerationRequest req;
    if (hlx_status_t s = build_request(model, params, req)) return s;
    auto enc = model->tokenizer->encode(text, /*add_special_tokens=*/true);
    if (!enc.ok()) return fail(enc.status().with_context("hlx_submit_text: prompt"));
    if (enc->empty()) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_submit_text: the prompt encodes to 0 tokens");
    return submit(model, std::vector<int64_t>(enc->begin(), enc->end()), std::move(req), out_id);
  });
}

static hlx_status_t image_common(const char* fn, hlx_model_t* model, const char* text,
                                 const hlx_generation_params_t* params, hlx_request_id_t* out_id) {
  if (!out_id) return fail(HLX_STATUS_INVALID_ARGUMENT, fn, ": out_id is NULL");
  *out_id = 0;
  if (!model) return fail(HLX_STATUS_INVALID_ARGUMENT, fn, ": model is NULL");
  if (!text) return fail(HLX_STATUS_INVALID_ARGUMENT, fn, ": text is NULL");
  hlx_generation_params_t full = default_params();  // checked before decoding; read again at submit
  if (params)
    if (hlx_status_t s = widen("hlx_generation_params_t", kParamsSizes, params, full)) return s;
  return HLX_STATUS_OK;
}

// One image + a text prompt: a text without the image placeholder gets one in front (as `hlx
// generate --image -p`), the placeholder is expanded for the image on the text (the family's
// layout, VisionModel::expand_prompt), then tokenized and submitted; the engine checks the image
// rows and admits on the whole prompt.
static hlx_status_t submit_image(const char* fn, hlx_model_t* model, const char* text, hlx::mm::Image image,
                                 const hlx_generation_params_t* params, hlx_request_id_t* out_id) {
  if (!model->vision) return fail(hlx::engine::text_only_model_error(fn, model->dir));
  if (!model->tokenizer)
    return fail(HLX_STATUS_NOT_FOUND, fn, ": the model at '", model->dir,
                "' was loaded without a tokenizer (no tokenizer.json); image prompts are text");
  const hlx::engine::VisionModel& vision = *model->vision;
  if (vision.placeholder().empty())
    return fail(HLX_STATUS_NOT_FOUND, fn, ": the tokenizer has no text for the image token id ",
                vision.image_token_id());
  auto tokens = vision.image_tokens(image);
  if (!tokens.ok()) return fail(tokens.status().with_context(hlx::str_cat(fn, ": image")));
  auto prompt = vision.expand_prompt(vision.with_placeholders(text, 1), std::span<const int64_t>(&*tokens, 1));
  if (!prompt.ok()) return fail(prompt.status().with_context(hlx::str_cat(fn, ": prompt")));
  hlx::engine::GenerationRequest req;
  if (hlx_status_t s = build_request(model, params, req)) return s;
  auto enc = model->tokenizer->encode(*prompt, /*add_special_tokens=*/true);
  if (!enc.ok()) return fail(enc.status().with_context(hlx::str_cat(fn, ": prompt")));
  req.images.push_back(std::move(image));
  return submit(model, std::vector<int64_t>(enc->begin(), enc->end()), std::move(req), out_id);
}

hlx_status_t hlx_submit_image_bytes(hlx_model_t* model, const char* text, const uint8_t* bytes, size_t byte_count,
                                    const hlx_generation_params_t* params, hlx_request_id_t* out_id) {
  t_last_admission = {0, 0, 0};
  return guarded("hlx_submit_image_bytes", [&]() -> hlx_status_t {
    if (hlx_status_t s = image_common("hlx_submit_image_bytes", model, text, params, out_id)) return s;
    if (!bytes) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_submit_image_bytes: bytes is NULL");
    if (byte_count == 0) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_submit_image_bytes: byte_count is 0");
    if (!model->vision)  // before decoding: the image cannot be used anyway
      return fail(hlx::engine::text_only_model_error("hlx_submit_image_bytes", model->dir));
    auto image = hlx::mm::decode_image(std::string_view(reinterpret_cast<const char*>(bytes), byte_count), {},
                                       "hlx_submit_image_bytes");
    if (!image.ok()) return fail(image.status());
    return submit_image("hlx_submit_image_bytes", model, text, std::move(*image), params, out_id);
  });
}

hlx_status_t hlx_submit_image_pixels(hlx_model_t* model, const char* text, const uint8_t* pixels, int64_t width,
                                     int64_t height, int64_t channels, const hlx_generation_params_t* params,
                                     hlx_request_id_t* out_id) {
  t_last_admission = {0, 0, 0};
  return guarded("hlx_submit_image_pixels", [&]() -> hlx_status_t {
    if (hlx_status_t s = image_common("hlx_submit_image_pixels", model, text, params, out_id)) return s;
    if (!pixels) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_submit_image_pixels: pixels is NULL");
    constexpr int64_t kMaxSide = 1 << 15;
    if (width < 1 || width > kMaxSide || height < 1 || height > kMaxSide)
      return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_submit_image_pixels: ", width, "x", height, " is outside [1, ",
                  kMaxSide, "] per side");
    if (channels != 3)
      return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_submit_image_pixels: channels ", channels, " (expected 3, RGB)");
    if (!model->vision) return fail(hlx::engine::text_only_model_error("hlx_submit_image_pixels", model->dir));
    if (width * height > hlx::mm::DecodeOptions{}.max_pixels)
      return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_submit_image_pixels: ", width, "x", height, " = ", width * height,
                  " pixels is above the limit of ", hlx::mm::DecodeOptions{}.max_pixels);
    hlx::mm::Image image;
    image.width = width;
    image.height = height;
    image.pixels.assign(pixels, pixels + size_t(width * height * 3));
    return submit_image("hlx_submit_image_pixels", model, text, std::move(image), params, out_id);
  });
}

hlx_status_t hlx_cancel(hlx_model_t* model, hlx_request_id_t id) {
  return guarded("hlx_cancel", [&]() -> hlx_status_t {
    if (!model) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_cancel: model is NULL");
    if (id == 0) return fail(HLX_STATUS_NOT_FOUND, "hlx_cancel: request id 0 is never assigned");
    // A second cancel of the same id is NOT_FOUND even before the first one is applied. The lock is
    // not held across engine->cancel(), which may run event callbacks that call hlx_cancel.
    {
      std::lock_guard<std::mutex> lock(model->ids_mu);
      if (!model->cancelled.insert(id).second)
        return fail(HLX_STATUS_NOT_FOUND, "hlx_cancel: request ", id, " was already cancelled");
    }
    Status s = model->engine->cancel(id);
    if (!s.ok()) {
      std::lock_guard<std::mutex> lock(model->ids_mu);
      model->cancelled.erase(id);
      return fail(s.with_context("hlx_cancel"));
    }
    return ok();
  });
}

hlx_status_t hlx_step(hlx_model_t* model, int32_t* out_idle) {
  if (out_idle) *out_idle = 0;
  return guarded("hlx_step", [&]() -> hlx_status_t {
    if (!model) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_step: model is NULL");
    if (hlx_status_t s = check_driver(model, "hlx_step")) return s;
    model->in_step = true;
    Status st;
    try {
      st = model->engine->step();
    } catch (...) {
      model->in_step = false;
      throw;
    }
    model->in_step = false;
    if (!st.ok()) return fail(st.with_context("hlx_step"));
    if (out_idle) *out_idle = model->engine->idle() ? 1 : 0;
    return ok();
  });
}

hlx_status_t hlx_run_until_idle(hlx_model_t* model) {
  return guarded("hlx_run_until_idle", [&]() -> hlx_status_t {
    if (!model) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_run_until_idle: model is NULL");
    if (hlx_status_t s = check_driver(model, "hlx_run_until_idle")) return s;
    model->in_step = true;
    Status st;
    try {
      st = model->engine->run_until_idle();
    } catch (...) {
      model->in_step = false;
      throw;
    }
    model->in_step = false;
    if (!st.ok()) return fail(st.with_context("hlx_run_until_idle"));
    return ok();
  });
}

hlx_status_t hlx_poll(hlx_model_t* model, hlx_event_t* events, size_t capacity, size_t* out_count) {
  return guarded("hlx_poll", [&]() -> hlx_status_t {
    if (!out_count) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_poll: out_count is NULL");
    *out_count = 0;
    if (!model) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_poll: model is NULL");
    if (!events && capacity > 0)
      return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_poll: events is NULL but capacity is ", capacity);
    std::lock_guard<std::mutex> lock(model->poll_mu);
    std::vector<hlx::engine::Event> fresh = model->engine->events();
    for (auto& e : fresh) model->pending.push_back(std::move(e));
    const size_t n = std::min(capacity, model->pending.size());
    std::vector<hlx::engine::Event> out;
    out.reserve(n);
    for (size_t i = 0; i < n; ++i) out.push_back(std::move(model->pending[i]));
    model->pending.erase(model->pending.begin(), model->pending.begin() + std::ptrdiff_t(n));
    model->handed_out = std::move(out);  // previous texts become invalid only now (documented)
    for (size_t i = 0; i < n; ++i) event_to_c(model->handed_out[i], &events[i]);
    *out_count = n;
    return ok();
  });
}

hlx_status_t hlx_result(hlx_model_t* model, hlx_request_id_t id, hlx_result_t** out_result) {
  return guarded("hlx_result", [&]() -> hlx_status_t {
    if (!out_result) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_result: out_result is NULL");
    *out_result = nullptr;
    if (!model) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_result: model is NULL");
    if (hlx_status_t s = check_driver(model, "hlx_result")) return s;
    {
      std::lock_guard<std::mutex> lock(model->ids_mu);
      if (!model->untaken.count(id))
        return fail(HLX_STATUS_NOT_FOUND, "hlx_result: request ", id, " is unknown or its result was already taken");
    }
    std::optional<hlx::engine::Completion> c;
    if (auto it = model->stash.find(id); it != model->stash.end()) {
      c = std::move(it->second);
      model->stash.erase(it);
    } else {
      c = model->engine->take_completion(id);
    }
    if (!c) return fail(HLX_STATUS_UNAVAILABLE, "hlx_result: request ", id, " is still queued or running");
    const std::string err = c->error.ok() ? std::string() : c->error.message();
    int64_t lp_k = 0;
    {
      std::lock_guard<std::mutex> lock(model->ids_mu);
      if (auto it = model->logprobs_k.find(id); it != model->logprobs_k.end()) lp_k = it->second;
    }
    const size_t lp_n = lp_k > 0 ? c->logprobs.size() : 0;
    // One allocation: the struct, its private tail (ResultExtra), the token array, the text, the
    // error message and the logprobs (8-aligned).
    const size_t head = kResultExtraOffset + sizeof(ResultExtra);
    const size_t tok_bytes = c->tokens.size() * sizeof(int64_t);
    const size_t lp_offset = (head + tok_bytes + c->text.size() + 1 + err.size() + 1 + 7) & ~size_t(7);
    const size_t lp_bytes = lp_n * (sizeof(double) + sizeof(int64_t)) * (1 + size_t(lp_k));
    const size_t total = lp_offset + lp_bytes;
    char* block = static_cast<char*>(std::malloc(total));
    if (!block) {
      model->stash.emplace(id, std::move(*c));  // the caller may retry
      return fail(HLX_STATUS_OUT_OF_MEMORY, "hlx_result: allocating ", total, " bytes failed");
    }
    auto* r = reinterpret_cast<hlx_result_t*>(block);
    int64_t* toks = reinterpret_cast<int64_t*>(block + head);
    if (tok_bytes) std::memcpy(toks, c->tokens.data(), tok_bytes);
    char* text = block + head + tok_bytes;
    if (!c->text.empty()) std::memcpy(text, c->text.data(), c->text.size());
    text[c->text.size()] = '\0';
    char* msg = text + c->text.size() + 1;
    if (!err.empty()) std::memcpy(msg, err.data(), err.size());
    msg[err.size()] = '\0';
    r->id = c->id;
    r->finish = finish_to_c(c->finish);
    r->error_status = to_c(c->error.kind());
    r->error_message = msg;
    r->prompt_tokens = c->prompt_tokens;
    r->tokens = toks;
    r->token_count = c->tokens.size();
    r->text = text;
    r->text_len = c->text.size();
    if (lp_n) {
      double* lp = reinterpret_cast<double*>(block + lp_offset);
      int64_t* top_n = reinterpret_cast<int64_t*>(lp + lp_n);
      int64_t* top_id = top_n + lp_n;
      double* top_lp = reinterpret_cast<double*>(top_id + lp_n * size_t(lp_k));
      for (size_t i = 0; i < lp_n; ++i) {
        const hlx::engine::TokenLogprobs& t = c->logprobs[i];
        lp[i] = t.logprob;
        const size_t nt = std::min(t.top.size(), size_t(lp_k));
        top_n[i] = int64_t(nt);
        for (size_t k = 0; k < nt; ++k) {
          top_id[i * size_t(lp_k) + k] = t.top[k].first;
          top_lp[i * size_t(lp_k) + k] = t.top[k].second;
        }
      }
    }
    const ResultExtra extra{kResultMagic, c->cached_tokens, c->cached_images, lp_k, int64_t(lp_n), lp_offset};
    std::memcpy(block + kResultExtraOffset, &extra, sizeof extra);
    {
      std::lock_guard<std::mutex> lock(model->ids_mu);
      model->untaken.erase(id);
      model->cancelled.erase(id);
      model->logprobs_k.erase(id);
    }
    *out_result = r;
    return ok();
  });
}

void hlx_result_free(hlx_result_t* result) {
  if (result) std::memset(reinterpret_cast<char*>(result) + kResultExtraOffset, 0, sizeof(ResultExtra));
  std::free(result);
}

// The private tail of a result from hlx_result(), or an error naming `fn`.
static hlx_status_t result_extra(const char* fn, const hlx_result_t* result, const void* out, ResultExtra& extra) {
  if (!out) return fail(HLX_STATUS_INVALID_ARGUMENT, fn, ": the output pointer is NULL");
  if (!result) return fail(HLX_STATUS_INVALID_ARGUMENT, fn, ": result is NULL");
  std::memcpy(&extra, reinterpret_cast<const char*>(result) + kResultExtraOffset, sizeof extra);
  if (extra.magic != kResultMagic)
    return fail(HLX_STATUS_INVALID_ARGUMENT, fn, ": result was not returned by hlx_result() (or was freed)");
  return ok();
}

hlx_status_t hlx_result_cached_tokens(const hlx_result_t* result, int64_t* out_cached_tokens) {
  if (out_cached_tokens) *out_cached_tokens = 0;
  ResultExtra extra;
  if (hlx_status_t s = result_extra("hlx_result_cached_tokens", result, out_cached_tokens, extra)) return s;
  *out_cached_tokens = extra.cached_tokens;
  return HLX_STATUS_OK;
}

hlx_status_t hlx_result_cached_images(const hlx_result_t* result, int64_t* out_cached_images) {
  if (out_cached_images) *out_cached_images = 0;
  ResultExtra extra;
  if (hlx_status_t s = result_extra("hlx_result_cached_images", result, out_cached_images, extra)) return s;
  *out_cached_images = extra.cached_images;
  return HLX_STATUS_OK;
}

// The logprobs of token `index` of a result: its entries' pointers, or an error naming `fn`.
struct TokenLogprobsView {
  double logprob;
  size_t top_count;
  const int64_t* top_id;
  const double* top_logprob;
};
static hlx_status_t result_logprobs(const char* fn, const hlx_result_t* result, size_t index, const void* out,
                                    TokenLogprobsView& view) {
  ResultExtra extra;
  if (hlx_status_t s = result_extra(fn, result, out, extra)) return s;
  if (extra.logprobs_k == 0)
    return fail(HLX_STATUS_INVALID_ARGUMENT, fn, ": request ", result->id,
                " was submitted without logprobs (hlx_generation_params_t.logprobs = 0)");
  if (index >= uint64_t(extra.logprobs_count))
    return fail(HLX_STATUS_OUT_OF_RANGE, fn, ": index ", index, " is outside the ", extra.logprobs_count,
                " generated tokens of request ", result->id);
  const size_t n = size_t(extra.logprobs_count), k = size_t(extra.logprobs_k);
  const char* base = reinterpret_cast<const char*>(result) + extra.logprobs_offset;
  const double* lp = reinterpret_cast<const double*>(base);
  const int64_t* top_n = reinterpret_cast<const int64_t*>(lp + n);
  const int64_t* top_id = top_n + n;
  const double* top_lp = reinterpret_cast<const double*>(top_id + n * k);
  view = {lp[index], size_t(top_n[index]), top_id + index * k, top_lp + index * k};
  return ok();
}

hlx_status_t hlx_result_token_logprob(const hlx_result_t* result, size_t index, double* out_logprob) {
  if (out_logprob) *out_logprob = 0;
  return guarded("hlx_result_token_logprob", [&]() -> hlx_status_t {
    TokenLogprobsView v;
    if (hlx_status_t s = result_logprobs("hlx_result_token_logprob", result, index, out_logprob, v)) return s;
    *out_logprob = v.logprob;
    return ok();
  });
}

hlx_status_t hlx_result_top_logprobs(const hlx_result_t* result, size_t index, size_t k, int64_t* ids, double* logprobs,
                                     size_t* out_count) {
  if (out_count) *out_count = 0;
  return guarded("hlx_result_top_logprobs", [&]() -> hlx_status_t {
    if (k > 0 && (!ids || !logprobs))
      return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_result_top_logprobs: ", ids ? "logprobs" : "ids",
                  " is NULL but k is ", k);
    TokenLogprobsView v;
    if (hlx_status_t s = result_logprobs("hlx_result_top_logprobs", result, index, out_count, v)) return s;
    const size_t n = std::min(k, v.top_count);
    for (size_t i = 0; i < n; ++i) {
      ids[i] = v.top_id[i];
      logprobs[i] = v.top_logprob[i];
    }
    *out_count = n;
    return ok();
  });
}

hlx_status_t hlx_tokenize(const hlx_model_t* model, const char* text, size_t text_len, int32_t add_special_tokens,
                          int64_t* ids, size_t capacity, size_t* out_count) {
  return guarded("hlx_tokenize", [&]() -> hlx_status_t {
    if (!out_count) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_tokenize: out_count is NULL");
    *out_count = 0;
    if (!model) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_tokenize: model is NULL");
    if (!text && text_len > 0)
      return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_tokenize: text is NULL but text_len is ", text_len);
    if (!ids && capacity > 0)
      return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_tokenize: ids is NULL but capacity is ", capacity);
    if (add_special_tokens != 0 && add_special_tokens != 1)
      return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_tokenize: add_special_tokens ", add_special_tokens,
                  " must be 0 or 1");
    if (!model->tokenizer)
      return fail(HLX_STATUS_NOT_FOUND, "hlx_tokenize: the model at '", model->dir, "' has no tokenizer");
    auto enc = model->tokenizer->encode(std::string_view(text ? text : "", text_len), add_special_tokens != 0);
    if (!enc.ok()) return fail(enc.status().with_context("hlx_tokenize"));
    if (enc->size() > capacity) {
      const size_t need = enc->size();
      hlx_status_t s =
          fail(HLX_STATUS_OUT_OF_RANGE, "hlx_tokenize: the text needs ", need, " ids but capacity is ", capacity);
      *out_count = need;
      return s;
    }
    for (size_t i = 0; i < enc->size(); ++i) ids[i] = int64_t((*enc)[i]);
    *out_count = enc->size();
    return ok();
  });
}

hlx_status_t hlx_detokenize(const hlx_model_t* model, const int64_t* ids, size_t count, int32_t skip_special_tokens,
                            char** out_text, size_t* out_len) {
  if (out_len) *out_len = 0;
  return guarded("hlx_detokenize", [&]() -> hlx_status_t {
    if (!out_text) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_detokenize: out_text is NULL");
    *out_text = nullptr;
    if (!model) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_detokenize: model is NULL");
    if (!ids && count > 0) return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_detokenize: ids is NULL but count is ", count);
    if (skip_special_tokens != 0 && skip_special_tokens != 1)
      return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_detokenize: skip_special_tokens ", skip_special_tokens,
                  " must be 0 or 1");
    if (!model->tokenizer)
      return fail(HLX_STATUS_NOT_FOUND, "hlx_detokenize: the model at '", model->dir, "' has no tokenizer");
    const size_t vocab = model->tokenizer->vocab_size();
    if (count > (size_t(1) << 28))
      return fail(HLX_STATUS_INVALID_ARGUMENT, "hlx_detokenize: count ", count, " is larger than 2^28");
    std::vector<uint32_t> v(count);
    for (size_t i = 0; i < count; ++i) {
      if (ids[i] < 0 || uint64_t(ids[i]) >= vocab)
        return fail(HLX_STATUS_OUT_OF_RANGE, "hlx_detokenize: ids[", i, "] = ", ids[i], " is outside [0, ", vocab, ")");
      v[i] = uint32_t(ids[i]);
    }
    auto dec = model->tokenizer->decode(v, skip_special_tokens != 0);
    if (!dec.ok()) return fail(dec.status().with_context("hlx_detokenize"));
    char* s = static_cast<char*>(std::malloc(dec->size() + 1));
    if (!s) return fail(HLX_STATUS_OUT_OF_MEMORY, "hlx_detokenize: allocating ", dec->size() + 1, " bytes failed");
    if (!dec->empty()) std::memcpy(s, dec->data(), dec->size());
    s[dec->size()] = '\0';
    *out_text = s;
    if (out_len) *out_len = dec->size();
    return ok();
  });
}

void hlx_string_free(char* text) { std::free(text); }

}  // extern "C"
