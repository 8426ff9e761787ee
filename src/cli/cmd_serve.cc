// `hlx serve -m DIR [--host 127.0.0.1] [--port 8080] [--capacity C] [--slots B] [--threads T]
//               [--api-key K] [--allowed-image-dir D] [limits...]`
// An OpenAI-compatible HTTP server over one continuous-batching engine (server/server.h;
// docs/SERVER.md lists the endpoints, flags, limits and errors). Prints
// "hlx serve: listening on http://HOST:PORT" on stdout once it accepts connections. SIGINT/SIGTERM
// shut it down gracefully (exit 0); a second signal cancels in-flight requests at once.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "cli/command.h"
#include "cli/model_flags.h"
#include "cli/text_gen.h"
#include "engine/vision_model.h"
#include "io/hf_config.h"
#include "models/vision_spec.h"
#include "server/engine_worker.h"
#include "server/server.h"

namespace hlx::cli {
namespace {

struct ServeArgs {
  std::string model;
  ModelFlags flags;
  int64_t slots = 4;
  bool compile_all = false;
  server::ServerOptions opts;
  std::string allowed_image_dir;
  double read_timeout_s = 30, write_timeout_s = 30, request_timeout_s = 600, shutdown_grace_s = 10;
  double keep_alive_timeout_s = 5;
  bool quiet = false;
  int64_t image_cache_mib = 256;
};

std::string default_model_name(const std::string& dir) {
  std::filesystem::path p(dir);
  while (p.has_relative_path() && p.filename().empty()) p = p.parent_path();
  std::string name = p.filename().string();
  return name.empty() ? "hlx" : name;
}

Status check_range(const char* flag, double v, double lo, double hi) {
  if (!(v >= lo && v <= hi))
    return make_error(ErrorKind::kInvalidArgument, flag, " ", v, " is outside [", lo, ", ", hi, "]");
  return ok_status();
}

int to_ms(double s) { return int(s * 1000.0); }

Status run_serve(ServeArgs a) {
  server::ServerOptions& o = a.opts;
  HLX_RETURN_IF_ERROR(check_range("--port", o.port, 0, 65535));
  HLX_RETURN_IF_ERROR(check_range("--slots", double(a.slots), 1, 256));
  HLX_RETURN_IF_ERROR(check_range("--max-queue", double(o.max_queue), 0, 1e6));
  HLX_RETURN_IF_ERROR(check_range("--max-connections", o.max_connections, 1, 100000));
  HLX_RETURN_IF_ERROR(check_range("--max-connections-per-client", o.max_connections_per_client, 0, 100000));
  HLX_RETURN_IF_ERROR(check_range("--probe-connections", o.probe_connections, 0, 10000));
  HLX_RETURN_IF_ERROR(check_range("--max-prompt-bytes", double(o.max_prompt_bytes), 1, 1e10));
  HLX_RETURN_IF_ERROR(check_range("--max-body-bytes", double(o.http.max_body_bytes), 1024, 1e10));
  HLX_RETURN_IF_ERROR(check_range("--max-header-bytes", double(o.http.max_header_bytes), 256, 1 << 20));
  HLX_RETURN_IF_ERROR(check_range("--max-headers", o.http.max_headers, 4, 10000));
  HLX_RETURN_IF_ERROR(check_range("--max-image-bytes", double(o.images.max_bytes), 1, 1e10));
  HLX_RETURN_IF_ERROR(check_range("--max-image-pixels", double(o.images.max_pixels), 1, 1e10));
  HLX_RETURN_IF_ERROR(check_range("--max-request-image-pixels", double(o.images.max_request_pixels), 1, 1e11));
  HLX_RETURN_IF_ERROR(check_range("--max-images", double(o.max_images_per_request), 0, 1000));
  HLX_RETURN_IF_ERROR(check_range("--image-cache-mib", double(a.image_cache_mib), 0, 1 << 20));
  HLX_RETURN_IF_ERROR(check_range("--read-timeout", a.read_timeout_s, 0.01, 86400));
  HLX_RETURN_IF_ERROR(check_range("--write-timeout", a.write_timeout_s, 0.01, 86400));
  HLX_RETURN_IF_ERROR(check_range("--request-timeout", a.request_timeout_s, 0.01, 1e6));
  HLX_RETURN_IF_ERROR(check_range("--shutdown-grace", a.shutdown_grace_s, 0, 86400));
  HLX_RETURN_IF_ERROR(check_range("--keep-alive-timeout", a.keep_alive_timeout_s, 0, 86400));
  HLX_RETURN_IF_ERROR(check_range("--max-keep-alive-requests", o.max_requests_per_connection, 0, 1e9));
  o.keep_alive_timeout_ms = to_ms(a.keep_alive_timeout_s);
  o.http.read_timeout_ms = to_ms(a.read_timeout_s);
  o.http.write_timeout_ms = to_ms(a.write_timeout_s);
  o.request_timeout_ms = to_ms(a.request_timeout_s);
  o.shutdown_grace_ms = to_ms(a.shutdown_grace_s);
  o.log_requests = !a.quiet;
  if (o.model_name.empty()) o.model_name = default_model_name(a.model);
  if (o.api_key.empty())
    if (const char* env = std::getenv("HLX_API_KEY")) o.api_key = env;
  if (!a.allowed_image_dir.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(a.allowed_image_dir, ec))
      return make_error(ErrorKind::kInvalidArgument, "--allowed-image-dir '", a.allowed_image_dir,
                        "' is not a directory");
    char* real = realpath(a.allowed_image_dir.c_str(), nullptr);
    if (!real)
      return make_error(ErrorKind::kIo, "--allowed-image-dir '", a.allowed_image_dir, "': ", std::strerror(errno));
    o.images.allowed_dir = real;
    std::free(real);
  }

  // Signals are handled by sigwait() below: block them before any thread (runtime pools
  // included) starts, so every thread inherits the mask. Writes to gone clients must not kill us.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);

  HLX_ASSIGN_OR_RETURN(std::shared_ptr<const tok::Tokenizer> tokenizer, load_checkpoint_tokenizer(a.model));
  server::ModelInfo info;
  info.tokenizer = tokenizer;
  std::error_code ec;
  if (std::filesystem::exists(a.model + "/tokenizer_config.json", ec)) {
    auto tmpl = load_checkpoint_template(a.model);
    if (tmpl.ok())
      info.chat_template = std::move(*tmpl);
    else
      std::fprintf(stderr, "hlx serve: no chat template (%s); /v1/chat/completions is disabled\n",
                   tmpl.status().to_string().c_str());
  }
  HLX_ASSIGN_OR_RETURN(engine::TextModelOptions mo, a.flags.options());
  mo.slots = a.slots;
  mo.eager_compile = a.compile_all;
  HLX_ASSIGN_OR_RETURN(std::unique_ptr<engine::TextModel> model, load_model_with_progress(a.model, mo));
  info.context_capacity = model->shape().context_capacity;
  info.created = int64_t(std::time(nullptr));

  engine::BatchEngineOptions bo;
  bo.tokenizer = tokenizer;
  bo.max_images_per_request = o.max_images_per_request;
  bo.prefix_cache = a.flags.prefix_cache_on();
  bo.image_cache_bytes = size_t(a.image_cache_mib) << 20;
  // Vision-language checkpoints (llava, gemma3 with a tower, qwen3_vl): the vision tower takes
  // image parts; text-only models answer them with 400.
  std::unique_ptr<engine::VisionModel> vision;
  HLX_ASSIGN_OR_RETURN(bool vl, is_vision_language_dir(a.model));
  if (vl) {
    HLX_ASSIGN_OR_RETURN(vision, load_vision_with_progress(a.model, a.flags.threads, tokenizer));
    bo.vision = vision.get();
    info.vision = vision.get();
  }
  server::Metrics metrics;
  server::EngineWorker worker(*model, bo, metrics);
  server::Server srv(o, info, worker, metrics);
  HLX_RETURN_IF_ERROR(srv.listen());
  std::printf("hlx serve: listening on http://%s:%d (model '%s', capacity %lld, slots %lld%s)\n", o.host.c_str(),
              srv.port(), o.model_name.c_str(), (long long)info.context_capacity, (long long)a.slots,
              info.vision ? ", images" : "");
  std::fflush(stdout);

  std::atomic<bool> served{false};
  std::thread serve_thread([&] {
    srv.serve();
    served = true;
  });
  int sig = 0;
  sigwait(&sigs, &sig);
  std::fprintf(stderr, "hlx serve: %s: stopping (no new connections; in-flight requests get %.1f s)\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM", a.shutdown_grace_s);
  srv.request_stop();
  // A second signal cancels what is still running.
  timespec tick{0, 100'000'000};
  while (!served) {
    siginfo_t si;
    if (sigtimedwait(&sigs, &si, &tick) > 0) {
      std::fprintf(stderr, "hlx serve: second signal: cancelling in-flight requests\n");
      srv.cancel_all();
    }
  }
  serve_thread.join();
  worker.stop();
  std::fprintf(stderr, "hlx serve: stopped\n");
  return ok_status();
}

CommandRun setup_serve(CLI::App& root) {
  auto args = std::make_shared<ServeArgs>();
  server::ServerOptions& o = args->opts;
  CLI::App* sub = root.add_subcommand("serve", "OpenAI-compatible HTTP server (docs/SERVER.md)");
  sub->add_option("-m,--model", args->model, "checkpoint directory (config.json + safetensors + tokenizer files)")
      ->required();
  sub->add_option("--host", o.host, "address to listen on (default 127.0.0.1)");
  sub->add_option("--port", o.port, "TCP port (default 8080; 0 = any free port)");
  sub->add_option("--served-model-name", o.model_name, "model id in /v1/models and responses (default: DIR's name)");
  args->flags.add_to(sub);
  sub->add_option("--slots", args->slots, "KV slots = requests decoded together (default 4)");
  sub->add_flag("--compile-all", args->compile_all, "compile every prefill bucket and decode batch at load");
  sub->add_option("--api-key", o.api_key,
                  "require 'Authorization: Bearer KEY' on /v1/* (default: $HLX_API_KEY, else none)");
  sub->add_option("--allowed-image-dir", args->allowed_image_dir,
                  "directory whose files image_url may name (file:// or absolute path); default: none");
  sub->add_option("--max-queue", o.max_queue, "requests waiting for a slot before 429 (default 64)");
  sub->add_option("--max-connections", o.max_connections, "open connections before 503 (default 256)");
  sub->add_option("--max-connections-per-client", o.max_connections_per_client,
                  "open connections from one client address (default 64; 0 = no limit)");
  sub->add_option("--probe-connections", o.probe_connections,
                  "connections beyond the limits that may only ask for /health and /metrics (default 16)");
  sub->add_option("--max-prompt-bytes", o.max_prompt_bytes,
                  "prompt text bytes per request (default 8388608 = 8 MiB; also capped by capacity x bytes per token)");
  // Test-only fault injection (X-Hlx-Fault request header), not shown in --help.
  sub->add_flag("--test-fault-injection", o.fault_injection, "")->group("");
  sub->add_option("--max-body-bytes", o.http.max_body_bytes, "request body limit (default 33554432 = 32 MiB)");
  sub->add_option("--max-header-bytes", o.http.max_header_bytes, "request line + headers limit (default 16384)");
  sub->add_option("--max-headers", o.http.max_headers, "header lines limit (default 64)");
  sub->add_option("--max-image-bytes", o.images.max_bytes, "encoded image size limit (default 16777216 = 16 MiB)");
  sub->add_option("--max-image-pixels", o.images.max_pixels, "image width*height limit (default 16777216)");
  sub->add_option("--max-request-image-pixels", o.images.max_request_pixels,
                  "width*height summed over one request's images (default 16777216)");
  sub->add_option("--max-images", o.max_images_per_request, "images per request (default 8)");
  sub->add_option("--image-cache-mib", args->image_cache_mib,
                  "encoded features of recent images kept for reuse, MiB (default 256, 0 disables)");
  sub->add_option("--read-timeout", args->read_timeout_s,
                  "seconds for a request's headers and body to arrive (default 30)");
  sub->add_option("--write-timeout", args->write_timeout_s,
                  "seconds a write may wait on a client that stopped reading (default 30)");
  sub->add_option("--request-timeout", args->request_timeout_s,
                  "seconds from a request's arrival to its end (default 600)");
  sub->add_option("--shutdown-grace", args->shutdown_grace_s,
                  "seconds in-flight requests get on SIGINT/SIGTERM (default 10)");
  sub->add_option("--keep-alive-timeout", args->keep_alive_timeout_s,
                  "seconds a kept connection may wait for its next request (default 5; 0: close after each response)");
  sub->add_option("--max-keep-alive-requests", o.max_requests_per_connection,
                  "requests one connection may carry, then it closes (default 1000; 0: no cap)");
  sub->add_flag("--quiet", args->quiet, "no per-request log lines on stderr");
  return [args] { return report(run_serve(*args)); };
}
HLX_REGISTER_COMMAND(setup_serve);

}  // namespace
}  // namespace hlx::cli
