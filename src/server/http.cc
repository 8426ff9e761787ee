#include "server/http.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/clock.h"

namespace hlx::server {
namespace {

using Clock = std::chrono::steady_clock;

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
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos ||
      line.find(' ', sp2 + 1) != std::string_view::npos)
    return err(400, "malformed request line (expected 'METHOD /path HTTP/1.1')");
  std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                   version = line.substr(sp2 + 1);
  if (method.empty()) return err(400, "empty request method");
  for (char c : method)
    if (!is_tchar(c)) return err(400, "malformed request method");
  if (target.empty() || target[0] != '/') return err(400, "request target must be an absolute path ('/...')");
  for (char c : target)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return err(400, "control character in the request target");
  if (version == "HTTP/1.1")
    req.minor_version = 1;
  else if (version == "HTTP/1.0")
    req.minor_version = 0;
  else
    return err(505, "unsupported protocol version '" + std::string(version.substr(0, 16)) + "' (HTTP/1.0 or 1.1)");
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
    if (colon == std::string_view::npos || colon == 0)
      return err(400, "malformed header line (expected 'Name: value')");
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
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 415:
      return "Unsupported Media Type";
    case 417:
      return "Expectation Failed";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
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

Connection::Fill Connection::fill(Clock::time_point deadline) {
  char tmp[16384];
  while (true) {
    pollfd p{fd_, POLLIN, 0};
    int left = ms_left(deadline);
    int r = left == 0 ? 0 : poll(&p, 1, left);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return Fill::kTimeout;
    ssize_t n = recv(fd_, tmp, sizeof tmp, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Fill::kClosed;
    in_.append(tmp, size_t(n));
    return Fill::kOk;
  }
}

bool Connection::wait_for_request(int idle_ms) {
  if (!in_.empty()) return true;  // pipelined: the next request is here already
  return fill(Clock::now() + std::chrono::milliseconds(idle_ms)) == Fill::kOk;
}

// True when a comma-separated header value (all occurrences) lists `token` (case-insensitive).
static bool lists_token(const HttpRequest& req, std::string_view name, std::string_view token) {
  for (const auto& [k, v] : req.headers) {
    if (k != name) continue;
    std::string_view rest = v;
    while (!rest.empty()) {
      size_t comma = rest.find(',');
      if (lower(trim(rest.substr(0, comma))) == token) return true;
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
  }
  return false;
}

Connection::ReadResult Connection::read_request(HttpRequest& req, HttpError& error) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(limits_.read_timeout_ms);
  started_ = streaming_ = chunked_ = complete_ = false;
  keep_alive_ = false;                               // until a request was read whole
  size_t head_end = std::string::npos, scanned = 0;  // head_end: first byte after the empty line
  auto fail = [&](HttpError e) {
    error = std::move(e);
    keep_alive_ = false;  // the framing of what follows is unknown: answer, then close
    unread_body_ = true;  // whatever the client is still sending is drained before closing
    return ReadResult::kError;
  };
  auto timeout = [&](const char* what) {
    return fail(err(408,
                    std::string("the request ") + what + " did not arrive within " +
                        std::to_string(limits_.read_timeout_ms) + " ms",
                    "request_timeout"));
  };
  // Header block.
  while (true) {
    head_end = find_head_end(in_, scanned >= 3 ? scanned - 3 : 0);
    scanned = in_.size();
    if (head_end != std::string::npos) break;
    if (in_.size() >= limits_.max_header_bytes)
      return fail(err(431, "request header block exceeds " + std::to_string(limits_.max_header_bytes) + " bytes",
                      "header_too_large"));
    Fill f = fill(deadline);
    if (f == Fill::kClosed) return ReadResult::kClosed;
    if (f == Fill::kTimeout) {
      if (in_.empty()) return ReadResult::kClosed;
      // No body was refused, so nothing is drained before closing: a slow client gains nothing
      // from it, and a probe connection draining for 2 s held its slot, so under a flood of
      // idle connections every probe slot could be draining and /health was refused.
      const ReadResult r = timeout("headers");
      unread_body_ = false;
      return r;
    }
  }
  if (head_end > limits_.max_header_bytes)
    return fail(err(431, "request header block exceeds " + std::to_string(limits_.max_header_bytes) + " bytes",
                    "header_too_large"));
  HttpError e = parse_head(std::string_view(in_).substr(0, head_end), limits_, req);
  minor_version_ = req.minor_version;
  if (e.status != 0) return fail(std::move(e));

  // Framing: Content-Length, or chunked transfer coding (RFC 9112 section 6).
  const bool has_te = req.header("transfer-encoding") != nullptr;
  bool chunked = false;
  if (has_te) {
    std::string codings;
    for (const auto& [k, v] : req.headers)
      if (k == "transfer-encoding") codings += (codings.empty() ? "" : ",") + v;
    if (lower(trim(codings)) != "chunked")
      return fail(err(501, "Transfer-Encoding '" + codings.substr(0, 32) + "' is not supported (only 'chunked')",
                      "unsupported_transfer_encoding"));
    if (req.minor_version == 0) return fail(err(400, "Transfer-Encoding in an HTTP/1.0 request"));
    chunked = true;
  }
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
  // Both framings at once is how requests are smuggled past a proxy (RFC 9112 section 6.3).
  if (chunked && has_length) return fail(err(400, "both Transfer-Encoding and Content-Length"));
  // RFC 9112 section 3.2: an HTTP/1.1 request without exactly one Host header is a 400.
  if (req.minor_version == 1) {
    int hosts = 0;
    for (const auto& kv : req.headers) hosts += kv.first == "host";
    if (hosts != 1)
      return fail(err(400, hosts == 0 ? "an HTTP/1.1 request needs a Host header" : "more than one Host header",
                      "invalid_host"));
  }
  // Only POST routes take a body; other methods without a framing header have none (and are
  // answered 404/405 by the router rather than 411).
  if (req.method == "POST" && !has_length && !chunked)
    return fail(
        err(411, "a request body needs a Content-Length header (or Transfer-Encoding: chunked)", "length_required"));
  if (length > limits_.max_body_bytes)
    return fail(err(413,
                    "request body of " + std::to_string(length) + " bytes exceeds the limit of " +
                        std::to_string(limits_.max_body_bytes) + " bytes",
                    "payload_too_large"));
  if (const std::string* expect = req.header("expect")) {
    if (lower(*expect) != "100-continue") return fail(err(417, "unsupported Expect: '" + expect->substr(0, 32) + "'"));
    const bool body_pending = chunked ? in_.size() == head_end : in_.size() - head_end < length;
    if (req.minor_version == 1 && (length > 0 || chunked) && body_pending) {
      std::string cont = "HTTP/1.1 100 Continue\r\n\r\n";
      if (!send_all(cont)) return ReadResult::kClosed;
      started_ = false;  // an interim response: the final one is still to come
    }
  }
  keep_alive_ =
      req.minor_version == 1 ? !lists_token(req, "connection", "close") : lists_token(req, "connection", "keep-alive");
  // Body.
  if (chunked) {
    ReadResult r = read_chunked(req.body, head_end, deadline, error);
    if (r != ReadResult::kOk) keep_alive_ = false;
    if (r == ReadResult::kError) unread_body_ = true;
    return r;
  }
  while (in_.size() - head_end < length) {
    Fill f = fill(deadline);
    if (f == Fill::kClosed) return ReadResult::kClosed;
    if (f == Fill::kTimeout) return timeout("body");
  }
  req.body = in_.substr(head_end, length);
  in_.erase(0, head_end + length);  // what is left belongs to the next request
  return ReadResult::kOk;
}

// The chunked body that starts at in_[pos] (RFC 9112 section 7.1): `size-in-hex[;ext] CRLF data
// CRLF`, ..., `0 CRLF`, trailer lines, empty line. Consumed bytes are dropped from in_ as it goes,
// so the buffer holds at most one chunk plus one read.
Connection::ReadResult Connection::read_chunked(std::string& body, size_t pos, Clock::time_point deadline,
                                                HttpError& error) {
  constexpr size_t kMaxLine = 1024;  // a chunk-size line with its extensions
  auto bad = [&](std::string message, int status = 400, std::string code = "") {
    error = err(status, std::move(message), std::move(code));
    return ReadResult::kError;
  };
  // Makes in_ hold a whole line from `pos` (returns its end), or says why not.
  ReadResult why = ReadResult::kOk;
  auto line_end = [&](size_t limit) -> size_t {
    size_t eol;
    while ((eol = in_.find('\n', pos)) == std::string::npos) {
      if (in_.size() - pos > limit) {
        why = bad("a chunk-size or trailer line is longer than " + std::to_string(limit) + " bytes");
        return eol;
      }
      Fill f = fill(deadline);
      if (f != Fill::kOk) {
        why = f == Fill::kClosed ? ReadResult::kClosed
                                 : bad("the chunked request body did not arrive within " +
                                           std::to_string(limits_.read_timeout_ms) + " ms",
                                       408, "request_timeout");
        return std::string::npos;
      }
    }
    if (eol - pos > limit) {
      why = bad("a chunk-size or trailer line is longer than " + std::to_string(limit) + " bytes");
      return std::string::npos;
    }
    return eol;
  };
  auto need = [&](size_t bytes) -> ReadResult {  // in_ holds `bytes` from pos
    while (in_.size() - pos < bytes) {
      Fill f = fill(deadline);
      if (f == Fill::kClosed) return ReadResult::kClosed;
      if (f == Fill::kTimeout)
        return bad("the chunked request body did not arrive within " + std::to_string(limits_.read_timeout_ms) + " ms",
                   408, "request_timeout");
    }
    return ReadResult::kOk;
  };
  while (true) {
    in_.erase(0, pos);
    pos = 0;
    size_t eol = line_end(kMaxLine);
    if (eol == std::string::npos) return why;
    std::string_view line(in_.data() + pos, eol - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::string_view hex = line.substr(0, line.find(';'));  // chunk extensions are ignored
    hex = trim(hex);
    if (hex.empty() || hex.size() > 15 || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string_view::npos)
      return bad("malformed chunk size '" + std::string(line.substr(0, 32)) + "'");
    const size_t size = std::stoull(std::string(hex), nullptr, 16);
    pos = eol + 1;
    if (size == 0) break;
    if (size > limits_.max_body_bytes - body.size())
      return bad("chunked request body exceeds the limit of " + std::to_string(limits_.max_body_bytes) + " bytes", 413,
                 "payload_too_large");
    if (ReadResult r = need(size + 1); r != ReadResult::kOk) return r;
    body.append(in_, pos, size);
    pos += size;
    if (in_[pos] == '\r') {
      if (ReadResult r = need(2); r != ReadResult::kOk) return r;
      ++pos;
    }
    if (in_[pos] != '\n') return bad("chunk data is not followed by CRLF (wrong chunk size?)");
    ++pos;
  }
  // Trailer section: header lines (ignored) up to an empty line, within the header limit.
  size_t trailer_bytes = 0;
  while (true) {
    size_t eol = line_end(kMaxLine);
    if (eol == std::string::npos) return why;
    const size_t len = eol - pos - (eol > pos && in_[eol - 1] == '\r');
    trailer_bytes += eol + 1 - pos;
    pos = eol + 1;
    if (len == 0) break;
    if (trailer_bytes > limits_.max_header_bytes)
      return bad("chunked trailer section exceeds " + std::to_string(limits_.max_header_bytes) + " bytes", 431,
                 "header_too_large");
  }
  in_.erase(0, pos);  // what is left belongs to the next request
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
  // HTTP/1.1 persists by default; an HTTP/1.0 client that asked to keep the connection is told.
  if (!keep_alive_)
    h += "Connection: close\r\n";
  else if (minor_version_ == 0)
    h += "Connection: keep-alive\r\n";
  h += "\r\n";
  return h;
}

bool Connection::send_response(int status, std::string_view content_type, std::string_view body,
                               const std::vector<std::string>& extra_headers) {
  std::string out =
      head(status, content_type, extra_headers, "Content-Length: " + std::to_string(body.size()) + "\r\n");
  out += body;
  complete_ = send_all(out);
  return complete_;
}

bool Connection::begin_stream(int status, std::string_view content_type,
                              const std::vector<std::string>& extra_headers) {
  chunked_ = minor_version_ >= 1;
  streaming_ = true;
  if (!chunked_) keep_alive_ = false;  // the body ends where the connection does
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

bool Connection::end_stream() {
  complete_ = chunked_ ? send_all("0\r\n\r\n") : !broken_;
  return complete_;
}

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
