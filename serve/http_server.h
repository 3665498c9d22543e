#pragma once
// zoo serve's HTTP front: an event-driven HTTP/1.1 server (Boost.Beast over Asio, kept inside
// http_server.cpp) that slow clients cannot stall. One I/O thread reads every connection's
// requests without blocking, under a deadline for a whole request (head and body, not per byte),
// and answers the cheap routes itself; the expensive ones (completions) run on a bounded pool of
// worker threads, and a request that finds every worker busy is refused at once (503) rather than
// queued behind slow ones. The number of connections is bounded: a newcomer at the bound takes
// the place of the longest-idle keep-alive connection, or is refused at once when none is idle.
//
// Why not a thread per connection (cpp-httplib, which zoo serve used before): thirty clients that
// send a header line every half second held every thread of its pool, and /health timed out.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zoo {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;          // as sent: "GET", "POST", ...
  std::string target;          // as sent, query included
  std::string path;            // the target without its query
  HttpHeaders headers;         // as sent, in order
  std::string body;            // decoded (a chunked body arrives whole)
  std::string remote_address;  // the client's numeric address
  // The value of the first header named `name` (case-insensitive); empty when there is none.
  std::string header(std::string_view name) const;
};

// The answer to one request, handed to its handler. Thread-safe: a heavy route's handler calls it
// from its worker thread, and every socket operation runs on the connection's own strand of the
// I/O thread while the worker waits. A request gets one answer: either respond(), or
// begin_stream(), write()... and end().
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  // A whole answer; false when the client is gone (or stopped reading past the write deadline).
  virtual bool respond(int status, std::string_view content_type, std::string body,
                       const HttpHeaders& extra_headers = {}) = 0;
  // A streamed answer in chunks (HTTP/1.1 chunked encoding; an HTTP/1.0 client gets the bytes
  // and the connection's end). Each call returns once its bytes are written, false when the
  // client is gone or did not take them within the write deadline: the stream is over then.
  // Only a heavy route may stream (a light one must not wait).
  virtual bool begin_stream(int status, std::string_view content_type, const HttpHeaders& extra_headers = {}) = 0;
  virtual bool write(std::string_view chunk) = 0;
  virtual bool end() = 0;
  // Whether the client has closed its side of the connection (seen by a read kept pending while
  // a heavy route computes its answer), a write failed, or the server stopped.
  virtual bool closed() const = 0;
};

enum class RouteKind {
  kLight,  // answered on the I/O thread: must not block (health, metrics, listings)
  kHeavy,  // runs on a worker thread; 503 at once when every worker is busy
};

struct HttpServerOptions {
  int64_t max_connections = 1000;    // open at once; see HttpServer for what a newcomer at the bound gets
  int64_t workers = 8;               // threads for heavy routes (a streamed answer holds one to its end)
  std::chrono::milliseconds request_timeout{30000};    // a whole request, head and body: 408 past it
  std::chrono::milliseconds keep_alive_timeout{5000};  // idle between requests, then closed
  std::chrono::milliseconds write_timeout{30000};      // each write; a client that stops reading is dropped
  int64_t max_body_bytes = 1 << 20;    // 413 beyond it (a chunked body as decoded)
  int64_t max_header_bytes = 16 << 10;  // request line and headers; 431 beyond it
  int listen_backlog = 511;             // as nginx's: clients that connect together are all queued
  // The body of the answers the server gives itself (400, 404, 405, 408, 413, 431, 500, 503),
  // given the status and a message; plain text when unset. zoo serve gives OpenAI's error object.
  std::function<std::string(int status, const std::string& message)> error_body;
  std::string error_content_type = "text/plain; charset=utf-8";
  // Asked first for every request, on the I/O thread: a guard that answers (zoo serve: a 401 for
  // a missing API key) ends the request there.
  std::function<void(const HttpRequest&, HttpExchange&)> guard;
  // Told the status of every request answered, the server's own refusals included (zoo serve
  // counts them for /metrics). Called from the I/O thread and from workers.
  std::function<void(const HttpRequest&, int status)> answered;
};

// What /metrics reports of the connections.
struct ConnectionCounts {
  int64_t open = 0;         // connections open now
  int64_t refused = 0;      // newcomers answered 503 at the bound (no idle connection to close)
  int64_t timed_out = 0;    // requests answered 408 (not whole within request_timeout)
  int64_t idle_closed = 0;  // idle keep-alive connections closed to make room for a newcomer
};

class HttpServer {
 public:
  using Handler = std::function<void(const HttpRequest&, HttpExchange&)>;

  explicit HttpServer(HttpServerOptions options);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Before start(). A path with routes but not for the request's method is a 405 (with Allow),
  // an unknown path a 404.
  void route(std::string method, std::string path, RouteKind kind, Handler handler);
  // Binds host:port (0: a free port), listens and starts the I/O and worker threads; returns the
  // port. Raises the process's soft limit of open files to its hard limit first, and lowers
  // max_connections to what fits (max_connections() says). Throws std::runtime_error naming the
  // address when it cannot be bound.
  int start(const std::string& host, int port);
  // Stops accepting, closes idle connections, lets exchanges in flight finish for up to `grace`,
  // then closes every connection (their handlers see closed() and failed writes) and joins every
  // thread it started. Idempotent.
  void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(0));

  int64_t max_connections() const;
  ConnectionCounts counts() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Raises this process's soft limit of open files (RLIMIT_NOFILE) to its hard limit and returns
// how many of `wanted` connections fit in it, each a descriptor, leaving `reserve` descriptors to
// the rest of the process (model files, pipes, the listening socket).
int64_t connections_within_open_file_limit(int64_t wanted, int64_t reserve = 64);

}  // namespace zoo
