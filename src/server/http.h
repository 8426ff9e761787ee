// A small HTTP/1.1 server-side connection over a POSIX socket: persistent connections
// (several requests in turn, pipelined ones included), strict limits, and peer-disconnect
// detection.
//
// Why our own instead of a library (cpp-httplib, Boost.Beast; docs/SERVER.md weighs them): the
// server must (a) enforce exact limits on the header block, the header count, the body size and
// the time a request may take to arrive, (b) notice a client that went away while its request is
// still queued or generating (poll() for POLLRDHUP on the socket together with the request's
// event fd), and (c) stream Server-Sent Events while the engine produces tokens, cancelling when a
// write fails. All three need direct access to the socket and the wait loop; that is ~500 lines
// here, with no new dependency.
//
// Grammar accepted (RFC 9112, strict subset): request line `METHOD SP target SP HTTP/1.x CRLF`,
// header lines `name: value CRLF` (token names, no obs-fold), empty line. A bare LF is accepted as
// a line end (RFC 9112 section 2.2 allows it) so such clients get an answer, not a read timeout.
// HTTP/1.1 requests need exactly one Host header (400 otherwise). POST bodies need Content-Length
// or `Transfer-Encoding: chunked` (any other transfer coding: 501; both headers, or chunked in an
// HTTP/1.0 request: 400, the framing is ambiguous). Chunk extensions and trailer fields are read
// and ignored. `Expect: 100-continue` is answered before the body is read (a Content-Length over
// the limit gets 413 at once instead). Responses to HTTP/1.1 clients may stream with chunked
// transfer coding; HTTP/1.0 clients get a close-delimited stream.
//
// Persistence (RFC 9112 section 9.3): an HTTP/1.1 request keeps the connection unless it says
// `Connection: close`; an HTTP/1.0 one only with `Connection: keep-alive`. The server may veto
// (set_keep_alive(false)) before it answers; the response then says `Connection: close`. A
// request that could not be read (any HttpError) and a close-delimited stream end the connection.
// Bytes past one request (pipelining) are kept for the next read_request().
//
// Threads: a Connection belongs to the one thread that handles it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hlx::server {

struct HttpLimits {
  size_t max_header_bytes = 16 * 1024;  // request line + headers + the empty line
  int max_headers = 64;
  size_t max_body_bytes = 32u << 20;
  int read_timeout_ms = 30'000;   // the whole request (headers and body) must arrive within this
  int write_timeout_ms = 30'000;  // a single write may wait this long for a client that stopped reading
};

struct HttpRequest {
  std::string method, target, path, query;
  int minor_version = 1;                                     // HTTP/1.<minor>
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, values trimmed
  std::string body;
  // The value of a header (first occurrence), or nullptr.
  const std::string* header(std::string_view lower_name) const;
};

// A request that could not be read: the status to answer with and why.
struct HttpError {
  int status = 400;
  std::string message;
  std::string code;  // OpenAI-style error code, e.g. "payload_too_large"
};

const char* http_reason(int status);

class Connection {
 public:
  Connection(int fd, HttpLimits limits);
  ~Connection();  // closes the socket (after a short lingering drain, see close())
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  enum class ReadResult { kOk, kClosed, kError };
  // Reads one request (its headers and body must arrive within limits.read_timeout_ms of this
  // call). kClosed: the peer closed (or timed out) before sending anything, nothing to answer.
  // kError: `error` says what to answer (the connection then closes after the answer).
  ReadResult read_request(HttpRequest& request, HttpError& error);
  // Between requests on a kept connection: waits up to `idle_ms` for the next request's first
  // byte. False: the peer closed, or the time passed (the caller closes the connection).
  bool wait_for_request(int idle_ms);

  // Whether the connection stays open after the current response: what the request asked for,
  // vetoed by set_keep_alive(false) (call before the response starts) or by a read error.
  bool keep_alive() const { return keep_alive_; }
  void set_keep_alive(bool keep) { keep_alive_ = keep_alive_ && keep; }
  // True once a whole response went out (send_response, or end_stream of a chunked stream).
  bool response_complete() const { return complete_; }

  // A complete response with Content-Length. `extra_headers` are full "Name: value" lines.
  bool send_response(int status, std::string_view content_type, std::string_view body,
                     const std::vector<std::string>& extra_headers = {});
  // Streaming: headers, then pieces (chunked for HTTP/1.1, raw for 1.0), then the end.
  bool begin_stream(int status, std::string_view content_type, const std::vector<std::string>& extra_headers = {});
  bool send_piece(std::string_view data);
  bool end_stream();

  // Waits until `wake_fd` is readable, the peer closes/resets, or `timeout_ms` passes (-1 = no
  // limit). Bytes the client sends meanwhile (pipelining) are left unread.
  enum class Wait { kWake, kPeerClosed, kTimeout };
  Wait wait(int wake_fd, int timeout_ms);
  // True when the peer has closed or reset the connection (non-blocking check).
  bool peer_closed();

  bool broken() const { return broken_; }             // a write failed or timed out
  bool response_started() const { return started_; }  // some response bytes were sent (or tried)
  bool streaming() const { return streaming_; }       // begin_stream() was called

 private:
  enum class Fill { kOk, kClosed, kTimeout };
  Fill fill(std::chrono::steady_clock::time_point deadline);  // appends what arrives to in_
  ReadResult read_chunked(std::string& body, size_t pos, std::chrono::steady_clock::time_point deadline,
                          HttpError& error);
  bool send_all(std::string_view data);
  std::string head(int status, std::string_view content_type, const std::vector<std::string>& extra,
                   std::string_view framing);

  int fd_;
  HttpLimits limits_;
  int minor_version_ = 1;
  bool chunked_ = false;
  bool broken_ = false;
  bool started_ = false;
  bool streaming_ = false;
  bool unread_body_ = false;  // the client may still be sending a body we refused
  bool keep_alive_ = false;
  bool complete_ = false;
  std::string in_;  // received and not yet consumed (the rest of a pipelined sequence)
};

}  // namespace hlx::server
