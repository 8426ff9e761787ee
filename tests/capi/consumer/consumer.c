/* A program outside the hlx tree, built against an installed hlx (pkg-config or find_package).
 *
 *   consumer MODEL_DIR N --tokens 1,2,3              greedy from token ids
 *   consumer MODEL_DIR N --image FILE.png PROMPT     greedy from an image and a prompt
 *
 * Streams the generation through a callback and prints the generated ids comma-separated on one
 * line (as `hlx generate --tokens` does). Exits non-zero on any error, when the stream and the
 * final result disagree, or when the linked library is not the ABI this header describes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hlx/hlx.h>

enum { kMaxTokens = 256 };

typedef struct {
  int64_t tokens[kMaxTokens];
  size_t count;
  int finished;
} stream_t;

static void on_event(void* user, const hlx_event_t* e) {
  stream_t* s = (stream_t*)user;
  if (e->kind == HLX_EVENT_TOKEN && s->count < kMaxTokens) s->tokens[s->count++] = e->token;
  if (e->kind == HLX_EVENT_FINISHED) s->finished = 1;
}

static int fail(const char* what, hlx_status_t st) {
  fprintf(stderr, "consumer: %s: %s: %s\n", what, hlx_status_name(st), hlx_last_error_message());
  return 1;
}

static unsigned char* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char* buf = NULL;
  long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  if (n > 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n)) != NULL &&
      fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  *size = n > 0 ? (size_t)n : 0;
  return buf;
}

int main(int argc, char** argv) {
  if (argc < 5 || (strcmp(argv[3], "--tokens") != 0 && strcmp(argv[3], "--image") != 0) ||
      (strcmp(argv[3], "--image") == 0 && argc < 6)) {
    fprintf(stderr, "usage: %s MODEL_DIR N (--tokens IDS | --image FILE PROMPT)\n", argv[0]);
    return 2;
  }
  if (hlx_abi_version() != HLX_ABI_VERSION) {
    fprintf(stderr, "consumer: header ABI %d, library ABI %d (%s)\n", HLX_ABI_VERSION, hlx_abi_version(),
            hlx_version());
    return 1;
  }
  hlx_model_options_t opts;
  hlx_model_options_init(&opts);
  opts.context_capacity = 128;
  hlx_model_t* model = NULL;
  hlx_status_t st = hlx_model_load(argv[1], &opts, &model);
  if (st != HLX_STATUS_OK) return fail("load", st);

  stream_t stream = {{0}, 0, 0};
  hlx_generation_params_t gp;
  hlx_generation_params_init(&gp);
  gp.max_new_tokens = atoi(argv[2]);
  gp.on_event = on_event;
  gp.user_data = &stream;
  hlx_request_id_t id = 0;
  if (strcmp(argv[3], "--tokens") == 0) {
    int64_t ids[kMaxTokens];
    size_t n = 0;
    for (char* s = argv[4]; *s && n < kMaxTokens;) {
      char* end = NULL;
      ids[n++] = strtoll(s, &end, 10);
      if (end == s) return fail("bad --tokens", HLX_STATUS_INVALID_ARGUMENT);
      s = *end == ',' ? end + 1 : end;
    }
    st = hlx_submit_tokens(model, ids, n, &gp, &id);
  } else {
    size_t size = 0;
    unsigned char* bytes = read_file(argv[4], &size);
    if (!bytes) {
      fprintf(stderr, "consumer: cannot read %s\n", argv[4]);
      return 1;
    }
    st = hlx_submit_image_bytes(model, argv[5], bytes, size, &gp, &id);
    free(bytes);
  }
  if (st != HLX_STATUS_OK) return fail("submit", st);
  if ((st = hlx_run_until_idle(model)) != HLX_STATUS_OK) return fail("run", st);

  hlx_result_t* r = NULL;
  if ((st = hlx_result(model, id, &r)) != HLX_STATUS_OK) return fail("result", st);
  int ok = stream.finished && r->finish != HLX_FINISH_ERROR && r->token_count == stream.count &&
           memcmp(r->tokens, stream.tokens, stream.count * sizeof(int64_t)) == 0;
  for (size_t i = 0; i < r->token_count; ++i) printf("%s%lld", i ? "," : "", (long long)r->tokens[i]);
  printf("\n");
  if (!ok) fprintf(stderr, "consumer: the stream and the result differ (or the request failed)\n");
  hlx_result_free(r);
  hlx_model_release(model);
  return ok ? 0 : 1;
}
