// libFuzzer target: arbitrary bytes as what a client sends on a connection, read by the server's
// HTTP/1.1 reader (server/http.h) over a socketpair whose client side then shuts down. Requests
// are read in turn as on a kept connection (pipelining, chunked bodies) until one fails, asks to
// close, or the bytes run out. The reader must come back (no hang: the peer's EOF ends every
// read), an accepted request must respect the limits and have exactly one framing, an error must
// carry a 4xx/5xx status and a message and end the connection.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/http.h"

using namespace hlx::server;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 0;
  // run.sh caps inputs at 4096 bytes, well inside a socket buffer: the write never blocks.
  size_t off = 0;
  while (off < size) {
    ssize_t n = write(sv[1], data + off, size - off);
    if (n <= 0) break;
    off += size_t(n);
  }
  shutdown(sv[1], SHUT_WR);
  HttpLimits limits;
  limits.max_header_bytes = 1024;
  limits.max_headers = 16;
  limits.max_body_bytes = 2048;
  limits.read_timeout_ms = 1000;
  limits.write_timeout_ms = 1000;
  {
    Connection c(sv[0], limits);  // owns and closes sv[0]
    for (int i = 0; i < 16; ++i) {
      if (i > 0 && !c.wait_for_request(0)) break;
      HttpRequest req;
      HttpError err;
      Connection::ReadResult r = c.read_request(req, err);
      if (r == Connection::ReadResult::kOk) {
        if (req.body.size() > limits.max_body_bytes || int(req.headers.size()) > limits.max_headers) std::abort();
        if (req.path.empty() || req.path[0] != '/') std::abort();
        if (req.minor_version == 1 && !req.header("host")) std::abort();
        const bool te = req.header("transfer-encoding"), cl = req.header("content-length");
        if (te && cl) std::abort();  // one framing only (no smuggling)
        if (req.method == "POST" && !te && !cl) std::abort();
        if (te && req.minor_version == 0) std::abort();
        // The answer ends cleanly: the connection may carry another request unless it said close.
        if (!c.send_response(200, "application/json", "{}") || !c.response_complete()) break;
        if (!c.keep_alive()) break;
      } else {
        if (r == Connection::ReadResult::kError) {
          if (err.status < 400 || err.status > 599 || err.message.empty() || !http_reason(err.status)) std::abort();
          if (c.keep_alive()) std::abort();  // a request that could not be read ends the connection
          c.send_response(err.status, "application/json", "{}");
        }
        break;
      }
    }
  }
  close(sv[1]);
  return 0;
}
