#include "server/http.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hlx::server {
namespace {

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : int(left);
}

bool is_tchar(char c) {  // RFC 9110 token characters
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != '\0';
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

HttpError err(int status, std::string message, std::string code = "") {
  return HttpError{status, std::move(message), std::move(code)};
}

// The next line of `rest` (consumed): ends at LF; a CR right before the LF is dropped. RFC 9112
// section 2.2 lets a recipient accept a bare LF as a line terminator; we do, so such a client
// gets an answer instead of waiting for the read timeout. A bare CR elsewhere stays an error
// (control character) where it matters: names, values, the request line.
std::string_view next_line(std::string_view& rest) {
  size_t eol = rest.find('\n');
  std::string_view line = rest.substr(0, eol);
  rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 1);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

// Where the header block ends (the index just past its empty line), or npos. `from`: where to
// resume the scan (bytes before it were scanned already).
size_t find_head_end(std::string_view buf, size_t from) {
  for (size_t i = buf.find('\n', from); i != std::string_view::npos; i = buf.find('\n', i + 1)) {
    if (i + 1 < buf.size() && buf[i + 1] == '\n') return i + 2;
    if (i + 2 < buf.size() && buf[i + 1] == '\r' && buf[i + 2] == '\n') return i + 3;
  }
  return std::string_view::npos;
}

// Parses the header block (up to and including its final empty line). Empty optional-like: error.status == 0.
HttpError parse_head(std::string_view block, const HttpLimits& limits, HttpRequest& req) {
  std::string_view rest = block;
  std::string_view line = next_line(rest);
  size_t sp1 = line.find(' ');
  size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return err(400, "malformed request line (expected 'METHOD /path HTTP/1.1')");
  std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                   version = line.substr(sp2 + 1);
  if (method.empty()) return err(400, "empty request method");
  for (char c : method)
    if (!is_tchar(c)) return err(400, "malformed request method");
  if (target.empty() || target[0] != '/') return err(400, "request target must be an absolute path ('/...')");
  for (char c : target)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return err(400, "control character in the request target");
  if (version == "HTTP/1.1") req.minor_version = 1;
  else if (version == "HTTP/1.0") req.minor_version = 0;
  else return err(505, "unsupported protocol version '" + std::string(version.substr(0, 16)) + "' (HTTP/1.0 or 1.1)");
  req.method = std::string(method);
  req.target = std::string(target);
  size_t q = target.find('?');
  req.path = std::string(target.substr(0, q));
  req.query = q == std::string_view::npos ? "" : std::string(target.substr(q + 1));

  while (!rest.empty()) {
    line = next_line(rest);
    if (line.empty()) {
      if (rest.empty()) break;  // the empty line that ends the block
      return err(400, "empty header line inside the header block");
    }
    if (line[0] == ' ' || line[0] == '\t') return err(400, "obsolete header line folding is not accepted");
    size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) return err(400, "malformed header line (expected 'Name: value')");
    std::string_view name = line.substr(0, colon);
    for (char c : name)
      if (!is_tchar(c)) return err(400, "malformed header name (no spaces before ':')");
    std::string_view value = trim(line.substr(colon + 1));
    for (char c : value)
      if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f)
        return err(400, "control character in the value of header '" + std::string(name) + "'");
    if (int(req.headers.size()) >= limits.max_headers)
      return err(431, "more than " + std::to_string(limits.max_headers) + " header lines", "too_many_headers");
    req.headers.emplace_back(lower(name), std::string(value));
  }
  return HttpError{0, "", ""};
}

}  // namespace

const std::string* HttpRequest::header(std::string_view lower_name) const {
  for (const auto& [k, v] : headers)
    if (k == lower_name) return &v;
  return nullptr;
}

const char* http_reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

Connection::Connection(int fd, HttpLimits limits) : fd_(fd), limits_(limits) {
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // SSE pieces go out at once
  timeval tv{limits_.write_timeout_ms / 1000, (limits_.write_timeout_ms % 1000) * 1000};
  setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);  // a stalled reader fails the write
}

Connection::~Connection() {
  // A client still sending a body we refused would get a RST (and might lose our answer) if we
  // closed with unread data: half-close, then drain for a bounded time and byte count.
  if (unread_body_ && !broken_) {
    shutdown(fd_, SHUT_WR);
    auto deadline = Clock::now() + std::chrono::seconds(2);
    size_t drained = 0;
    char buf[16384];
    while (drained < (64u << 20)) {
      pollfd p{fd_, POLLIN, 0};
      int left = ms_left(deadline);
      if (left == 0 || poll(&p, 1, left) <= 0) break;
      ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      drained += size_t(n);
    }
  }
  close(fd_);
}

Connection::ReadResult Connection::read_request(HttpRequest& req, HttpError& error) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(limits_.read_timeout_ms);
  std::string buf;
  char tmp[16384];
  size_t head_end = std::string::npos, scanned = 0;  // head_end: first byte after the empty line
  auto fail = [&](HttpError e) {
    error = std::move(e);
    unread_body_ = true;  // whatever the client is still sending is drained before closing
    return ReadResult::kError;
  };
  // Header block.
  while (true) {
    head_end = find_head_end(buf, scanned >= 3 ? scanned - 3 : 0);
    scanned = buf.size();
    if (head_end != std::string::npos) break;
    if (buf.size() >= limits_.max_header_bytes)
      return fail(err(431, "request header block exceeds " + std::to_string(limits_.max_header_bytes) + " bytes",
                      "header_too_large"));
    pollfd p{fd_, POLLIN, 0};
    int left = ms_left(deadline);
    int r = left == 0 ? 0 : poll(&p, 1, left);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (buf.empty()) return ReadResult::kClosed;
      return fail(err(408, "the request headers did not arrive within " + std::to_string(limits_.read_timeout_ms) + " ms",
                      "request_timeout"));
    }
    size_t want = std::min(sizeof tmp, limits_.max_header_bytes + 4 - std::min(buf.size(), limits_.max_header_bytes));
    ssize_t n = recv(fd_, tmp, want, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ReadResult::kClosed;
    buf.append(tmp, size_t(n));
  }
  if (head_end > limits_.max_header_bytes)
    return fail(err(431, "request header block exceeds " + std::to_string(limits_.max_header_bytes) + " bytes",
                    "header_too_large"));
  HttpError e = parse_head(std::string_view(buf).substr(0, head_end), limits_, req);
  minor_version_ = req.minor_version;
  if (e.status != 0) return fail(std::move(e));

  if (req.header("transfer-encoding"))
    return fail(err(501, "Transfer-Encoding request bodies (chunked) are not supported; send Content-Length",
                    "unsupported_transfer_encoding"));
  size_t length = 0;
  bool has_length = false;
  for (const auto& [k, v] : req.headers) {
    if (k != "content-length") continue;
    if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string::npos)
      return fail(err(400, "malformed Content-Length '" + v.substr(0, 32) + "'"));
    size_t n = std::stoull(v);
    if (has_length && n != length) return fail(err(400, "conflicting Content-Length headers"));
    length = n;
    has_length = true;
  }
  // RFC 9112 section 3.2: an HTTP/1.1 request without exactly one Host header is a 400.
  if (req.minor_version == 1) {
    int hosts = 0;
    for (const auto& kv : req.headers) hosts += kv.first == "host";
    if (hosts != 1)
      return fail(err(400, hosts == 0 ? "an HTTP/1.1 request needs a Host header" : "more than one Host header",
                      "invalid_host"));
  }
  // Only POST routes take a body; other methods without Content-Length have none (and are
  // answered 404/405 by the router rather than 411).
  if (req.method == "POST" && !has_length) return fail(err(411, "a request body needs a Content-Length header", "length_required"));
  if (length > limits_.max_body_bytes)
    return fail(err(413, "request body of " + std::to_string(length) + " bytes exceeds the limit of " +
                             std::to_string(limits_.max_body_bytes) + " bytes",
                    "payload_too_large"));
  if (const std::string* expect = req.header("expect")) {
    if (lower(*expect) != "100-continue") return fail(err(417, "unsupported Expect: '" + expect->substr(0, 32) + "'"));
    if (req.minor_version == 1 && length > 0 && buf.size() - head_end < length) {
      std::string cont = "HTTP/1.1 100 Continue\r\n\r\n";
      if (!send_all(cont)) return ReadResult::kClosed;
      started_ = false;  // an interim response: the final one is still to come
    }
  }
  // Body.
  req.body = buf.substr(head_end, length);
  while (req.body.size() < length) {
    pollfd p{fd_, POLLIN, 0};
    int left = ms_left(deadline);
    int r = left == 0 ? 0 : poll(&p, 1, left);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      return fail(err(408, "the request body did not arrive within " + std::to_string(limits_.read_timeout_ms) + " ms",
                      "request_timeout"));
    ssize_t n = recv(fd_, tmp, std::min(sizeof tmp, length - req.body.size()), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ReadResult::kClosed;
    req.body.append(tmp, size_t(n));
  }
  return ReadResult::kOk;
}

bool Connection::send_all(std::string_view data) {
  started_ = true;
  if (broken_) return false;
  while (!data.empty()) {
    ssize_t n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {  // EPIPE/ECONNRESET, or EAGAIN after SO_SNDTIMEO: the client is gone or stalled
      broken_ = true;
      return false;
    }
    data.remove_prefix(size_t(n));
  }
  return true;
}

std::string Connection::head(int status, std::string_view content_type, const std::vector<std::string>& extra,
                             std::string_view framing) {
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " + http_reason(status) + "\r\n";
  if (!content_type.empty()) h += "Content-Type: " + std::string(content_type) + "\r\n";
  for (const std::string& line : extra) h += line + "\r\n";
  h += framing;
  h += "Connection: close\r\n\r\n";
  return h;
}

bool Connection::send_response(int status, std::string_view content_type, std::string_view body,
                               const std::vector<std::string>& extra_headers) {
  std::string out = head(status, content_type, extra_headers, "Content-Length: " + std::to_string(body.size()) + "\r\n");
  out += body;
  return send_all(out);
}

bool Connection::begin_stream(int status, std::string_view content_type, const std::vector<std::string>& extra_headers) {
  chunked_ = minor_version_ >= 1;
  streaming_ = true;
  return send_all(head(status, content_type, extra_headers, chunked_ ? "Transfer-Encoding: chunked\r\n" : ""));
}

bool Connection::send_piece(std::string_view data) {
  if (data.empty()) return !broken_;  // an empty chunk would end the body
  if (!chunked_) return send_all(data);
  char size[32];
  int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string out(size, size_t(n));
  out += data;
  out += "\r\n";
  return send_all(out);
}

bool Connection::end_stream() { return chunked_ ? send_all("0\r\n\r\n") : !broken_; }

Connection::Wait Connection::wait(int wake_fd, int timeout_ms) {
  while (true) {
    // POLLIN is not asked for on the socket: pipelined bytes must not turn this into a busy loop;
    // POLLRDHUP (peer shut down its side), POLLHUP and POLLERR are what a disconnect looks like.
    pollfd p[2] = {{wake_fd, POLLIN, 0}, {fd_, POLLRDHUP, 0}};
    int r = poll(p, 2, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Wait::kPeerClosed;
    if (r == 0) return Wait::kTimeout;
    if (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return Wait::kPeerClosed;
    return Wait::kWake;
  }
}

bool Connection::peer_closed() {
  if (broken_) return true;
  pollfd p{fd_, POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

}  // namespace hlx::server
