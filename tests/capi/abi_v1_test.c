/* A program built before the option structs grew, run against today's library: compiled against
 * the frozen version-1 header (hlx_v1.h, not include/hlx/hlx.h), it calls the exported
 * hlx_model_options_init / hlx_generation_params_init, which must write no byte past version 1's
 * structs (guard bytes here; the structs on the heap at their exact size for AddressSanitizer), and
 * loads and generates with the version-1 structs, whose missing fields get their defaults: the ids
 * must equal `hlx generate`'s. argv[1]: the hlx binary (writes the fixture and the reference).
 *
 * Built by tests/CMakeLists.txt (linked with the library's objects; instrumented in the sanitizer
 * tree) and by tests/capi/consumer_test.sh (with -fsanitize=address, against the installed
 * libhlx.so). Prints "N passed, N failed"; exits non-zero on any failure. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hlx_v1.h"

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

enum { kGuard = 64, kNew = 8, kCapacity = 64 };

static int untouched(const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != 0xA5) return 0;
  return 1;
}

/* `hlx generate --tokens` (greedy): the comma-separated ids it prints, or -1. */
static int cli_generate(const char* hlx, const char* dir, const char* prompt, int64_t* out, int cap) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s' generate -m '%s' --capacity %d --tokens %s -n %d 2>/dev/null", hlx, dir, kCapacity,
           prompt, kNew);
  FILE* p = popen(cmd, "r");
  if (!p) return -1;
  char line[4096] = {0};
  char* got = fgets(line, sizeof line, p);
  if (pclose(p) != 0 || !got) return -1;
  int n = 0;
  for (char* s = line; *s && *s != '\n' && n < cap;) {
    char* end = NULL;
    out[n++] = strtoll(s, &end, 10);
    if (end == s) return -1;
    s = *end == ',' ? end + 1 : end;
  }
  return n;
}

static void count_events(void* user, const hlx_event_t* e) {
  (void)e;
  ++*(int*)user;
}

/* Submits, runs and checks the ids against the reference. */
static void generate(hlx_model_t* m, const hlx_generation_params_t* p, const int64_t* want, int nwant) {
  const int64_t prompt[6] = {3, 14, 15, 92, 65, 35};
  hlx_request_id_t id = 0;
  hlx_result_t* r = NULL;
  CHECK(hlx_submit_tokens(m, prompt, 6, p, &id) == HLX_STATUS_OK);
  CHECK(hlx_run_until_idle(m) == HLX_STATUS_OK);
  CHECK(hlx_result(m, id, &r) == HLX_STATUS_OK);
  if (!r) return;
  int same = r->token_count == (size_t)nwant;
  for (int i = 0; same && i < nwant; ++i) same = r->tokens[i] == want[i];
  CHECK(same);
  hlx_result_free(r);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s PATH_OF_HLX_BINARY\n", argv[0]);
    return 2;
  }
  const char* hlx = argv[1];
  char dir[] = "/tmp/hlx_abi_v1_XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 2;
  }
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "'%s' fixture --family qwen3 --dtype f32 --out '%s' >/dev/null", hlx, dir);
  if (system(cmd) != 0) {
    fprintf(stderr, "could not create the fixture: %s\n", cmd);
    return 2;
  }
  int64_t want[kNew];
  const int nwant = cli_generate(hlx, dir, "3,14,15,92,65,35", want, kNew);
  CHECK(nwant > 0);

  /* _init writes exactly version 1's structs: guard bytes after them stay as they were. */
  union {
    hlx_model_options_t o;
    unsigned char bytes[sizeof(hlx_model_options_t) + kGuard];
  } go;
  union {
    hlx_generation_params_t p;
    unsigned char bytes[sizeof(hlx_generation_params_t) + kGuard];
  } gp;
  memset(&go, 0xA5, sizeof go);
  memset(&gp, 0xA5, sizeof gp);
  CHECK(hlx_model_options_init(&go.o) == HLX_STATUS_OK);
  CHECK(hlx_generation_params_init(&gp.p) == HLX_STATUS_OK);
  CHECK(untouched(go.bytes + sizeof(hlx_model_options_t), kGuard));
  CHECK(untouched(gp.bytes + sizeof(hlx_generation_params_t), kGuard));
  CHECK(go.o.struct_size == sizeof(hlx_model_options_t) && go.o.slots == 1 && go.o.skip_special_tokens == 1);
  CHECK(gp.p.struct_size == sizeof(hlx_generation_params_t) && gp.p.max_new_tokens == 16 && gp.p.top_p == 1.0f);

  /* The same on the heap, exactly sized: AddressSanitizer reports any write or read past them. */
  hlx_model_options_t* o = malloc(sizeof *o);
  hlx_generation_params_t* p = malloc(sizeof *p);
  if (!o || !p) return 2;
  CHECK(hlx_model_options_init(o) == HLX_STATUS_OK);
  CHECK(hlx_generation_params_init(p) == HLX_STATUS_OK);
  o->context_capacity = kCapacity;
  p->max_new_tokens = kNew;

  /* Load and generate with them (the library reads only struct_size bytes; later fields default). */
  hlx_model_t* m = NULL;
  CHECK(hlx_model_load(dir, o, &m) == HLX_STATUS_OK);
  if (m) {
    generate(m, p, want, nwant);
    int events = 0;
    p->on_event = count_events;
    p->user_data = &events;
    generate(m, p, want, nwant);
    CHECK(events == nwant + 1);
    hlx_model_release(m);
  }
  /* The guarded copies, through load and a NULL-params submit as well. */
  go.o.context_capacity = kCapacity;
  m = NULL;
  CHECK(hlx_model_load(dir, &go.o, &m) == HLX_STATUS_OK);
  if (m) {
    gp.p.max_new_tokens = kNew;
    generate(m, &gp.p, want, nwant);
    hlx_request_id_t id = 0;
    const int64_t one[1] = {3};
    CHECK(hlx_submit_tokens(m, one, 1, NULL, &id) == HLX_STATUS_OK);
    CHECK(hlx_run_until_idle(m) == HLX_STATUS_OK);
    hlx_result_t* r = NULL;
    CHECK(hlx_result(m, id, &r) == HLX_STATUS_OK);
    if (r) CHECK(r->token_count >= 1 && r->token_count <= 16);
    hlx_result_free(r);
    hlx_model_release(m);
  }
  CHECK(untouched(go.bytes + sizeof(hlx_model_options_t), kGuard));
  CHECK(untouched(gp.bytes + sizeof(hlx_generation_params_t), kGuard));
  free(o);
  free(p);

  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", dir);
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
