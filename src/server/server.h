// The OpenAI-compatible HTTP server: routes, authentication, admission to the engine, streaming,
// disconnect handling and graceful shutdown (docs/SERVER.md describes the API).
//
// Threads: serve() runs the accept loop on the calling thread and handles each connection on its
// own thread (at most max_connections at once; more are answered 503 at once). Connection threads
// parse, template, tokenize and decode images, then submit to the one EngineWorker and wait for
// their request's events together with their socket (a disconnect cancels the request).
// request_stop() may be called from any thread (e.g. the one that waits for SIGINT/SIGTERM).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "core/status.h"
#include "engine/vision_model.h"
#include "multimodal/image.h"
#include "server/engine_worker.h"
#include "server/http.h"
#include "server/image_input.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "tokenizer/template.h"
#include "tokenizer/tokenizer.h"

namespace hlx::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;         // 0: any free port (see Server::port())
  std::string model_name;  // reported by /v1/models and in every response
  std::string api_key;     // empty: no authentication
  HttpLimits http;
  ImageLimits images;
  int64_t max_images_per_request = 8;
  int64_t max_queue = 64;     // requests waiting for a slot beyond the slots themselves
  int max_connections = 256;  // open connections (each has a thread)
  // Connections from one client address (0 = no per-client limit; behind a reverse proxy every
  // client has the proxy's address).
  int max_connections_per_client = 64;
  // Beyond max_connections (or a client's share), this many more connections are accepted that
  // may only ask for /health or /metrics (anything else: 503), with a 1 s read timeout, so the
  // probes answer while ordinary connections are used up. When these are taken too, the oldest
  // one still waiting for its request is closed to make room.
  int probe_connections = 16;
  // When at least 3/4 of max_connections are open, connections that have not delivered their
  // whole request within this are closed (and new ones get this read timeout).
  int pressure_read_timeout_ms = 2'000;
  // Prompt text bytes per request (see PromptLimits): the smaller of this and capacity x the
  // tokenizer's max bytes per token.
  size_t max_prompt_bytes = 8u << 20;
  // Test-only: a request header `X-Hlx-Fault: throw` (or `bad_alloc`) makes the generation
  // handler throw, to test that no exception crosses a request boundary.
  bool fault_injection = false;
  int request_timeout_ms = 600'000;  // from a request's arrival to its last byte of output
  // Persistent connections: how long a kept connection may wait for its next request (0: close
  // after every response), and how many requests one connection may carry (0: no cap).
  int keep_alive_timeout_ms = 5'000;
  int max_requests_per_connection = 1000;
  int shutdown_grace_ms = 10'000;  // in-flight requests may finish within this on shutdown
  bool log_requests = true;        // one line per request on stderr
};

// What the HTTP threads need to know about the loaded model (immutable while serving).
struct ModelInfo {
  std::shared_ptr<const tok::Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;  // nullopt: /v1/chat/completions answers 400
  int64_t context_capacity = 0;
  // Accepts image parts when set (not owned; outlives the server). The HTTP threads call only its
  // pure functions (image_tokens, expand_prompt); the engine encodes.
  const engine::VisionModel* vision = nullptr;
  int64_t created = 0;  // unix time the model was loaded
};

class Server {
 public:
  Server(ServerOptions options, ModelInfo model, EngineWorker& worker, Metrics& metrics);
  ~Server();

  // Binds and listens; kIo naming the address on failure.
  Status listen();
  int port() const { return port_; }

  // Accepts connections until request_stop(), then shuts down gracefully: stops accepting,
  // lets in-flight requests finish for up to shutdown_grace_ms, cancels the rest, and returns
  // once every connection thread has ended.
  void serve();
  void request_stop();
  // Cancels every generation in flight (their clients get 503 / an error event). Thread-safe.
  void cancel_all();

 private:
  struct Conn {
    std::thread thread;
    std::atomic<bool> done{false};
    int fd = -1;
    std::string client;    // peer address, for the per-client count
    bool probe = false;    // accepted in the probe headroom: /health and /metrics only
    bool evicted = false;  // shut down to make room for a newer probe connection
    HttpLimits limits;
    std::chrono::steady_clock::time_point accepted;
  };
  struct GenOutcome;

  void handle(Conn* conn);
  void answer_exception(Connection& c, const std::string& endpoint, const char* what);
  void refuse_connection(int fd, const std::string& why);
  void close_idle_under_pressure();
  bool evict_idle_probe();
  void route(Connection& c, const HttpRequest& req, const std::string& endpoint, bool probe);
  void handle_generation(Connection& c, const HttpRequest& req, bool chat);
  void respond_json(Connection& c, const std::string& endpoint, int status, const std::string& body,
                    const std::vector<std::string>& extra = {});
  void respond_error(Connection& c, const std::string& endpoint, const ApiError& e,
                     const std::vector<std::string>& extra = {});
  bool authorized(const HttpRequest& req) const;
  size_t prompt_token_limit() const;  // tokens a prompt may take, image rows included
  ApiError prompt_error(ApiError e) const;
  ApiError prompt_tokens_error(const char* param, size_t limit) const;
  // Requests (choices) queued or running, against slots + max_queue.
  bool try_acquire_in_flight(int64_t count = 1);
  void release_in_flight(int64_t count = 1);
  void reap_connections(bool all);
  std::string next_id(const char* prefix);

  ServerOptions opts_;
  ModelInfo model_;
  EngineWorker& worker_;
  Metrics& metrics_;
  int listen_fd_ = -1;
  int port_ = 0;
  int wake_pipe_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> in_flight_{0};
  std::atomic<uint64_t> id_counter_{0};
  std::string id_prefix_;
  std::list<std::unique_ptr<Conn>> conns_;   // accept thread only
  std::map<std::string, int> per_client_;    // accept thread only: open connections by address
  int general_conns_ = 0, probe_conns_ = 0;  // accept thread only
  PromptLimits prompt_limits_;
  bool byte_cap_from_capacity_ = false;  // prompt_limits_.max_bytes is capacity x bytes per token
  // Sockets of connections reading a request or idle between requests (for shutdown and the
  // pressure rule), with when that began. Connections busy answering are not in it.
  struct FdState {
    bool idle = false;
    std::chrono::steady_clock::time_point since;
  };
  void set_fd_state(int fd, bool idle);
  std::mutex fds_mu_;
  std::map<int, FdState> open_fds_;
  std::mutex live_mu_;
  std::set<engine::RequestId> live_;  // submitted by a connection thread that has not seen its end
};

// SHA-256 both sides and compare the digests without data-dependent branches, so neither the
// key's content nor its length leaks through timing.
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace hlx::server
