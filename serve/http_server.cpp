#include "serve/http_server.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include <sys/resource.h>

// The only file that includes Boost: Asio and Beast are header-only and heavy to compile.
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace zoo {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;
using Clock = std::chrono::steady_clock;
// Every socket and timer of a connection runs its handlers on the connection's strand, so that
// none of them needs a lock however many threads run the I/O context.
using Strand = net::strand<net::io_context::executor_type>;
using Socket = net::basic_stream_socket<tcp, Strand>;
using Timer = net::basic_waitable_timer<Clock, net::wait_traits<Clock>, Strand>;

constexpr size_t kReadChunk = 4096;
// Newcomers being answered 503 at the bound at once; past it they are closed unanswered, so that
// a flood of connections cannot make the refusals themselves exhaust the descriptors.
constexpr int64_t kMaxRefusing = 32;
// The I/O thread's own descriptors, the workers' and the rest of the process (model files, pipes).
constexpr int64_t kReservedDescriptors = 64 + kMaxRefusing;

// A connection's idle_since: the moment it became idle (no byte of a request received), or one
// of these. Only an idle (or closing) connection may be closed to make room for a newcomer.
constexpr int64_t kBusy = 0;
constexpr int64_t kEvicted = -1;
constexpr int64_t kClosing = 1;  // answered for the last time; oldest of all, closed first

int64_t idle_stamp() {
  return kClosing + 1 + std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

std::string seconds_text(std::chrono::milliseconds d) {
  std::ostringstream out;
  out << static_cast<double>(d.count()) / 1000.0;  // "30", "0.5"
  return out.str();
}

std::string text(beast::string_view s) { return std::string(s.data(), s.size()); }

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string reason_phrase(int status) {
  if (status == 499) return "Client Closed Request";  // nginx's name for it
  const auto known = http::int_to_status(static_cast<unsigned>(status));
  if (known == http::status::unknown) return "Unknown";
  const auto reason = http::obsolete_reason(known);
  return std::string(reason.data(), reason.size());
}

// A header line the handler asked for, unless it could split the response (CR or LF) or has no name.
bool safe_header(const std::string& name, const std::string& value) {
  const auto breaks = [](const std::string& s) { return s.find_first_of("\r\n") != std::string::npos; };
  return !name.empty() && name.find(':') == std::string::npos && !breaks(name) && !breaks(value);
}

// The status line and headers of a response. `framing` is its Content-Length or
// Transfer-Encoding line (empty for an HTTP/1.0 stream, which the connection's end delimits).
std::string response_head(int status, std::string_view content_type, const std::string& framing,
                          const HttpHeaders& extra, bool keep_alive, bool http10) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n";
  if (!content_type.empty() && std::string(content_type).find_first_of("\r\n") == std::string::npos) {
    out.append("Content-Type: ").append(content_type).append("\r\n");
  }
  if (!framing.empty()) out += framing + "\r\n";
  for (const auto& [name, value] : extra) {
    if (safe_header(name, value)) out += name + ": " + value + "\r\n";
  }
  if (!keep_alive) {
    out += "Connection: close\r\n";
  } else if (http10) {
    out += "Connection: keep-alive\r\n";
  }
  return out + "\r\n";
}

std::string chunk_of(std::string_view bytes) {
  char size[20];
  const int n = std::snprintf(size, sizeof size, "%zx\r\n", bytes.size());
  std::string out(size, static_cast<size_t>(n));
  out.append(bytes).append("\r\n");
  return out;
}

// Threads for the heavy routes. A task is taken only while a worker is free to run it now: with
// every worker busy, try_run refuses rather than queueing (the request is answered 503 at once).
class WorkerPool {
 public:
  explicit WorkerPool(int64_t threads) : free_(threads) {
    for (int64_t i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
  }
  ~WorkerPool() { join(); }

  bool try_run(std::function<void()> task) {
    std::lock_guard lock(mutex_);
    if (free_ == 0 || stopping_) return false;
    --free_;
    tasks_.push_back(std::move(task));
    wake_.notify_one();
    return true;
  }

  int64_t busy() const {
    std::lock_guard lock(mutex_);
    return static_cast<int64_t>(threads_.size()) - free_;
  }

  // Runs what was taken, then joins every thread.
  void join() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      auto task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      task = nullptr;  // what it holds (a connection) is released before the worker counts as free
      lock.lock();
      ++free_;
    }
  }

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_;
  int64_t free_;
  bool stopping_ = false;
};

struct Route {
  std::string method, path;
  RouteKind kind;
  HttpServer::Handler handler;
};

class Session;

// What the connections share with the server. Each connection holds it, so it outlives the last
// of them (the I/O context destroys the handlers it still holds, and their connections, when it
// is destroyed itself).
struct Shared {
  HttpServerOptions options;
  std::vector<Route> routes;
  std::unique_ptr<WorkerPool> workers;
  int64_t max_connections = 0;
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> slots{0};     // connections holding a place under max_connections
  std::atomic<int64_t> refusing{0};  // newcomers being answered 503
  std::atomic<int64_t> refused{0}, timed_out{0}, idle_closed{0};
  std::mutex sessions_mutex;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;

  std::string error_body(int status, const std::string& message) const {
    return options.error_body ? options.error_body(status, message) : message + "\n";
  }
};

class Exchange;

// One connection: its requests read one after the other (a pipelined one waits in the buffer
// until the one before is answered, so answers go out in order), each answered by the I/O thread
// or handed to a worker.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(std::shared_ptr<Shared> shared, Socket socket, bool holds_slot)
      : shared_(std::move(shared)),
        socket_(std::move(socket)),
        deadline_(socket_.get_executor()),
        write_deadline_(socket_.get_executor()),
        holds_slot_(holds_slot),
        accepted_(Clock::now()) {
    error_code ignored;
    socket_.set_option(tcp::no_delay(true), ignored);  // a streamed event goes out when written
    const auto peer = socket_.remote_endpoint(ignored);
    if (!ignored) remote_address_ = peer.address().to_string();
  }

  ~Session() {
    {
      std::lock_guard lock(shared_->sessions_mutex);
      shared_->sessions.erase(this);
    }
    if (!holds_slot_) {
      --shared_->refusing;
    } else if (idle_since_.load() != kEvicted) {  // an evicted connection's place went to its newcomer
      --shared_->slots;
    }
  }

  Strand strand() { return socket_.get_executor(); }
  bool holds_slot() const { return holds_slot_; }
  std::atomic<int64_t>& idle_since() { return idle_since_; }
  bool closed() const { return closed_; }

  // The rest runs on the connection's strand.
  void start() { wait_for_request(); }

  // A newcomer at the bound with no idle connection to replace: told so at once.
  void refuse() {
    const std::string body = shared_->error_body(
        503, "the server holds its maximum of " + std::to_string(shared_->max_connections) +
                 " connections and none is idle; retry later");
    send(response_head(503, shared_->options.error_content_type, "Content-Length: " + std::to_string(body.size()),
                       {{"Retry-After", "1"}}, false, false) +
             body,
         [self = shared_from_this()](bool ok) { ok ? self->close_gracefully() : self->close_now(); });
  }

  void close_now() {
    closed_ = true;
    ++deadline_generation_;
    ++write_generation_;
    deadline_.cancel();
    write_deadline_.cancel();
    if (socket_.is_open()) {
      error_code ignored;
      socket_.close(ignored);
    }
  }

  // Writes `bytes` under the write deadline; then `then(ok)`, on the strand. One write at a time
  // (an exchange waits for each before the next).
  void send(std::string bytes, std::function<void(bool)> then) {
    out_ = std::move(bytes);
    const uint64_t generation = ++write_generation_;
    write_deadline_.expires_after(shared_->options.write_timeout);
    write_deadline_.async_wait([self = shared_from_this(), generation](error_code ec) {
      if (!ec && generation == self->write_generation_) self->close_now();  // the client stopped reading
    });
    net::async_write(socket_, net::buffer(out_), [self = shared_from_this(), then = std::move(then)](error_code ec, size_t) {
      ++self->write_generation_;
      self->write_deadline_.cancel();
      if (ec) self->close_now();
      then(!ec);
    });
  }

  // After the last byte of an answer: the next request, or the end of the connection.
  void after_answer(bool ok, bool keep_alive) {
    stop_watching([self = shared_from_this(), ok, keep_alive] {
      if (!ok || self->closed_ || !self->socket_.is_open()) {
        self->close_now();
      } else if (!keep_alive || self->shared_->stopping) {
        self->close_gracefully();
      } else {
        self->wait_for_request();
      }
    });
  }

  // The end of a connection whose client may still be sending (a body refused with 413, a
  // request cut by 408): stop writing, and read and drop what comes until the client closes or a
  // short while passes. Closing at once with unread bytes would send a reset, which can destroy
  // the answer before the client reads it.
  void close_gracefully() {
    if (holds_slot_) idle_since_ = kClosing;
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    arm(Clock::now() + std::min<std::chrono::milliseconds>(shared_->options.request_timeout, std::chrono::seconds(2)),
        Deadline::kLinger);
    drain();
  }

 private:
  enum class Deadline { kIdle, kRequest, kLinger };

  void arm(Clock::time_point when, Deadline kind) {
    const uint64_t generation = ++deadline_generation_;
    deadline_.expires_at(when);
    deadline_.async_wait([self = shared_from_this(), generation, kind](error_code ec) {
      if (!ec && generation == self->deadline_generation_) self->on_deadline(kind);
    });
  }

  void disarm() {
    ++deadline_generation_;
    deadline_.cancel();
  }

  void on_deadline(Deadline kind) {
    switch (kind) {
      case Deadline::kIdle:  // an idle keep-alive connection, or a new one that never wrote
      case Deadline::kLinger:
        close_now();
        return;
      case Deadline::kRequest: {  // the read in progress ends; its handler answers 408
        timed_out_ = true;
        error_code ignored;
        socket_.cancel(ignored);
        return;
      }
    }
  }

  // Waits, idle, for the first byte of the next request: a new connection within the request
  // timeout (its whole first request has that long from the accept), a kept-alive one within the
  // keep-alive timeout.
  void wait_for_request() {
    if (!socket_.is_open()) return;
    if (buffer_.size() > 0) {  // pipelined: already here
      begin_request(Clock::now());
      return;
    }
    idle_since_ = idle_stamp();
    arm(fresh_ ? accepted_ + shared_->options.request_timeout : Clock::now() + shared_->options.keep_alive_timeout,
        Deadline::kIdle);
    socket_.async_read_some(buffer_.prepare(kReadChunk), [self = shared_from_this()](error_code ec, size_t n) {
      self->buffer_.commit(n);
      // Eviction (by the acceptor, on its thread) and these bytes race for the connection: the
      // exchange of idle_since decides.
      int64_t idle = self->idle_since_.load();
      if (ec || idle <= kBusy || !self->idle_since_.compare_exchange_strong(idle, kBusy)) {
        self->close_now();
        return;
      }
      self->begin_request(self->fresh_ ? self->accepted_ : Clock::now());
    });
  }

  // One deadline for the whole request, head and body, from its first byte: a client trickling
  // a byte at a time does not extend it.
  void begin_request(Clock::time_point start) {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(std::min<int64_t>(shared_->options.max_header_bytes, UINT32_MAX)));
    parser_->body_limit(static_cast<uint64_t>(shared_->options.max_body_bytes));
    timed_out_ = false;
    arm(start + shared_->options.request_timeout, Deadline::kRequest);
    http::async_read_header(socket_, buffer_, *parser_, [self = shared_from_this()](error_code ec, size_t) {
      if (self->timed_out_) return self->answer_timeout();
      if (ec) return self->refuse_request(ec);
      if (self->parser_->is_done()) return self->dispatch();
      const auto& head = self->parser_->get();
      if (head.version() >= 11 && iequal(text(head[http::field::expect]), "100-continue")) {
        // The client waits for this before it sends the body (curl does for large ones).
        self->send("HTTP/1.1 100 Continue\r\n\r\n", [self](bool ok) {
          if (self->timed_out_) return self->answer_timeout();
          if (ok) self->read_body();
        });
        return;
      }
      self->read_body();
    });
  }

  void read_body() {
    http::async_read(socket_, buffer_, *parser_, [self = shared_from_this()](error_code ec, size_t) {
      if (self->timed_out_) return self->answer_timeout();
      if (ec) return self->refuse_request(ec);
      self->dispatch();
    });
  }

  void answer_timeout() {
    ++shared_->timed_out;
    answer_error(408, "the request was not complete within " + seconds_text(shared_->options.request_timeout) + " s");
  }

  // A request that could not be read: what the parser says, or nothing to a client that went away.
  void refuse_request(error_code ec) {
    if (ec == http::error::header_limit) {
      answer_error(431, "the request's line and headers are larger than " +
                            std::to_string(shared_->options.max_header_bytes) + " bytes");
    } else if (ec == http::error::body_limit) {
      answer_error(413, "request body too large: the limit is " + std::to_string(shared_->options.max_body_bytes) +
                            " bytes");
    } else if (ec.category() == http::make_error_code(http::error::bad_method).category() &&
               ec != http::error::end_of_stream && ec != http::error::partial_message) {
      answer_error(400, "malformed HTTP request: " + ec.message());
    } else {
      close_now();  // the client closed or reset the connection, or the server closed it
    }
  }

  // What is known of a request that could not be read whole: for the request log.
  HttpRequest partial_request() const {
    HttpRequest r;
    r.remote_address = remote_address_;
    if (parser_ && parser_->is_header_done()) {
      const auto& head = parser_->get();
      r.method = text(head.method_string());
      r.target = text(head.target());
      r.path = r.target.substr(0, r.target.find('?'));
    }
    return r;
  }

  // The server's own answer to a request it could not read; the connection ends after it.
  void answer_error(int status, const std::string& message) {
    disarm();
    if (shared_->options.answered) shared_->options.answered(partial_request(), status);
    parser_.reset();
    const std::string body = shared_->error_body(status, message);
    send(response_head(status, shared_->options.error_content_type, "Content-Length: " + std::to_string(body.size()),
                       {}, false, false) +
             body,
         [self = shared_from_this()](bool ok) { self->after_answer(ok, false); });
  }

  void dispatch();

  // While a worker computes an answer, a read stays pending so that a client that closes is seen
  // at once (closed()). What it reads (a pipelined request) waits in the buffer, up to a bound.
  void watch() {
    if (watching_ || !socket_.is_open() ||
        buffer_.size() >= static_cast<size_t>(shared_->options.max_header_bytes) + kReadChunk) {
      return;
    }
    watching_ = true;
    socket_.async_read_some(buffer_.prepare(kReadChunk), [self = shared_from_this()](error_code ec, size_t n) {
      self->watching_ = false;
      self->buffer_.commit(n);
      if (ec && ec != net::error::operation_aborted) self->closed_ = true;  // the end of the stream, or a reset
      if (self->after_watch_) {
        auto next = std::move(self->after_watch_);
        self->after_watch_ = nullptr;
        next();
      } else if (!ec) {
        self->watch();
      }
    });
  }

  void stop_watching(std::function<void()> next) {
    if (!watching_) return next();
    after_watch_ = std::move(next);
    error_code ignored;
    socket_.cancel(ignored);  // nothing else is pending: the answer's last write has completed
  }

  void drain() {
    buffer_.consume(buffer_.size());
    socket_.async_read_some(buffer_.prepare(kReadChunk), [self = shared_from_this()](error_code ec, size_t n) {
      if (ec) return self->close_now();
      self->buffer_.commit(n);
      self->drain();
    });
  }

  std::shared_ptr<Shared> shared_;
  Socket socket_;
  Timer deadline_;        // idle, request or lingering, as `arm` was last told
  Timer write_deadline_;  // the write in progress
  uint64_t deadline_generation_ = 0, write_generation_ = 0;  // a timer's handler of an earlier arming does nothing
  const bool holds_slot_;  // false for a newcomer that is refused
  const Clock::time_point accepted_;
  std::string remote_address_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string out_;  // the write in progress
  bool fresh_ = true;  // no request answered on this connection yet
  bool timed_out_ = false;
  bool watching_ = false;
  std::function<void()> after_watch_;
  std::atomic<bool> closed_{false};
  std::atomic<int64_t> idle_since_{kBusy};

  friend class Exchange;
};

// The answer to one request. A light route's handler runs on the connection's strand and its
// answer is written from there; a heavy route's runs on a worker, which posts each write to the
// strand and waits for it.
class Exchange final : public HttpExchange {
 public:
  Exchange(std::shared_ptr<Session> session, HttpRequest request, bool head, bool http10, bool keep_alive)
      : session_(std::move(session)), request_(std::move(request)), head_(head), http10_(http10), keep_alive_(keep_alive) {}

  const HttpRequest& request() const { return request_; }
  bool answered() const {
    std::lock_guard lock(mutex_);
    return state_ != State::kNone;
  }
  void set_on_worker(bool on_worker) { on_worker_ = on_worker; }

  bool respond(int status, std::string_view content_type, std::string body, const HttpHeaders& extra_headers) override {
    begin(State::kDone, "respond");
    if (session_->shared_->options.answered) session_->shared_->options.answered(request_, status);
    const std::string framing = "Content-Length: " + std::to_string(body.size());
    std::string bytes = response_head(status, content_type, framing, extra_headers, keep_alive(), http10_);
    if (!head_) bytes += body;  // a HEAD request is told the length of what it did not ask for
    return deliver(std::move(bytes), true);
  }

  bool respond_error(int status, const std::string& message, const HttpHeaders& extra_headers = {}) {
    return respond(status, session_->shared_->options.error_content_type, session_->shared_->error_body(status, message),
                   extra_headers);
  }

  bool begin_stream(int status, std::string_view content_type, const HttpHeaders& extra_headers) override {
    if (!on_worker_) throw std::logic_error("begin_stream: a light route cannot stream (it would block the I/O thread)");
    begin(State::kStreaming, "begin_stream");
    if (session_->shared_->options.answered) session_->shared_->options.answered(request_, status);
    if (http10_) keep_alive_ = false;  // HTTP/1.0 has no chunks: the connection's end ends the stream
    return deliver(response_head(status, content_type, http10_ ? "" : "Transfer-Encoding: chunked", extra_headers,
                                 keep_alive(), http10_),
                   false);
  }

  bool write(std::string_view chunk) override {
    expect_streaming("write");
    if (failed_) return false;
    if (chunk.empty() || head_) return true;  // an empty chunk would end the stream
    return deliver(http10_ ? std::string(chunk) : chunk_of(chunk), false);
  }

  bool end() override {
    expect_streaming("end");
    {
      std::lock_guard lock(mutex_);
      state_ = State::kDone;
    }
    if (failed_) return false;
    return deliver(http10_ || head_ ? "" : "0\r\n\r\n", true);
  }

  bool closed() const override { return failed_ || session_->closed(); }

  // After the handler returned: a request it left unanswered gets a 500; a stream it left open
  // ends with the connection (its client sees it cut short).
  void finish(const std::string& why) {
    State state;
    {
      std::lock_guard lock(mutex_);
      state = state_;
    }
    switch (state) {
      case State::kNone:
        respond_error(500, why);
        return;
      case State::kStreaming:
        if (on_worker_) {
          net::post(session_->strand(), [s = session_] { s->close_now(); });
        } else {
          session_->close_now();
        }
        return;
      case State::kDone:
        return;
    }
  }

 private:
  enum class State { kNone, kStreaming, kDone };

  void begin(State next, const char* what) {
    std::lock_guard lock(mutex_);
    if (state_ != State::kNone) throw std::logic_error(std::string(what) + ": the request was answered already");
    state_ = next;
  }

  void expect_streaming(const char* what) const {
    std::lock_guard lock(mutex_);
    if (state_ != State::kStreaming) throw std::logic_error(std::string(what) + ": no stream in progress");
  }

  bool keep_alive() const { return keep_alive_ && !session_->shared_->stopping; }

  // Writes `bytes`; the `last` of an answer moves the connection on to its next request.
  bool deliver(std::string bytes, bool last) {
    const bool keep_alive = this->keep_alive();
    if (!on_worker_) {  // on the strand already; the write completes after the handler returns
      session_->send(std::move(bytes), [s = session_, last, keep_alive](bool ok) {
        if (last) s->after_answer(ok, keep_alive);
      });
      return true;
    }
    auto written = std::make_shared<std::promise<bool>>();
    auto result = written->get_future();
    net::post(session_->strand(), [s = session_, bytes = std::move(bytes), written, last, keep_alive]() mutable {
      s->send(std::move(bytes), [s, written, last, keep_alive](bool ok) {
        written->set_value(ok);
        if (last) s->after_answer(ok, keep_alive);
      });
    });
    const bool ok = result.get();
    if (!ok) failed_ = true;
    return ok;
  }

  std::shared_ptr<Session> session_;
  HttpRequest request_;
  const bool head_, http10_;
  bool keep_alive_;
  bool on_worker_ = false;
  mutable std::mutex mutex_;
  State state_ = State::kNone;
  std::atomic<bool> failed_{false};
};

void run_handler(const HttpServer::Handler& handler, Exchange& exchange) {
  try {
    handler(exchange.request(), exchange);
  } catch (const std::exception& e) {
    return exchange.finish(e.what());
  } catch (...) {
    return exchange.finish("internal error");
  }
  exchange.finish("the server gave no answer");
}

void Session::dispatch() {
  disarm();
  fresh_ = false;
  auto& message = parser_->get();
  HttpRequest request;
  request.method = text(message.method_string());
  request.target = text(message.target());
  request.path = request.target.substr(0, request.target.find('?'));
  for (const auto& field : message) {
    request.headers.emplace_back(text(field.name_string()), text(field.value()));
  }
  request.body = std::move(message.body());
  request.remote_address = remote_address_;
  const bool head = message.method() == http::verb::head, http10 = message.version() < 11;
  const bool keep_alive = parser_->keep_alive();
  parser_.reset();
  auto exchange = std::make_shared<Exchange>(shared_from_this(), std::move(request), head, http10, keep_alive);
  const auto& options = shared_->options;
  const HttpRequest& r = exchange->request();

  if (options.guard) {
    try {
      options.guard(r, *exchange);
    } catch (const std::exception& e) {
      exchange->finish(e.what());
    }
    if (exchange->answered()) return;
  }
  const Route* route = nullptr;
  std::string allowed;
  for (const auto& candidate : shared_->routes) {
    if (candidate.path != r.path) continue;
    if (candidate.method == r.method) route = &candidate;
    allowed += (allowed.empty() ? "" : ", ") + candidate.method;
  }
  if (!route) {
    if (allowed.empty()) {
      exchange->respond_error(404, "no such endpoint: " + r.method + " " + r.path);
    } else {
      exchange->respond_error(405, "method " + r.method + " is not allowed on " + r.path + " (allowed: " + allowed + ")",
                              {{"Allow", allowed}});
    }
    return;
  }
  switch (route->kind) {
    case RouteKind::kLight:
      run_handler(route->handler, *exchange);
      return;
    case RouteKind::kHeavy: {
      exchange->set_on_worker(true);
      const bool taken = shared_->workers->try_run([exchange, handler = route->handler] {
        run_handler(handler, *exchange);
      });
      if (taken) {
        watch();  // the worker's first write is posted behind this
        return;
      }
      exchange->set_on_worker(false);
      exchange->respond_error(503, "the server is busy: every worker is answering another request; retry later",
                              {{"Retry-After", "1"}});
      return;
    }
  }
}

}  // namespace

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (iequal(key, name)) return value;
  }
  return "";
}

struct HttpServer::Impl {
  // Declared in this order so that they are destroyed in the reverse: the I/O context (and the
  // connections its pending handlers hold) before what the connections share.
  std::shared_ptr<Shared> shared = std::make_shared<Shared>();
  net::io_context io{1};
  std::optional<tcp::acceptor> acceptor;
  std::optional<net::steady_timer> accept_pause;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::thread io_thread;
  std::mutex lifecycle_mutex;
  bool started = false, stopped = false;

  void accept() {
    acceptor->async_accept(net::make_strand(io), [this](error_code ec, Socket socket) {
      if (!acceptor->is_open()) return;
      if (ec) {
        // Out of descriptors (EMFILE), or a connection gone before it was taken: wait a moment
        // rather than spin on an error that comes back at once.
        accept_pause->expires_after(std::chrono::milliseconds(50));
        accept_pause->async_wait([this](error_code e) {
          if (!e && acceptor->is_open()) accept();
        });
        return;
      }
      admit(std::move(socket));
      accept();
    });
  }

  // Only the I/O thread admits, so the check of the places and their taking do not race.
  void admit(Socket socket) {
    auto& s = *shared;
    if (s.stopping) return;  // the socket closes as it goes out of scope
    bool holds_slot = true;
    if (s.slots < s.max_connections) {
      ++s.slots;
    } else if (!evict_longest_idle()) {  // an evicted connection's place goes to the newcomer
      holds_slot = false;
      ++s.refused;
      if (s.refusing >= kMaxRefusing) return;
      ++s.refusing;
    }
    auto session = std::make_shared<Session>(shared, std::move(socket), holds_slot);
    {
      std::lock_guard lock(s.sessions_mutex);
      s.sessions.emplace(session.get(), session);
    }
    net::post(session->strand(), [session, holds_slot] { holds_slot ? session->start() : session->refuse(); });
  }

  // Closes the connection idle the longest (one closing after its last answer first); false
  // when every connection has a request in progress.
  bool evict_longest_idle() {
    std::lock_guard lock(shared->sessions_mutex);
    for (int attempt = 0; attempt < 4; ++attempt) {
      Session* oldest = nullptr;
      int64_t oldest_since = 0;
      for (const auto& [session, weak] : shared->sessions) {
        // A session here is alive: its destructor waits for this lock before anything is freed.
        const int64_t since = session->idle_since().load();
        if (session->holds_slot() && since > kBusy && (!oldest || since < oldest_since)) {
          oldest = session;
          oldest_since = since;
        }
      }
      if (!oldest) return false;
      int64_t expected = oldest_since;
      if (!oldest->idle_since().compare_exchange_strong(expected, kEvicted)) continue;  // it just got a request
      if (oldest_since != kClosing) ++shared->idle_closed;
      if (auto alive = shared->sessions.at(oldest).lock()) net::post(alive->strand(), [alive] { alive->close_now(); });
      return true;
    }
    return false;
  }

  // Posts `close` onto every connection's strand for which `which` holds when it runs there.
  void close_connections(bool idle_only) {
    std::vector<std::shared_ptr<Session>> alive;
    {
      std::lock_guard lock(shared->sessions_mutex);
      for (const auto& [session, weak] : shared->sessions) {
        if (auto s = weak.lock()) alive.push_back(std::move(s));
      }
    }
    for (auto& s : alive) {
      net::post(s->strand(), [s, idle_only] {
        if (!idle_only || s->idle_since().load() > kBusy) s->close_now();
      });
    }
  }
};

HttpServer::HttpServer(HttpServerOptions options) : impl_(std::make_unique<Impl>()) {
  if (options.max_connections < 1) throw std::invalid_argument("max_connections must be at least 1");
  if (options.workers < 1) throw std::invalid_argument("workers must be at least 1");
  impl_->shared->options = std::move(options);
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::route(std::string method, std::string path, RouteKind kind, Handler handler) {
  std::lock_guard lock(impl_->lifecycle_mutex);
  if (impl_->started) throw std::logic_error("HttpServer::route: the server has started");
  impl_->shared->routes.push_back({std::move(method), std::move(path), kind, std::move(handler)});
}

int HttpServer::start(const std::string& host, int port) {
  auto& i = *impl_;
  std::lock_guard lock(i.lifecycle_mutex);
  if (i.started) throw std::logic_error("HttpServer::start: started already");
  auto& shared = *i.shared;
  shared.max_connections = connections_within_open_file_limit(shared.options.max_connections, kReservedDescriptors);

  const std::string address = host + ":" + std::to_string(port);
  error_code ec;
  tcp::resolver resolver(i.io);
  const auto endpoints = resolver.resolve(host, std::to_string(port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec) throw std::runtime_error("cannot listen on " + address + ": " + ec.message());
  for (const auto& entry : endpoints) {
    tcp::acceptor acceptor(i.io);
    const auto endpoint = entry.endpoint();
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(shared.options.listen_backlog, ec);
    if (!ec) {
      i.acceptor.emplace(std::move(acceptor));
      break;
    }
  }
  if (!i.acceptor) throw std::runtime_error("cannot listen on " + address + ": " + ec.message());
  const int bound = i.acceptor->local_endpoint().port();

  shared.workers = std::make_unique<WorkerPool>(shared.options.workers);
  i.accept_pause.emplace(i.io);
  i.work.emplace(i.io.get_executor());
  i.accept();
  i.io_thread = std::thread([&io = i.io] {
    for (;;) {
      try {
        io.run();
        return;
      } catch (const std::exception&) {
        // A handler that threw (an allocation that failed): the others go on.
      }
    }
  });
  i.started = true;
  return bound;
}

void HttpServer::stop(std::chrono::milliseconds grace) {
  auto& i = *impl_;
  std::lock_guard lock(i.lifecycle_mutex);
  if (!i.started || i.stopped) return;
  i.stopped = true;
  auto& shared = *i.shared;
  shared.stopping = true;
  // The acceptor belongs to the I/O thread: it closes it there.
  std::promise<void> closed;
  net::post(i.io, [&i, &closed] {
    error_code ignored;
    i.acceptor->close(ignored);
    i.accept_pause->cancel();
    closed.set_value();
  });
  closed.get_future().wait();
  i.close_connections(/*idle_only=*/true);
  const auto deadline = Clock::now() + grace;
  while (shared.workers->busy() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  // What is left is cut: its writes fail and closed() says so, so its handlers return.
  i.close_connections(/*idle_only=*/false);
  shared.workers->join();
  // With every connection closed, the I/O thread runs out of work once their handlers have run.
  i.work.reset();
  const auto hard = Clock::now() + std::chrono::seconds(2);
  while (!i.io.stopped() && Clock::now() < hard) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  i.io.stop();
  i.io_thread.join();
}

int64_t HttpServer::max_connections() const { return impl_->shared->max_connections; }

ConnectionCounts HttpServer::counts() const {
  auto& shared = *impl_->shared;
  ConnectionCounts c;
  {
    std::lock_guard lock(shared.sessions_mutex);
    c.open = static_cast<int64_t>(shared.sessions.size());
  }
  c.refused = shared.refused;
  c.timed_out = shared.timed_out;
  c.idle_closed = shared.idle_closed;
  return c;
}

int64_t connections_within_open_file_limit(int64_t wanted, int64_t reserve) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return wanted;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  if (limit.rlim_cur == RLIM_INFINITY) return wanted;
  return std::max<int64_t>(1, std::min<int64_t>(wanted, static_cast<int64_t>(limit.rlim_cur) - reserve));
}

}  // namespace zoo
