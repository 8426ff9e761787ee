/* hlx C API: load a text model, submit generation requests, stream and collect their tokens.
 *
 * Pure C11. Every function returns an hlx_status_t (HLX_STATUS_OK == 0) except the few accessors
 * documented otherwise; nothing aborts the process on bad input and no C++ exception crosses this
 * boundary. Every pointer, length, count and option range is validated, in release builds too.
 *
 * Errors: after a call returns a non-OK status, hlx_last_error_message() gives a message naming the
 * offending values. It is thread-local and describes the most recent hlx call made on the calling
 * thread (an empty string after a call that succeeded).
 *
 * Output parameters: on failure every `out_*` pointer argument is left NULL / zero, and no partial
 * state is kept (IREE's create(..., out) convention).
 *
 * Ownership: the caller owns a model from hlx_model_load() (one reference) and hands it back with
 * hlx_model_release(). hlx_model_retain() adds a reference; the model is destroyed when the last one
 * is released. Strings and results the library allocates for the caller are freed with
 * hlx_string_free() / hlx_result_free(). Pointers inside hlx_event_t are borrowed (see there).
 *
 * Threads: a model is owned by the thread that called hlx_model_load() (its "owner thread").
 * hlx_step(), hlx_run_until_idle() and hlx_result() must be called on the owner thread and are
 * rejected with HLX_STATUS_INVALID_ARGUMENT elsewhere. Functions marked "any thread" may be called
 * concurrently from any number of threads while the owner steps the model. hlx_model_release() of
 * the last reference must not race with any other call on that model.
 *
 * Images: a vision-language checkpoint (config.json model_type "llava") is loaded with its vision
 * tower; hlx_submit_image_bytes() / hlx_submit_image_pixels() submit one image with a text prompt.
 */
#ifndef HLX_HLX_H_
#define HLX_HLX_H_

#include <stddef.h>
#include <stdint.h>

/* ---- version ------------------------------------------------------------------------------ */

/* Release of this header. A minor release only adds (functions, enum values, fields at the end of
 * a struct_size-versioned struct); see docs/C_API.md for what may change when. */
#define HLX_VERSION_MAJOR 0
#define HLX_VERSION_MINOR 1
#define HLX_VERSION_PATCH 0
/* Binary interface generation: the shared library's SONAME is libhlx.so.<HLX_ABI_VERSION>. It
 * changes only when a function, struct layout or enum value of an earlier release changes. */
#define HLX_ABI_VERSION 1

/* libhlx.so exports exactly the functions declared here; everything else in it is hidden. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The version of the library actually linked, "MAJOR.MINOR.PATCH" (compare with the HLX_VERSION_*
 * macros of the header compiled against). Static string, never NULL. Any thread. */
const char* hlx_version(void);

/* The HLX_ABI_VERSION of the library actually linked. Any thread. */
int hlx_abi_version(void);

/* ---- status ------------------------------------------------------------------------------- */

/* Mirrors hlx::ErrorKind (values 0..9), plus codes that only the C boundary produces. */
typedef enum hlx_status_e {
  HLX_STATUS_OK = 0,
  HLX_STATUS_INVALID_ARGUMENT = 1,  /* null pointer, bad count, option out of range, misuse */
  HLX_STATUS_PARSE = 2,             /* malformed file contents (JSON, MLIR) */
  HLX_STATUS_VERIFY = 3,            /* IR breaks a StableHLO rule */
  HLX_STATUS_UNSUPPORTED = 4,       /* valid input hlx does not implement (e.g. an image format) */
  HLX_STATUS_IO = 5,                /* file system failure, truncated or corrupt file */
  HLX_STATUS_OUT_OF_RANGE = 6,      /* index / token id / buffer size outside its range */
  HLX_STATUS_CAPACITY_EXCEEDED = 7, /* prompt + max_new_tokens > context capacity */
  HLX_STATUS_NOT_FOUND = 8,         /* unknown request id, missing file or tokenizer */
  HLX_STATUS_INTERNAL = 9,          /* a bug in hlx */
  HLX_STATUS_OUT_OF_MEMORY = 10,    /* an allocation failed; nothing was changed */
  HLX_STATUS_UNAVAILABLE = 11       /* not ready yet (e.g. hlx_result of a running request) */
} hlx_status_t;

/* "ok", "invalid_argument", ..., "unavailable"; "unknown" for any other value (an int, so that any
 * value a caller holds is valid to pass). Any thread. Never NULL; the string is static. */
const char* hlx_status_name(int status);

/* The message of the most recent hlx call on the calling thread ("" after a success). Never NULL.
 * Owned by the library; valid until the next hlx call on this thread. Any thread. */
const char* hlx_last_error_message(void);

/* The three numbers of the capacity check of the most recent hlx_submit_* call on this thread
 * (filled whether it was admitted or not; zero when that call failed before admission). */
typedef struct hlx_admission_s {
  int64_t prompt_tokens; /* effective prompt length */
  int64_t max_new_tokens;
  int64_t context_capacity;
} hlx_admission_t;
/* Any thread. HLX_STATUS_INVALID_ARGUMENT for a NULL `out`. */
hlx_status_t hlx_last_admission(hlx_admission_t* out);

/* ---- model -------------------------------------------------------------------------------- */

typedef struct hlx_model_s hlx_model_t; /* opaque */

typedef enum hlx_kv_dtype_e {
  HLX_KV_DTYPE_BF16 = 0,
  HLX_KV_DTYPE_F32 = 1,
  HLX_KV_DTYPE_AUTO = 2, /* default: f32 for an f32 checkpoint, else bf16 */
  HLX_KV_DTYPE_INT8 = 3  /* int8 codes with per-token, per-kv-head f32 scales (the CLI's
                            --kv-dtype int8; format and error in docs/COMPOSITES.md). A value added
                            after version 4 shipped: an older library refuses it (invalid argument) */
} hlx_kv_dtype_t;

/* Value of hlx_model_options_t.context_capacity meaning "the model's default" (4096 tokens or
 * max_position_embeddings when that is smaller). */
#define HLX_CONTEXT_CAPACITY_DEFAULT (-1)
#define HLX_MAX_CONTEXT_CAPACITY ((int64_t)1 << 24)
#define HLX_MAX_SLOTS 256
#define HLX_MAX_THREADS 1024

#define HLX_MAX_IMAGE_CACHE_MIB (1 << 20)

/* How matmul weights are stored in memory (hlx_model_options_t.weights, since version 3). */
typedef enum hlx_weights_e {
  HLX_WEIGHTS_AS_STORED = 0, /* default: the checkpoint's dtype; AWQ/GPTQ 4-bit, FP8 as int8 */
  HLX_WEIGHTS_INT8 = 1,      /* quantized at load per output channel (the CLI's --weights int8) */
  HLX_WEIGHTS_INT4 = 2       /* quantized at load in groups of 128 (the CLI's --weights int4) */
} hlx_weights_t;

/* Growth (docs/C_API.md, "Versions and ABI promises"): fields are only ever appended, and
 * struct_size says how many bytes of this struct the caller has. The library accepts the size of
 * every release of this struct (40 bytes in version 1, 48 in version 2, 56 since version 3, on
 * LP64) and gives the
 * fields past the caller's size their defaults; any other size is HLX_STATUS_INVALID_ARGUMENT.
 * Initialise with hlx_model_options_init(&o), which passes sizeof(hlx_model_options_t). */
typedef struct hlx_model_options_s {
  size_t struct_size;
  int64_t context_capacity;    /* HLX_CONTEXT_CAPACITY_DEFAULT or [1, HLX_MAX_CONTEXT_CAPACITY] */
  int64_t slots;               /* KV slots = concurrent requests, [1, HLX_MAX_SLOTS]; default 1 */
  int32_t threads;             /* runtime threads, 0 = all cores, [0, HLX_MAX_THREADS]; default 0 */
  int32_t kv_dtype;            /* an hlx_kv_dtype_t; default HLX_KV_DTYPE_AUTO */
  int32_t load_tokenizer;      /* 1 (default): load DIR/tokenizer.json when present; 0: never */
  int32_t skip_special_tokens; /* 1 (default): special tokens are left out of generated text */
  /* ---- version 2 ---- */
  /* 1 (default): prefix reuse: a text prompt reuses the cached rows of an earlier prompt with the
   * same leading tokens instead of prefilling them (same output bits); 0: every prompt is
   * prefilled in full. See hlx_result_cached_tokens(). */
  int32_t prefix_cache;
  /* Image-feature cache for vision-language models, in MiB: recent images' encoded features are
   * reused instead of re-encoded. [0, HLX_MAX_IMAGE_CACHE_MIB]; default 256; 0 disables it. */
  int32_t image_cache_mib;
  /* ---- version 3 ---- */
  int32_t weights; /* an hlx_weights_t; default HLX_WEIGHTS_AS_STORED */
} hlx_model_options_t;

/* Fills the first `struct_size` bytes of *options with defaults and sets options->struct_size.
 * `struct_size` must be a size this library accepts (see above), else
 * HLX_STATUS_INVALID_ARGUMENT and nothing is written. Any thread. HLX_STATUS_INVALID_ARGUMENT for
 * NULL. */
hlx_status_t hlx_model_options_init_sized(hlx_model_options_t* options, size_t struct_size);

/* hlx_model_options_init(&o): defaults for the struct this header declares. The macro passes its
 * size; the function of that name (for programs built before version 2) writes the version-1 size
 * only, so that a newer library never writes past an older program's struct. */
hlx_status_t hlx_model_options_init(hlx_model_options_t* options);
#define hlx_model_options_init(options) hlx_model_options_init_sized((options), sizeof(hlx_model_options_t))

/* Loads the Hugging Face checkpoint directory `model_dir` (config.json + safetensors, and
 * tokenizer.json for text functions). `options` may be NULL (defaults). On success *out_model holds
 * one reference owned by the caller and the calling thread becomes the model's owner thread; on
 * failure *out_model is NULL. Any thread. */
hlx_status_t hlx_model_load(const char* model_dir, const hlx_model_options_t* options, hlx_model_t** out_model);

/* Adds a reference. NULL is a no-op. Any thread. */
void hlx_model_retain(hlx_model_t* model);
/* Drops a reference; the last one cancels whatever still runs and frees everything (results not
 * taken, events not polled). NULL is a no-op. The last release must not race other calls. */
void hlx_model_release(hlx_model_t* model);

/* Shape of a loaded model. Any thread. HLX_STATUS_INVALID_ARGUMENT for NULL arguments. */
typedef struct hlx_model_info_s {
  int64_t context_capacity;
  int64_t slots;
  int64_t vocab_size;
  int32_t has_tokenizer; /* 1 when text functions (submit_text, tokenize, stop strings) work */
} hlx_model_info_t;
hlx_status_t hlx_model_info(const hlx_model_t* model, hlx_model_info_t* out_info);

/* ---- requests ----------------------------------------------------------------------------- */

typedef uint64_t hlx_request_id_t; /* assigned by submit, starting at 1, never reused; 0 = none */

typedef enum hlx_finish_e {
  HLX_FINISH_NONE = 0,      /* still queued or running */
  HLX_FINISH_STOP = 1,      /* an EOS id or a stop string */
  HLX_FINISH_LENGTH = 2,    /* max_new_tokens generated */
  HLX_FINISH_CANCELLED = 3, /* hlx_cancel() before it finished */
  HLX_FINISH_ERROR = 4      /* a model call failed; the result's error says why */
} hlx_finish_t;

typedef enum hlx_event_kind_e {
  HLX_EVENT_TOKEN = 0,   /* one generated token and the text it decided (may be empty) */
  HLX_EVENT_FINISHED = 1 /* the last event of a request: remaining text and finish reason */
} hlx_event_kind_t;

/* One streamed event. `text` is UTF-8, NUL-terminated, `text_len` bytes long (empty without a
 * tokenizer); it and `error_message` are borrowed: valid inside the callback that receives the
 * event, or, for polled events, until the next hlx_poll() on the same model or its release. */
typedef struct hlx_event_s {
  hlx_request_id_t id;
  int32_t kind;   /* an hlx_event_kind_t */
  int32_t finish; /* an hlx_finish_t; HLX_EVENT_FINISHED only */
  int64_t token;  /* HLX_EVENT_TOKEN only, else -1 */
  const char* text;
  size_t text_len;
  int32_t error_status;      /* an hlx_status_t; non-OK only with HLX_FINISH_ERROR */
  const char* error_message; /* "" unless HLX_FINISH_ERROR */
} hlx_event_t;

/* Streaming callback. Runs on the owner thread inside hlx_step()/hlx_run_until_idle(). It may call
 * hlx_cancel() and the any-thread functions, but not hlx_step(), hlx_run_until_idle() or
 * hlx_result() (those are rejected with HLX_STATUS_INVALID_ARGUMENT). */
typedef void (*hlx_event_callback_t)(void* user_data, const hlx_event_t* event);

#define HLX_MAX_STOP_STRINGS 64

#define HLX_MAX_LOGIT_BIAS 1024

#define HLX_MAX_TOP_LOGPROBS 20
#define HLX_MAX_JSON_SCHEMA_BYTES ((size_t)1 << 20)

/* Grows as hlx_model_options_t (104 bytes in version 1, 128 in versions 2 and 3, 144 since version
 * 4, on LP64); fields past the caller's struct_size get their defaults. Ranges are checked at
 * submit. */
typedef struct hlx_generation_params_s {
  size_t struct_size;
  int64_t max_new_tokens;   /* >= 0; prompt + max_new_tokens <= capacity; default 16 */
  float temperature;        /* >= 0; 0 = greedy (default) */
  int64_t top_k;            /* >= 0; 0 = off (default) */
  float top_p;              /* (0, 1]; 1 = off (default) */
  float min_p;              /* [0, 1]; 0 = off (default) */
  float repetition_penalty; /* > 0; 1 = off (default) */
  float presence_penalty;   /* [-2, 2]; 0 = off (default) */
  float frequency_penalty;  /* [-2, 2]; 0 = off (default) */
  uint64_t seed;            /* default 0 */
  /* Stop strings (need a tokenizer): `stop_count` non-NULL, non-empty, NUL-terminated strings,
   * at most HLX_MAX_STOP_STRINGS. Copied at submit; `stop` may be NULL when stop_count is 0. */
  const char* const* stop;
  size_t stop_count;
  int32_t stop_at_eos; /* 1 (default): stop at the model's EOS ids; 0: never stop on a token */
  /* When set, every event of the request goes to on_event(user_data, ...) on the owner thread;
   * otherwise events are queued for hlx_poll(). */
  hlx_event_callback_t on_event;
  void* user_data;
  /* ---- version 2 ---- */
  /* logit_bias (OpenAI's): logit_bias_values[i] is added to the logit of token
   * logit_bias_ids[i] before sampling (after the penalties); +100 all but forces a token, -100
   * all but bans it. At most HLX_MAX_LOGIT_BIAS entries, ids distinct and in [0, vocab_size),
   * values finite in [-100, 100] (else HLX_STATUS_INVALID_ARGUMENT naming the entry). Copied at
   * submit; both arrays may be NULL when logit_bias_count is 0 (default). */
  const int64_t* logit_bias_ids;
  const float* logit_bias_values;
  size_t logit_bias_count;
  /* ---- version 4 ---- */
  /* Structured output (OpenAI's response_format json_schema; needs a tokenizer): NULL (default) =
   * unconstrained; else a NUL-terminated JSON-schema document (a JSON object, at most
   * HLX_MAX_JSON_SCHEMA_BYTES) in the subset of docs/SERVER.md ("Structured outputs"). Tokens are
   * sampled from the logits masked to what keeps the text valid against the schema (compact JSON,
   * properties in the schema's order); the request finishes with HLX_FINISH_STOP once the value is
   * closed, or HLX_FINISH_LENGTH (text incomplete) at max_new_tokens. Compiled at submit: malformed
   * JSON is HLX_STATUS_INVALID_ARGUMENT, a keyword outside the subset HLX_STATUS_UNSUPPORTED naming
   * it; "" or a document that is not an object is HLX_STATUS_INVALID_ARGUMENT. Copied at submit. */
  const char* json_schema;
  /* 1: the output is any JSON object (response_format json_object); 0 (default): off. Not together
   * with json_schema. */
  int32_t json_object;
  /* Log-probabilities: 0 (default) = off; K in [1, HLX_MAX_TOP_LOGPROBS]: each generated token's
   * log-probability and the K most likely ids, read with hlx_result_token_logprob() /
   * hlx_result_top_logprobs(). Values are the log-softmax (in double) of the logits after the
   * penalties, logit_bias and the JSON mask, before temperature / top_k / top_p / min_p: those of
   * `hlx generate --logprobs K`. */
  int32_t logprobs;
} hlx_generation_params_t;

/* Fills the first `struct_size` bytes of *params with defaults, as hlx_model_options_init_sized.
 * Any thread. */
hlx_status_t hlx_generation_params_init_sized(hlx_generation_params_t* params, size_t struct_size);

/* hlx_generation_params_init(&p): as hlx_model_options_init (the function writes version 1). */
hlx_status_t hlx_generation_params_init(hlx_generation_params_t* params);
#define hlx_generation_params_init(params) hlx_generation_params_init_sized((params), sizeof(hlx_generation_params_t))

/* Submits a prompt of `count` token ids (`params` NULL = defaults). Validates everything (ids in
 * the vocabulary, admission, sampling ranges, stop strings) before queueing; on failure nothing is
 * queued, *out_id is 0, and HLX_STATUS_CAPACITY_EXCEEDED names the prompt length, max_new_tokens
 * and capacity (also available from hlx_last_admission()). `ids` is copied. Any thread. The
 * request runs when the owner thread steps the model. */
hlx_status_t hlx_submit_tokens(hlx_model_t* model, const int64_t* ids, size_t count,
                               const hlx_generation_params_t* params, hlx_request_id_t* out_id);

/* The same for NUL-terminated UTF-8 text, tokenized with the model's tokenizer (special tokens of
 * the tokenizer's post-processor added, as `hlx generate -p`). HLX_STATUS_NOT_FOUND when the model
 * has no tokenizer. Any thread. */
hlx_status_t hlx_submit_text(hlx_model_t* model, const char* text, const hlx_generation_params_t* params,
                             hlx_request_id_t* out_id);

/* One image with a NUL-terminated UTF-8 prompt, for a vision-language model loaded with its
 * tokenizer. A prompt that does not contain the model's image token text (e.g. "<image>") gets it,
 * followed by a newline, in front; the prompt must then hold it exactly once (the engine expands it
 * to the image's token count, and admission uses that expanded length: see hlx_last_admission()).
 * `bytes`/`byte_count`: an encoded PNG or JPEG (decoded with EXIF orientation, alpha dropped).
 * `pixels`: width*height*channels bytes, row-major interleaved, channels 3 (RGB), copied.
 * Errors, before anything is queued: HLX_STATUS_INVALID_ARGUMENT (NULL / bad sizes, a text-only
 * model, a prompt with more image tokens than images), HLX_STATUS_NOT_FOUND (no tokenizer),
 * HLX_STATUS_UNSUPPORTED / HLX_STATUS_IO (not PNG/JPEG, corrupt data), HLX_STATUS_CAPACITY_EXCEEDED.
 * Any thread; the image is preprocessed on the calling thread. */
hlx_status_t hlx_submit_image_bytes(hlx_model_t* model, const char* text, const uint8_t* bytes, size_t byte_count,
                                    const hlx_generation_params_t* params, hlx_request_id_t* out_id);
hlx_status_t hlx_submit_image_pixels(hlx_model_t* model, const char* text, const uint8_t* pixels, int64_t width,
                                     int64_t height, int64_t channels, const hlx_generation_params_t* params,
                                     hlx_request_id_t* out_id);

/* Cancels a queued or running request: it finishes with HLX_FINISH_CANCELLED and its slot is freed
 * (at once on the owner thread outside a step, else at the end of the current/next step).
 * HLX_STATUS_NOT_FOUND for ids never submitted, already finished, or already cancelled.
 * Any thread, including from an event callback. */
hlx_status_t hlx_cancel(hlx_model_t* model, hlx_request_id_t id);

/* ---- driving the model (owner thread only) ------------------------------------------------ */

/* One scheduling step: admit queued requests, one prefill chunk, one batched decode; callbacks
 * run inside. *out_idle (may be NULL) is set to 1 when nothing is queued or running afterwards.
 * Owner thread only; not from a callback. */
hlx_status_t hlx_step(hlx_model_t* model, int32_t* out_idle);

/* hlx_step() until nothing is queued or running. Owner thread only; not from a callback. */
hlx_status_t hlx_run_until_idle(hlx_model_t* model);

/* Moves up to `capacity` queued events (requests without on_event), oldest first, into `events`
 * and sets *out_count. Events that did not fit stay queued for the next call. `events` may be NULL
 * only when capacity is 0. Texts are valid until the next hlx_poll() on this model. Any thread;
 * concurrent pollers are serialised. */
hlx_status_t hlx_poll(hlx_model_t* model, hlx_event_t* events, size_t capacity, size_t* out_count);

/* Everything a finished request produced. One allocation; free with hlx_result_free(). */
typedef struct hlx_result_s {
  hlx_request_id_t id;
  int32_t finish;            /* an hlx_finish_t */
  int32_t error_status;      /* an hlx_status_t; non-OK only with HLX_FINISH_ERROR */
  const char* error_message; /* "" unless HLX_FINISH_ERROR */
  int64_t prompt_tokens;
  const int64_t* tokens; /* generated ids, including a final EOS / stop-string token */
  size_t token_count;
  const char* text; /* decoded generated text without the stop string; NUL-terminated */
  size_t text_len;
} hlx_result_t;

/* Takes the result of a finished request (once: a second call gives HLX_STATUS_NOT_FOUND).
 * HLX_STATUS_UNAVAILABLE while it is still queued or running; HLX_STATUS_NOT_FOUND for unknown
 * ids. On success the caller owns *out_result. Owner thread only. */
hlx_status_t hlx_result(hlx_model_t* model, hlx_request_id_t id, hlx_result_t** out_result);
/* NULL is a no-op. Any thread. */
void hlx_result_free(hlx_result_t* result);

/* Since version 2. How many leading prompt tokens of a finished request were reused from the
 * prefix cache instead of prefilled (0 with hlx_model_options_t.prefix_cache = 0); the tokens are
 * the same either way. `result` must come from hlx_result() and not be freed yet. Any thread.
 * HLX_STATUS_INVALID_ARGUMENT for NULL arguments. */
hlx_status_t hlx_result_cached_tokens(const hlx_result_t* result, int64_t* out_cached_tokens);
/* Since version 2. How many of the request's images had their features taken from the
 * image-feature cache instead of encoded (0 with hlx_model_options_t.image_cache_mib = 0). As
 * hlx_result_cached_tokens otherwise. */
hlx_status_t hlx_result_cached_images(const hlx_result_t* result, int64_t* out_cached_images);

/* Since version 4. With hlx_generation_params_t.logprobs = K > 0: the log-probability of generated
 * token `index` (index < result->token_count) in *out_logprob (-INFINITY for a token the masked
 * row excluded). HLX_STATUS_INVALID_ARGUMENT for NULL arguments, a result not from hlx_result(), or
 * a request submitted without logprobs; HLX_STATUS_OUT_OF_RANGE for index >= token_count. Any
 * thread. */
hlx_status_t hlx_result_token_logprob(const hlx_result_t* result, size_t index, double* out_logprob);
/* Since version 4. The min(k, K) most likely ids at generated token `index` and their
 * log-probabilities, most likely first (ties: lower id first), into ids[0..] / logprobs[0..] (each
 * holding at least k entries; NULL only when k is 0); *out_count gets how many were written.
 * Errors as hlx_result_token_logprob(). Any thread. */
hlx_status_t hlx_result_top_logprobs(const hlx_result_t* result, size_t index, size_t k, int64_t* ids, double* logprobs,
                                     size_t* out_count);

/* ---- tokenizer helpers (any thread) -------------------------------------------------------- */

/* Encodes `text_len` bytes of UTF-8 `text` (need not be NUL-terminated; may be NULL only when
 * text_len is 0). Writes at most `capacity` ids to `ids` (NULL allowed when capacity is 0) and sets
 * *out_count to the number of ids the text needs; when that exceeds capacity nothing is written and
 * HLX_STATUS_OUT_OF_RANGE is returned (call again with a larger buffer). add_special_tokens: 0/1. */
hlx_status_t hlx_tokenize(const hlx_model_t* model, const char* text, size_t text_len, int32_t add_special_tokens,
                          int64_t* ids, size_t capacity, size_t* out_count);

/* Decodes `count` ids (`ids` may be NULL only when count is 0) into a NUL-terminated string the
 * caller frees with hlx_string_free(); *out_len (may be NULL) receives its length. Unknown ids give
 * HLX_STATUS_OUT_OF_RANGE. */
hlx_status_t hlx_detokenize(const hlx_model_t* model, const int64_t* ids, size_t count, int32_t skip_special_tokens,
                            char** out_text, size_t* out_len);

/* Frees a string returned by the library. NULL is a no-op. Any thread. */
void hlx_string_free(char* text);

#ifdef __cplusplus
} /* extern "C" */
#endif

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif /* HLX_HLX_H_ */
