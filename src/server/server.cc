#include "server/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>

#include "core/clock.h"
#include "core/sha256.h"
#include "engine/tool_calls.h"

namespace hlx::server {
namespace {

using Clock = std::chrono::steady_clock;

std::string outcome_for(int status) {
  if (status < 300) return "ok";
  switch (status) {
    case 401:
      return "unauthorized";
    case 408:
      return "timeout";
    case 413:
      return "too_large";
    case 429:
      return "queue_full";
    case 503:
      return "unavailable";
    case 504:
      return "timeout";
    // The client asked for something this server does not implement (chunked request bodies,
    // another HTTP version): its request, not a server fault, so not counted as "error".
    case 501:
    case 505:
      return "unsupported";
    default:
      return status < 500 ? "bad_request" : "error";
  }
}

std::string endpoint_for(const std::string& path) {
  if (path == "/v1/chat/completions") return "chat_completions";
  if (path == "/v1/completions") return "completions";
  if (path == "/v1/models") return "models";
  if (path == "/health") return "health";
  if (path == "/metrics") return "metrics";
  return "other";
}

std::string peer_address(const sockaddr_storage& addr) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (addr.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&addr)->sin_addr, buf, sizeof buf);
  else if (addr.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_addr, buf, sizeof buf);
  return buf;
}

// Waits until `fd` is readable (the request's event fd after we cancelled it).
void wait_readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  while (poll(&p, 1, -1) < 0 && errno == EINTR) {
  }
}

}  // namespace

bool constant_time_equal(std::string_view a, std::string_view b) {
  Sha256 ha, hb;
  ha.update(a);
  hb.update(b);
  std::array<uint8_t, 32> da = ha.digest(), db = hb.digest();
  volatile uint8_t diff = 0;
  for (size_t i = 0; i < da.size(); ++i) diff = diff | uint8_t(da[i] ^ db[i]);
  return diff == 0;
}

Server::Server(ServerOptions options, ModelInfo model, EngineWorker& worker, Metrics& metrics)
    : opts_(std::move(options)), model_(std::move(model)), worker_(worker), metrics_(metrics) {
  std::random_device rd;
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", unsigned(rd()));
  id_prefix_ = buf;
  // The prompt budget (docs/SERVER.md, "Per-request memory budget"): text longer than capacity x
  // the most bytes one token can stand for cannot fit, so it is refused before rendering or
  // tokenizing; --max-prompt-bytes bounds it further.
  prompt_limits_.max_tokens = size_t(std::max<int64_t>(model_.context_capacity, 0));
  prompt_limits_.max_bytes = opts_.max_prompt_bytes;
  if (model_.tokenizer)
    if (std::optional<size_t> per = model_.tokenizer->max_bytes_per_token())
      if (*per * prompt_limits_.max_tokens < prompt_limits_.max_bytes) {
        prompt_limits_.max_bytes = *per * prompt_limits_.max_tokens;
        byte_cap_from_capacity_ = true;
      }
}

Server::~Server() {
  if (listen_fd_ >= 0) close(listen_fd_);
  for (int fd : wake_pipe_)
    if (fd >= 0) close(fd);
}

Status Server::listen() {
  if (pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) return make_error(ErrorKind::kIo, "pipe: ", std::strerror(errno));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(opts_.port);
  int rc = getaddrinfo(opts_.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) return make_error(ErrorKind::kIo, "--host '", opts_.host, "': ", gai_strerror(rc));
  std::string last_error = "no address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
      last_error = std::strerror(errno);
      close(fd);
      continue;
    }
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                       : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    listen_fd_ = fd;
    break;
  }
  freeaddrinfo(res);
  if (listen_fd_ < 0)
    return make_error(ErrorKind::kIo, "cannot listen on ", opts_.host, ":", opts_.port, ": ", last_error);
  return ok_status();
}

void Server::request_stop() {
  stopping_ = true;
  char c = 1;
  if (wake_pipe_[1] >= 0) (void)!write(wake_pipe_[1], &c, 1);
}

void Server::cancel_all() {
  std::lock_guard<std::mutex> lock(live_mu_);
  for (engine::RequestId id : live_) worker_.cancel(id);
}

void Server::reap_connections(bool all) {
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (all || (*it)->done) {
      (*it)->thread.join();
      auto pc = per_client_.find((*it)->client);
      if (pc != per_client_.end() && --pc->second <= 0) per_client_.erase(pc);
      --((*it)->probe ? probe_conns_ : general_conns_);
      it = conns_.erase(it);
    } else {
      ++it;
    }
  }
}

void Server::serve() {
  while (!stopping_) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    int r = poll(p, 2, 1000);
    reap_connections(false);
    if (stopping_) break;
    if (r <= 0 || !(p[0].revents & POLLIN)) continue;
    close_idle_under_pressure();
    sockaddr_storage addr{};
    socklen_t alen = sizeof addr;
    int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &alen, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    // Ordinary connections up to max_connections, at most max_connections_per_client from one
    // address; past either, a few probe connections that may only ask for /health or /metrics.
    // Connections that ended since the poll are reaped first: counted, a probe that just timed
    // out could neither be evicted nor make room, and a /health probe would be refused.
    reap_connections(false);
    std::string client = peer_address(addr);
    const int mine = per_client_.count(client) ? per_client_[client] : 0;
    const bool client_full = opts_.max_connections_per_client > 0 && mine >= opts_.max_connections_per_client;
    const bool full = general_conns_ >= opts_.max_connections;
    const bool probe = full || client_full;
    if (probe && probe_conns_ >= opts_.probe_connections && !evict_idle_probe()) {
      refuse_connection(fd, client_full
                                ? "too many open connections from " + client + " (limit " +
                                      std::to_string(opts_.max_connections_per_client) + ")"
                                : "too many open connections (limit " + std::to_string(opts_.max_connections) + ")");
      continue;
    }
    auto conn = std::make_unique<Conn>();
    conn->fd = fd;
    conn->client = client;
    conn->probe = probe;
    conn->limits = opts_.http;
    conn->accepted = Clock::now();
    if (probe)
      conn->limits.read_timeout_ms = std::min(conn->limits.read_timeout_ms, 1000);
    else if (general_conns_ * 4 >= opts_.max_connections * 3)  // near the cap: idle ones go sooner
      conn->limits.read_timeout_ms = std::min(conn->limits.read_timeout_ms, opts_.pressure_read_timeout_ms);
    {
      std::lock_guard<std::mutex> lock(fds_mu_);
      open_fds_[fd] = FdState{false, conn->accepted};
    }
    Conn* raw = conn.get();
    try {
      conn->thread = std::thread([this, raw] { handle(raw); });
    } catch (const std::exception& e) {  // no thread to be had: refuse instead of terminating
      {
        std::lock_guard<std::mutex> lock(fds_mu_);
        open_fds_.erase(fd);
      }
      refuse_connection(fd, std::string("cannot start a connection thread: ") + e.what());
      continue;
    }
    ++per_client_[client];
    ++(probe ? probe_conns_ : general_conns_);
    conns_.push_back(std::move(conn));
  }
  // Graceful shutdown: no new connections; requests already accepted get 503 (see route());
  // in-flight generations may finish within the grace period, then they are cancelled.
  close(listen_fd_);
  listen_fd_ = -1;
  {  // kept connections idle between requests close now (a thread that goes idle later sees stopping_)
    std::lock_guard<std::mutex> lock(fds_mu_);
    for (const auto& [fd, st] : open_fds_)
      if (st.idle) ::shutdown(fd, SHUT_RD);
  }
  const auto grace_end = Clock::now() + std::chrono::milliseconds(opts_.shutdown_grace_ms);
  while (Clock::now() < grace_end) {
    reap_connections(false);
    if (conns_.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!conns_.empty()) {
    std::fprintf(stderr, "hlx serve: cancelling %zu in-flight connection(s)\n", conns_.size());
    cancel_all();
    // Connections still reading a request see EOF at once.
    std::lock_guard<std::mutex> lock(fds_mu_);
    for (const auto& kv : open_fds_) ::shutdown(kv.first, SHUT_RD);
  }
  reap_connections(true);
}

void Server::refuse_connection(int fd, const std::string& why) {
  ApiError e{503, why, "", "", "too_many_connections"};
  std::string body = e.to_json();
  std::string out =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  (void)!send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  close(fd);
  metrics_.count_request("other", "unavailable");
}

void Server::close_idle_under_pressure() {
  if (general_conns_ * 4 < opts_.max_connections * 3) return;
  const auto cutoff = Clock::now() - std::chrono::milliseconds(opts_.pressure_read_timeout_ms);
  std::lock_guard<std::mutex> lock(fds_mu_);  // open_fds_: sockets reading a request or idle between two
  for (const auto& c : conns_) {
    auto it = open_fds_.find(c->fd);
    if (!c->done && it != open_fds_.end() && it->second.since < cutoff) ::shutdown(c->fd, SHUT_RD);
  }
}

bool Server::evict_idle_probe() {
  std::lock_guard<std::mutex> lock(fds_mu_);
  for (const auto& c : conns_)  // oldest first
    if (c->probe && !c->done && !c->evicted && open_fds_.count(c->fd)) {
      ::shutdown(c->fd, SHUT_RD);  // its read sees EOF: closed without an answer
      c->evicted = true;
      return true;
    }
  return false;
}

void Server::answer_exception(Connection& c, const std::string& endpoint, const char* what) {
  try {
    std::fprintf(stderr, "hlx serve: %s: exception while handling a request: %s\n", endpoint.c_str(), what);
    ApiError e{500, std::string("internal error while handling the request: ") + what, "server_error", "",
               "internal_error"};
    if (!c.response_started()) return respond_error(c, endpoint, e);
    // Headers went out already: a stream ends with an error event; anything else just closes.
    metrics_.count_request(endpoint, outcome_for(500));
    if (c.streaming()) {
      c.send_piece("data: " + e.to_json() + "\n\n");
      c.send_piece("data: [DONE]\n\n");
      c.end_stream();
    }
  } catch (...) {  // nothing more to do for this client (e.g. out of memory again)
  }
}

void Server::set_fd_state(int fd, bool idle) {
  std::lock_guard<std::mutex> lock(fds_mu_);
  open_fds_[fd] = FdState{idle, Clock::now()};
}

void Server::handle(Conn* conn) {
  {
    Connection c(conn->fd, conn->limits);
    struct Unregister {  // runs before `c` closes the socket, so shutdown() never hits a reused fd
      Server* s;
      int fd;
      ~Unregister() {
        std::lock_guard<std::mutex> lock(s->fds_mu_);
        s->open_fds_.erase(fd);
      }
    } unregister{this, conn->fd};
    // One request after another while the client keeps the connection (docs/SERVER.md,
    // "Persistent connections").
    for (int served = 0;; ++served) {
      if (served > 0) {
        set_fd_state(conn->fd, /*idle=*/true);  // before the stopping_ check: see serve()
        if (stopping_ || !c.wait_for_request(opts_.keep_alive_timeout_ms)) break;
        set_fd_state(conn->fd, /*idle=*/false);
      }
      std::string endpoint = "other";
      // The edge of a request: no exception from a parser, library or allocation goes further.
      try {
        HttpRequest req;
        HttpError herr;
        Connection::ReadResult rr = c.read_request(req, herr);
        {  // from here on shutdown reaches this connection through cancel_all(), not SHUT_RD
          std::lock_guard<std::mutex> lock(fds_mu_);
          open_fds_.erase(conn->fd);
        }
        if (rr == Connection::ReadResult::kClosed) break;
        endpoint = endpoint_for(req.path);
        // This response is the connection's last when the server says so (decided before the
        // response's headers go out, so they carry `Connection: close`).
        // HEAD is answered (404/405) with a body, which a HEAD client does not read: after it the
        // framing is off, so that connection ends too.
        if (conn->probe || opts_.keep_alive_timeout_ms == 0 || stopping_ || req.method == "HEAD" ||
            (opts_.max_requests_per_connection > 0 && served + 1 >= opts_.max_requests_per_connection))
          c.set_keep_alive(false);
        if (rr == Connection::ReadResult::kError) {
          respond_error(c, endpoint, ApiError{herr.status, herr.message, "", "", herr.code});
        } else {
          route(c, req, endpoint, conn->probe);
        }
      } catch (const std::exception& e) {
        answer_exception(c, endpoint, e.what());
      } catch (...) {
        answer_exception(c, endpoint, "unknown exception");
      }
      // A response cut short (client gone, exception mid-stream, cancelled without an answer)
      // leaves the framing unknown: close.
      if (!c.keep_alive() || !c.response_complete() || c.broken() || stopping_) break;
    }
  }
  conn->done = true;
}

void Server::respond_json(Connection& c, const std::string& endpoint, int status, const std::string& body,
                          const std::vector<std::string>& extra) {
  metrics_.count_request(endpoint, outcome_for(status));  // before the client can see the answer
  c.send_response(status, "application/json", body, extra);
}

void Server::respond_error(Connection& c, const std::string& endpoint, const ApiError& e,
                           const std::vector<std::string>& extra) {
  if (opts_.log_requests) std::fprintf(stderr, "hlx serve: %s %d %s\n", endpoint.c_str(), e.status, e.message.c_str());
  respond_json(c, endpoint, e.status, e.to_json(), extra);
}

bool Server::authorized(const HttpRequest& req) const {
  if (opts_.api_key.empty()) return true;
  const std::string* auth = req.header("authorization");
  if (!auth) return false;
  std::string_view v = *auth;
  constexpr std::string_view kBearer = "Bearer ";
  if (v.size() < kBearer.size() || strncasecmp(v.data(), kBearer.data(), kBearer.size()) != 0) return false;
  v.remove_prefix(kBearer.size());
  return constant_time_equal(v, opts_.api_key);
}

bool Server::try_acquire_in_flight(int64_t count) {
  const int64_t limit = worker_.slots() + opts_.max_queue;
  int64_t cur = in_flight_.load();
  while (cur + count <= limit)
    if (in_flight_.compare_exchange_weak(cur, cur + count)) return true;
  return false;
}

void Server::release_in_flight(int64_t count) { in_flight_ -= count; }

std::string Server::next_id(const char* prefix) {
  return std::string(prefix) + id_prefix_ + std::to_string(++id_counter_);
}

void Server::route(Connection& c, const HttpRequest& req, const std::string& endpoint, bool probe) {
  struct Route {
    const char* path;
    const char* method;
  };
  static const Route kRoutes[] = {{"/v1/chat/completions", "POST"},
                                  {"/v1/completions", "POST"},
                                  {"/v1/models", "GET"},
                                  {"/health", "GET"},
                                  {"/metrics", "GET"}};
  const Route* found = nullptr;
  for (const Route& r : kRoutes)
    if (req.path == r.path) found = &r;
  if (!found) {
    respond_error(c, endpoint, ApiError{404, "no route for '" + req.path.substr(0, 64) + "'", "", "", "not_found"});
    return;
  }
  if (req.method != found->method) {
    respond_error(c, endpoint,
                  ApiError{405, req.method + " is not allowed on " + req.path + " (use " + found->method + ")", "", "",
                           "method_not_allowed"},
                  {std::string("Allow: ") + found->method});
    return;
  }
  if (probe && req.path != "/health" && req.path != "/metrics") {
    respond_error(c, endpoint,
                  ApiError{503, "too many open connections; only /health and /metrics are answered now", "", "",
                           "too_many_connections"},
                  {"Retry-After: 1"});
    return;
  }
  if (req.path == "/health") {
    if (stopping_)
      respond_json(c, endpoint, 503, R"({"status":"shutting_down"})");
    else
      respond_json(c, endpoint, 200, R"({"status":"ok"})");
    return;
  }
  if (req.path == "/metrics") {
    EngineGauges g{worker_.queued(), worker_.running(), worker_.slots(), in_flight_.load()};
    std::string text = metrics_.render(g);
    metrics_.count_request(endpoint, "ok");
    c.send_response(200, "text/plain; version=0.0.4; charset=utf-8", text);
    return;
  }
  if (!authorized(req)) {
    respond_error(c, endpoint,
                  ApiError{401, "missing or invalid API key (send 'Authorization: Bearer <key>')",
                           "authentication_error", "", "invalid_api_key"},
                  {"WWW-Authenticate: Bearer"});
    return;
  }
  if (req.path == "/v1/models") {
    json data = json::array({json{{"id", opts_.model_name},
                                  {"object", "model"},
                                  {"created", model_.created},
                                  {"owned_by", "hlx"},
                                  {"max_model_len", model_.context_capacity}}});
    respond_json(c, endpoint, 200, dump_json(json{{"object", "list"}, {"data", data}}));
    return;
  }
  if (stopping_) {
    respond_error(c, endpoint, ApiError{503, "the server is shutting down", "", "", "shutting_down"});
    return;
  }
  handle_generation(c, req, req.path == "/v1/chat/completions");
}

size_t Server::prompt_token_limit() const { return size_t(std::max<int64_t>(model_.context_capacity, 0)); }

ApiError Server::prompt_error(ApiError e) const {
  // Over a byte limit derived from the capacity, the prompt cannot fit: say so in the words of a
  // context overflow. Over --max-prompt-bytes, it is a size limit of this server.
  if (e.code != "prompt_too_large") return e;
  if (byte_cap_from_capacity_) {
    e.message = "This model's maximum context length is " + std::to_string(model_.context_capacity) +
                " tokens. However, " + e.message + ": more than that many tokens can hold (one token covers at most " +
                std::to_string(prompt_limits_.max_bytes / std::max<size_t>(prompt_limits_.max_tokens, 1)) +
                " bytes). Please reduce the length of the prompt.";
    e.code = "context_length_exceeded";
  } else {
    e.message += " (--max-prompt-bytes " + std::to_string(prompt_limits_.max_bytes) + ")";
  }
  return e;
}

ApiError Server::prompt_tokens_error(const char* param, size_t limit) const {
  const std::string what = "your prompt is more than " + std::to_string(limit) + " tokens";
  return bad_request("This model's maximum context length is " + std::to_string(model_.context_capacity) +
                         " tokens. However, " + what +
                         " (tokenization stopped there). Please reduce the length of the prompt.",
                     param, "context_length_exceeded");
}

void Server::handle_generation(Connection& c, const HttpRequest& req, bool chat) {
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::milliseconds(opts_.request_timeout_ms);
  const std::string endpoint = chat ? "chat_completions" : "completions";
  json body;
  ApiError err = parse_json_body(req.body, body);
  if (!err.ok()) return respond_error(c, endpoint, err);
  std::string fault;  // test-only (ServerOptions::fault_injection)
  if (const std::string* f = opts_.fault_injection ? req.header("x-hlx-fault") : nullptr) fault = *f;
  if (fault == "throw") throw std::runtime_error("injected fault (X-Hlx-Fault: throw)");
  if (fault == "bad_alloc") throw std::bad_alloc();

  GenerationParams params;
  engine::GenerationRequest g;
  std::vector<mm::Image> images;
  ToolMode tool_mode = ToolMode::kOff;
  std::vector<std::string> tool_names;
  const char* prompt_param = chat ? "messages" : "prompt";
  if (chat) {
    ChatRequest cr;
    if (!(err = parse_chat_request(body, cr, prompt_limits_)).ok())
      return respond_error(c, endpoint, prompt_error(err));
    params = cr.params;
    if (int64_t(cr.images.size()) > opts_.max_images_per_request)
      return respond_error(c, endpoint,
                           bad_request(std::to_string(cr.images.size()) + " images in one request; the limit is " +
                                           std::to_string(opts_.max_images_per_request),
                                       "messages", "too_many_images"));
    // The request's decoded images together stay within max_request_pixels (decoded images are
    // held until the engine has preprocessed them): each is checked against what is left.
    int64_t pixels_left = opts_.images.max_request_pixels;
    for (const ImageRef& ref : cr.images) {
      mm::Image img;
      ImageLimits lim = opts_.images;
      lim.max_pixels = std::min(lim.max_pixels, pixels_left);
      const std::string shared =
          "the images of one request may hold " + std::to_string(opts_.images.max_request_pixels) +
          " pixels together and the earlier ones take " + std::to_string(opts_.images.max_request_pixels - pixels_left);
      if (lim.max_pixels < 1)
        return respond_error(c, endpoint, ApiError{413, shared, "invalid_request_error", ref.param, "image_too_large"});
      if (!(err = load_image_url(ref.url, lim, ref.param, img)).ok()) {
        if (lim.max_pixels < opts_.images.max_pixels && err.status == 413 &&
            err.message.find(" pixels exceeds ") != std::string::npos)
          err.message += "; " + shared;
        return respond_error(c, endpoint, err);
      }
      pixels_left -= img.width * img.height;
      images.push_back(std::move(img));
    }
    if (!images.empty() && !model_.vision)
      return respond_error(c, endpoint,
                           bad_request("model '" + opts_.model_name + "' is text-only and does not accept images",
                                       cr.images[0].param, "images_not_supported"));
    if (!model_.chat_template)
      return respond_error(
          c, endpoint,
          bad_request("the checkpoint has no chat template (tokenizer_config.json); use /v1/completions", "messages",
                      "no_chat_template"));
    // Tools need a template that renders them and teaches the <tool_call> syntax the output is
    // parsed in (Qwen2.5/Qwen3); others (Gemma3) have no format hlx could parse: refused.
    if (!cr.tools.is_null() && !engine::template_has_tool_calls(model_.chat_template->source()))
      return respond_error(c, endpoint,
                           bad_request("tools are not supported by this model's chat template (it has no "
                                       "<tool_call> format); send the request without 'tools'",
                                       "tools", "tools_not_supported"));
    tool_mode = cr.tool_mode;
    tool_names = cr.tool_names;
    // The rendering stops at the byte limit, the tokenization at the token limit: a prompt that
    // cannot fit costs no more than one that just fits.
    auto rendered = model_.chat_template->render(cr.messages, /*add_generation_prompt=*/true, cr.template_kwargs,
                                                 prompt_limits_.max_bytes, cr.tools);
    if (!rendered.ok() && rendered.status().kind() == ErrorKind::kCapacityExceeded)
      return respond_error(c, endpoint,
                           prompt_error(bad_request("the rendered chat prompt is longer than " +
                                                        std::to_string(prompt_limits_.max_bytes) + " bytes",
                                                    "messages", "prompt_too_large")));
    if (!rendered.ok())
      return respond_error(c, endpoint,
                           bad_request("the chat template rejected the messages: " + rendered.status().message(),
                                       "messages", "template_error"));
    // Each image placeholder becomes the image's rows, on the text (as the upstream processors do).
    if (!images.empty()) {
      std::vector<int64_t> counts;
      for (size_t i = 0; i < images.size(); ++i) {
        auto t = model_.vision->image_tokens(images[i]);
        if (!t.ok()) return respond_error(c, endpoint, from_status(t.status(), cr.images[i].param));
        counts.push_back(*t);
      }
      auto expanded = model_.vision->expand_prompt(*rendered, counts);
      if (!expanded.ok()) return respond_error(c, endpoint, from_status(expanded.status(), "messages"));
      *rendered = std::move(*expanded);
    }
    // A forced call: the model continues after the opening tag, the grammar writes the JSON.
    if (tool_mode == ToolMode::kForced) *rendered += engine::kToolCallPrefix;
    // As apply_chat_template(tokenize=True): the template carries BOS itself.
    const size_t limit = prompt_token_limit();
    auto ids = model_.tokenizer->encode(*rendered, /*add_special_tokens=*/false, limit);
    if (!ids.ok() && ids.status().kind() == ErrorKind::kCapacityExceeded)
      return respond_error(c, endpoint, prompt_tokens_error("messages", limit));
    if (!ids.ok()) return respond_error(c, endpoint, from_status(ids.status(), "messages"));
    g.prompt.assign(ids->begin(), ids->end());
  } else {
    CompletionRequest cr;
    if (!(err = parse_completion_request(body, cr, prompt_limits_)).ok())
      return respond_error(c, endpoint, prompt_error(err));
    params = cr.params;
    if (cr.prompt_text) {
      const size_t limit = prompt_token_limit();
      auto ids = model_.tokenizer->encode(*cr.prompt_text, /*add_special_tokens=*/true, limit);
      if (!ids.ok() && ids.status().kind() == ErrorKind::kCapacityExceeded)
        return respond_error(c, endpoint, prompt_tokens_error("prompt", limit));
      if (!ids.ok()) return respond_error(c, endpoint, from_status(ids.status(), "prompt"));
      g.prompt.assign(ids->begin(), ids->end());
    } else {
      g.prompt = cr.prompt_ids;
    }
  }
  if (g.prompt.empty())
    return respond_error(c, endpoint, bad_request("the prompt is empty (0 tokens)", prompt_param, "empty_prompt"));
  // Without max_tokens the completion may fill the rest of the context (as vLLM does).
  const int64_t prompt_rows = int64_t(g.prompt.size());  // image rows included
  const int64_t room = model_.context_capacity - prompt_rows;
  if (!params.max_tokens && room < 1)
    return respond_error(
        c, endpoint,
        bad_request("This model's maximum context length is " + std::to_string(model_.context_capacity) +
                        " tokens. However, your prompt is " + std::to_string(prompt_rows) +
                        " tokens, which leaves no room for a completion (1 requested token). Please reduce the length "
                        "of the prompt.",
                    prompt_param, "context_length_exceeded"));
  g.max_new_tokens = params.max_tokens ? *params.max_tokens : room;
  g.sampling = params.sampling;
  g.stop = params.stop;
  g.json_grammar = params.json_grammar;
  if (params.ignore_eos) g.eos_token_ids = std::vector<int64_t>{};
  g.images = std::move(images);  // the engine checks their rows and admission

  const int64_t n = params.n;
  if (n > 1 && !g.images.empty())
    return respond_error(c, endpoint,
                         bad_request("'n' > 1 with images is not supported (each choice would hold its own copy of "
                                     "the decoded images); send the request n times",
                                     "n", "unsupported"));
  if (!try_acquire_in_flight(n))
    return respond_error(
        c, endpoint,
        ApiError{429,
                 "the request queue is full (" + std::to_string(worker_.slots()) + " slots and " +
                     std::to_string(opts_.max_queue) + " queued requests in flight" +
                     (n > 1 ? ", and this request asks for " + std::to_string(n) + " choices" : "") + "); retry later",
                 "", "", "queue_full"},
        {"Retry-After: 1"});
  // Released on every way out of here, exceptions included.
  struct InFlight {
    Server* s;
    int64_t n;
    bool held = true;
    void release() {
      if (held) s->release_in_flight(n);
      held = false;
    }
    ~InFlight() { release(); }
  } in_flight{this, n};
  // Cancelled and forgotten on every way out of here, exceptions included.
  struct Live {
    Server* s;
    std::vector<engine::RequestId> ids;
    bool ended = false;
    void end(bool finished) {
      if (ended) return;
      ended = true;
      if (!finished)
        for (engine::RequestId id : ids) s->worker_.cancel(id);
      std::lock_guard<std::mutex> lock(s->live_mu_);
      for (engine::RequestId id : ids) s->live_.erase(id);
    }
    ~Live() { end(false); }
  } live{this, {}};

  // Choice i is the prompt sampled with seed + i (choice 0: the n = 1 answer). Choices after the
  // first wait for its prefill and copy its prompt rows (GenerationRequest::prefill_after), so
  // the prompt is computed once; all share one event channel.
  struct Choice {
    engine::RequestId rid = 0;
    std::string text;
    int64_t tokens = 0;
    engine::Finish finish = engine::Finish::kNone;
    Status error;
    int64_t cached_tokens = 0;
    // Log-probabilities (sampling.logprobs): one per token event; streamed with that token's
    // text, else collected for the response.
    std::vector<engine::TokenLogprobs> lps;
    size_t text_offset = 0;  // completions' streamed text_offset
    // Tools (tool_mode kAuto / kForced): the text split into content and calls.
    std::unique_ptr<engine::ToolCallParser> parser;
    std::string content;
    json calls = json::array();
  };
  std::vector<Choice> choices(static_cast<size_t>(n));
  if (tool_mode != ToolMode::kOff)
    for (Choice& k : choices) {
      k.parser = std::make_unique<engine::ToolCallParser>(tool_names);
      if (tool_mode == ToolMode::kForced) k.parser->feed(engine::kToolCallPrefix);  // the prompt's end
    }
  std::shared_ptr<RequestChannel> ch;
  engine::Admission adm;
  const uint64_t seed = g.sampling.seed;
  for (int64_t i = 0; i < n; ++i) {
    engine::GenerationRequest gi = i + 1 < n ? g : std::move(g);
    gi.sampling.seed = seed + uint64_t(i);
    if (i > 0) gi.prefill_after = choices[0].rid;
    auto submitted = worker_.submit(std::move(gi), i == 0 ? &adm : nullptr, ch);
    if (!submitted.ok()) {
      live.end(/*finished=*/false);
      in_flight.release();
      if (adm.capacity_exceeded()) {
        const int64_t total = adm.effective_prompt_len + adm.max_new_tokens;
        return respond_error(
            c, endpoint,
            bad_request("This model's maximum context length is " + std::to_string(adm.context_capacity) +
                            " tokens. However, you requested " + std::to_string(total) + " tokens (" +
                            std::to_string(adm.effective_prompt_len) + " in the prompt, " +
                            std::to_string(adm.max_new_tokens) +
                            " in the completion). Please reduce the length of the prompt or the completion.",
                        prompt_param, "context_length_exceeded"));
      }
      if (stopping_)
        return respond_error(c, endpoint, ApiError{503, "the server is shutting down", "", "", "shutting_down"});
      // The engine's one check the request parser cannot make: logit_bias ids against the vocabulary.
      const bool bias = submitted.status().message().rfind("logit_bias", 0) == 0;
      return respond_error(c, endpoint, from_status(submitted.status(), bias ? "logit_bias" : prompt_param));
    }
    choices[size_t(i)].rid = submitted->id;
    ch = submitted->channel;
    live.ids.push_back(submitted->id);
    std::lock_guard<std::mutex> lock(live_mu_);
    live_.insert(submitted->id);
  }
  metrics_.add_prompt_tokens(adm.effective_prompt_len);
  if (fault == "throw_after_submit") throw std::runtime_error("injected fault (X-Hlx-Fault: throw_after_submit)");

  // Wait for the requests' events together with the socket.
  const std::string id = next_id(chat ? "chatcmpl-" : "cmpl-");
  const int64_t created = int64_t(std::time(nullptr));
  const std::string& model = opts_.model_name;
  enum class Why { kNone, kDisconnect, kTimeout } why = Why::kNone;
  const tok::Tokenizer* tokenizer = model_.tokenizer.get();
  auto send_text = [&](int64_t index, const std::string& piece, const engine::TokenLogprobs* lp = nullptr) {
    if ((piece.empty() && !lp) || !params.stream) return;
    json logprobs = nullptr;
    if (lp)
      logprobs = chat ? chat_logprobs_json({lp, 1}, tokenizer)
                      : completion_logprobs_json({lp, 1}, tokenizer, &choices[size_t(index)].text_offset);
    json chunk =
        chat ? chat_chunk_json(id, created, model, index, json{{"content", piece}}, "", params.include_usage, logprobs)
             : text_chunk_json(id, created, model, index, piece, "", params.include_usage, logprobs);
    c.send_piece(sse_event(chunk));
  };
  // Tools: content pieces go out as content deltas, a call as a delta naming it (index, id,
  // type, name, empty arguments) and then its arguments in pieces, as the OpenAI SDK accumulates.
  auto send_pieces = [&](int64_t index, std::vector<engine::ToolCallParser::Piece> pieces,
                         const engine::TokenLogprobs* lp = nullptr) {
    Choice& k = choices[size_t(index)];
    std::string text;
    for (auto& piece : pieces) {
      if (!piece.call) {
        text += piece.content;
        continue;
      }
      send_text(index, text);
      k.content += text;
      text.clear();
      const int64_t ci = int64_t(k.calls.size());
      const std::string call_id =
          "call_" + id.substr(id.find('-') + 1) + "_" + std::to_string(index) + "_" + std::to_string(ci);
      k.calls.push_back(tool_call_json(call_id, piece.call->name, piece.call->arguments));
      if (!params.stream) continue;
      json head = json{{"index", ci},
                       {"id", call_id},
                       {"type", "function"},
                       {"function", json{{"name", piece.call->name}, {"arguments", ""}}}};
      c.send_piece(sse_event(chat_chunk_json(id, created, model, index, json{{"tool_calls", json::array({head})}}, "",
                                             params.include_usage)));
      // Arguments in pieces of about 16 bytes, cut between UTF-8 characters.
      const std::string& args = piece.call->arguments;
      for (size_t at = 0; at < args.size();) {
        size_t end = std::min(args.size(), at + 16);
        while (end < args.size() && (uint8_t(args[end]) & 0xC0) == 0x80) ++end;
        json part = json{{"index", ci}, {"function", json{{"arguments", args.substr(at, end - at)}}}};
        c.send_piece(sse_event(chat_chunk_json(id, created, model, index, json{{"tool_calls", json::array({part})}}, "",
                                               params.include_usage)));
        at = end;
      }
    }
    k.content += text;
    send_text(index, text, lp);
  };
  if (params.stream) {
    c.begin_stream(200, "text/event-stream", {"Cache-Control: no-cache", "X-Accel-Buffering: no"});
    if (chat)
      for (int64_t i = 0; i < n; ++i)
        c.send_piece(sse_event(chat_chunk_json(id, created, model, i, json{{"role", "assistant"}, {"content", ""}}, "",
                                               params.include_usage)));
  }
  auto cancel_all = [&] {
    for (const Choice& k : choices) worker_.cancel(k.rid);
  };
  int64_t open = n;
  bool cancelled = false;
  while (open > 0) {
    if (cancelled) {
      wait_readable(ch->fd());  // the kFinished events come at the end of the engine's current step
    } else {
      int left = ms_left(deadline);
      Connection::Wait w = left == 0 ? Connection::Wait::kTimeout : c.wait(ch->fd(), left);
      if (w != Connection::Wait::kWake || c.broken()) {
        why = (w == Connection::Wait::kTimeout) ? Why::kTimeout : Why::kDisconnect;
        cancel_all();
        cancelled = true;
        continue;
      }
    }
    for (engine::Event& e : ch->take()) {
      size_t index = 0;
      while (index + 1 < choices.size() && choices[index].rid != e.id) ++index;
      Choice& k = choices[index];
      k.text += e.text;
      if (e.kind == engine::Event::Kind::kToken) {
        ++k.tokens;
        if (e.logprobs && !params.stream) k.lps.push_back(*e.logprobs);
        if (k.parser)
          send_pieces(int64_t(index), k.parser->feed(e.text), e.logprobs ? &*e.logprobs : nullptr);
        else
          send_text(int64_t(index), e.text, e.logprobs ? &*e.logprobs : nullptr);
      } else if (k.parser) {
        auto pieces = k.parser->feed(e.text);
        // A forced call's grammar closed the JSON: the block closes (max_tokens: it stays text).
        if (tool_mode == ToolMode::kForced && e.finish == engine::Finish::kStop)
          for (auto& p : k.parser->feed(engine::kToolCallSuffix)) pieces.push_back(std::move(p));
        for (auto& p : k.parser->finish()) pieces.push_back(std::move(p));
        send_pieces(int64_t(index), std::move(pieces));
        k.finish = e.finish;
        k.error = e.error;
        k.cached_tokens = e.cached_tokens;
        --open;
      } else {
        send_text(int64_t(index), e.text);
        k.finish = e.finish;
        k.error = e.error;
        k.cached_tokens = e.cached_tokens;
        --open;
      }
    }
    if (c.broken() && !cancelled) {  // a streamed write failed: the client is gone
      why = Why::kDisconnect;
      cancel_all();
      cancelled = true;
    }
  }
  in_flight.release();
  live.end(/*finished=*/true);

  // The prompt counts once (choices after the first reuse its rows), the completions all.
  Usage usage{adm.effective_prompt_len, 0};
  usage.cached_tokens = choices[0].cached_tokens;
  for (const Choice& k : choices) usage.completion_tokens += k.tokens;
  auto reason_of = [](const Choice& k) {
    if (!k.calls.empty()) return "tool_calls";
    return k.finish == engine::Finish::kLength ? "length" : "stop";
  };
  auto log = [&](int status, const char* what) {
    if (opts_.log_requests)
      std::fprintf(stderr, "hlx serve: %s %d %s prompt=%lld completion=%lld %.1f ms\n", endpoint.c_str(), status, what,
                   (long long)usage.prompt_tokens, (long long)usage.completion_tokens, ms_since(t0));
  };
  if (why == Why::kDisconnect) {
    metrics_.count_request(endpoint, "cancelled");
    log(499, "client disconnected; cancelled");
    return;
  }
  ApiError fail;
  if (why == Why::kTimeout)
    fail = ApiError{504, "the request exceeded the time limit of " + std::to_string(opts_.request_timeout_ms) + " ms",
                    "", "", "request_timeout"};
  for (const Choice& k : choices) {
    if (!fail.ok()) break;
    if (k.finish == engine::Finish::kCancelled)
      fail = ApiError{503, "the server is shutting down; the request was cancelled", "", "", "shutting_down"};
    else if (k.finish == engine::Finish::kError)
      fail = ApiError{500, "generation failed: " + k.error.to_string(), "", "", "generation_error"};
  }
  if (!fail.ok()) {
    log(fail.status, fail.message.c_str());
    if (!params.stream) return respond_error(c, endpoint, fail);
    metrics_.count_request(endpoint, outcome_for(fail.status));
    c.send_piece("data: " + fail.to_json() + "\n\n");
    c.send_piece("data: [DONE]\n\n");
    c.end_stream();
    return;
  }
  log(200, reason_of(choices[0]));
  if (!params.stream) {
    std::vector<ChoiceResult> results;
    for (Choice& k : choices) {
      json logprobs = nullptr;
      if (params.sampling.logprobs)
        logprobs =
            chat ? chat_logprobs_json(k.lps, tokenizer) : completion_logprobs_json(k.lps, tokenizer, &k.text_offset);
      if (k.parser)
        results.push_back(ChoiceResult{std::move(k.content), reason_of(k), std::move(logprobs), std::move(k.calls)});
      else
        results.push_back(ChoiceResult{std::move(k.text), reason_of(k), std::move(logprobs), nullptr});
    }
    json r = chat ? chat_completion_json(id, created, model, results, usage)
                  : text_completion_json(id, created, model, results, usage);
    return respond_json(c, endpoint, 200, dump_json(r));
  }
  std::string tail;
  for (int64_t i = 0; i < n; ++i) {
    const char* reason = reason_of(choices[size_t(i)]);
    tail += sse_event(chat ? chat_chunk_json(id, created, model, i, json::object(), reason, params.include_usage)
                           : text_chunk_json(id, created, model, i, "", reason, params.include_usage));
  }
  if (params.include_usage) tail += sse_event(usage_chunk_json(id, created, model, chat, usage));
  tail += "data: [DONE]\n\n";
  metrics_.count_request(endpoint, "ok");
  c.send_piece(tail);
  c.end_stream();
}

}  // namespace hlx::server
