// The HTTP/1.1 front of llmretry-relay on Boost.Beast: a few event-loop threads (workers), each serving its
// connections; requests received whole within bounds (header bytes and fields, body, time) before the
// relay sees them; answers written whole or streamed in chunks; a graceful stop.
#ifndef LLMRETRY_RELAY_FRONT_HPP
#define LLMRETRY_RELAY_FRONT_HPP

#include <llmretry/detail/text.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "errors.hpp"

namespace relay {

namespace http = boost::beast::http;

/// What the front lets a client do. Every bound holds before the relay looks at a request (before the
/// client key is checked): a client that passes one gets an answer at once, or is cut.
struct FrontLimits {
  std::size_t max_connections = 10'000;         ///< connections open at once; one more gets 503 and is closed
  std::size_t max_header_bytes = 32 << 10;      ///< the request line and header lines together (431 past it)
  std::size_t max_header_fields = 100;          ///< header lines (431 past them)
  std::size_t max_body = std::size_t{1} << 20;  ///< a request body as received, whatever its framing (413)
  /// The most a client may take to send a whole request from its first byte: a slower one is cut.
  std::chrono::milliseconds request_timeout{10'000};
  /// The most a keep-alive connection may wait for its next request.
  std::chrono::milliseconds idle_timeout{60'000};
  /// The most a client may take to read a piece of an answer: a client that reads nothing for longer is cut.
  std::chrono::milliseconds write_timeout{10'000};
  /// The bytes of a streamed answer the client has not taken yet: past them, the stream is cut.
  std::size_t max_stream_backlog = std::size_t{1} << 20;
  /// The bytes of request bodies held at once, from their header until their answer (a chunked body counts
  /// as max_body): one more is answered 503 with Retry-After before it is read.
  std::size_t max_body_memory = std::size_t{256} << 20;
};

/// What the front counted; read for /metrics. Thread-safe.
struct FrontStats {
  std::atomic<std::size_t> body_bytes{0};  ///< the bytes of request bodies held now (see max_body_memory)
  std::atomic<std::uint64_t> connections_open{0};
  std::atomic<std::uint64_t> connections_refused{0};  ///< past max_connections
  std::atomic<std::uint64_t> bodies_refused{0};       ///< past max_body_memory
  std::atomic<std::uint64_t> slow_requests_cut{0};    ///< a request not received within request_timeout
  std::atomic<std::uint64_t> slow_readers_cut{0};     ///< an answer not taken within write_timeout or backlog
  std::atomic<std::uint64_t> clients_left{0};         ///< a client seen to close its connection during its answer
  std::atomic<std::uint64_t> malformed_requests{0};   ///< answered 400, 413, 415, 417 or 431 by the front
};

/// Returns the counters of `stats` in the Prometheus text exposition format 0.0.4, and `requests` (the API
/// requests in the relay's hands) as llm_relay_requests_in_flight.
inline std::string front_metrics(const FrontStats& stats, std::size_t requests) {
  std::string text;
  const auto family = [&](const char* name, const char* type, const char* help) {
    text.append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ").append(name).append(" ");
    text.append(type).append("\n");
  };
  const auto series = [&](const char* name, const char* labels, std::uint64_t value) {
    text.append(name).append(labels).append(" ").append(std::to_string(value)).append("\n");
  };
  family("llm_relay_connections", "gauge", "Client connections open.");
  series("llm_relay_connections", "", stats.connections_open);
  family("llm_relay_requests_in_flight", "gauge", "API requests received and not yet answered.");
  series("llm_relay_requests_in_flight", "", requests);
  family("llm_relay_clients_cut_total", "counter",
         "Clients cut: slow_request (a request not received in time), slow_reader (an answer not taken in time).");
  series("llm_relay_clients_cut_total", "{reason=\"slow_request\"}", stats.slow_requests_cut);
  series("llm_relay_clients_cut_total", "{reason=\"slow_reader\"}", stats.slow_readers_cut);
  family("llm_relay_clients_left_total", "counter",
         "Clients seen to close (or reset) their connection while their answer was prepared or sent.");
  series("llm_relay_clients_left_total", "", stats.clients_left);
  family("llm_relay_refused_total", "counter",
         "Requests the front refused: body_memory (past --max-body-memory), connections (past --max-connections), "
         "malformed (400, 413, 415, 417, 431).");
  series("llm_relay_refused_total", "{reason=\"body_memory\"}", stats.bodies_refused);
  series("llm_relay_refused_total", "{reason=\"connections\"}", stats.connections_refused);
  series("llm_relay_refused_total", "{reason=\"malformed\"}", stats.malformed_requests);
  return text;
}

/// A request's start line and header lines, checked.
using RequestHead = http::request_header<>;

/// A request received whole.
struct Request {
  RequestHead head;
  std::string body;
  std::size_t worker = 0;  ///< the index of the worker (event loop) that serves it
};

/// An answer sent whole.
struct Reply {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;  ///< Content-Type among them
  std::string body;
};

/// Returns an answer of the relay's own with `error`'s status and body in `format`.
inline Reply reply_of(const ErrorReply& error, Format format = Format::openai) {
  return {error.status, {{"Content-Type", json_content_type}}, error_body(error, format)};
}

/// The answer to one request, written by the relay on the request's worker (its thread only). Holds the
/// connection: the relay answers once, whole (send) or streamed (start, then write, then finish).
class Exchange {
 public:
  virtual ~Exchange() = default;
  /// Sends `reply` whole.
  virtual void send(Reply reply) = 0;
  /// Sends the status and headers of a streamed answer (chunked); `write` then sends its pieces.
  virtual void start(int status, std::vector<std::pair<std::string, std::string>> headers) = 0;
  /// Sends one piece of a started stream. Returns false once the client is gone or too slow (the stream
  /// is over: the rest is dropped).
  virtual bool write(std::string piece) = 0;
  /// Ends a started stream, with `last` as its last piece (empty: none).
  virtual void finish(std::string last) = 0;
  /// Returns the slot emitted (terminal, once) when the client is gone or too slow: its connection closed or
  /// reset while the answer is prepared or sent (the front watches it from the moment the request is handed
  /// over, until a pipelined request arrives behind it), or a write that failed or timed out. A handler put
  /// in it after that is not told: ask left() first.
  virtual boost::asio::cancellation_slot gone() = 0;
  /// Returns true once the client is gone (gone() was emitted).
  [[nodiscard]] virtual bool left() const noexcept = 0;
  /// The relay failed to answer: sends a 500 (internal_error) that says nothing of why, or cuts the
  /// connection when an answer began.
  virtual void fail() = 0;
};

/// What the relay does with requests.
class Service {
 public:
  virtual ~Service() = default;
  /// Returns a refusal of `head` before its body is read (the client key, the route, capacity), or nullopt
  /// to receive it whole. `body_bytes`: its Content-Length, nullopt when chunked.
  virtual std::optional<Reply> check(const RequestHead& head, std::optional<std::uint64_t> body_bytes) = 0;
  /// Answers `request` through `exchange`, at once or later, on the request's worker.
  virtual void serve(Request request, std::shared_ptr<Exchange> exchange) = 0;
};

namespace front_detail {

/// Returns true when `value` holds a control character other than a horizontal tab (NUL, CR, LF, DEL...).
inline bool has_control(std::string_view value) noexcept {
  for (const char c : value) {
    const auto byte = static_cast<unsigned char>(c);
    if ((byte < 0x20 && byte != '\t') || byte == 0x7F) return true;
  }
  return false;
}

/// Returns why `head` is malformed for the relay (a field with a control character, conflicting or
/// unsupported framing, an encoded body, an unknown expectation), or nullopt.
inline std::optional<ErrorReply> malformed(const RequestHead& head, std::size_t max_fields) {
  std::size_t fields = 0;
  for (const auto& field : head) {
    if (++fields > max_fields)
      return ErrorReply{431, "more than " + std::to_string(max_fields) + " header lines", "invalid_request_error",
                        "header_too_large"};
    if (has_control(field.value()) || has_control(field.name_string()))
      return ErrorReply{400, "a header holds a control character", "invalid_request_error", "bad_header"};
  }
  const auto count = [&](http::field name) {
    return std::distance(head.equal_range(name).first, head.equal_range(name).second);
  };
  if (head.version() >= 11 && count(http::field::host) != 1)
    return ErrorReply{400, "an HTTP/1.1 request has one Host header", "invalid_request_error", "bad_host"};
  if (count(http::field::content_length) > 1)
    return ErrorReply{400, "Content-Length is sent more than once", "invalid_request_error", "bad_framing"};
  if (count(http::field::transfer_encoding) > 0) {
    if (count(http::field::content_length) > 0)
      return ErrorReply{400, "Content-Length and Transfer-Encoding together", "invalid_request_error", "bad_framing"};
    if (count(http::field::transfer_encoding) > 1 ||
        !llmretry::detail::iequals(llmretry::detail::trim_ows(head[http::field::transfer_encoding]), "chunked"))
      return ErrorReply{400, "Transfer-Encoding: only chunked is accepted", "invalid_request_error", "bad_framing"};
  }
  for (auto [at, end] = head.equal_range(http::field::content_encoding); at != end; ++at)
    if (!llmretry::detail::iequals(llmretry::detail::trim_ows(at->value()), "identity"))
      return ErrorReply{415, "Content-Encoding: request bodies are accepted unencoded only (identity)",
                        "invalid_request_error", "unsupported_content_encoding"};
  if (count(http::field::expect) > 1 ||
      (count(http::field::expect) == 1 && !llmretry::detail::iequals(head[http::field::expect], "100-continue")))
    return ErrorReply{417, "Expect: only 100-continue is understood", "invalid_request_error", "bad_expect"};
  return std::nullopt;
}

}  // namespace front_detail

class Front;

/// One event-loop thread and the connections it serves.
class Worker {
 public:
  Worker(Front& front, std::size_t index) : front_(front), index_(index) {}

  [[nodiscard]] boost::asio::io_context& context() noexcept { return context_; }
  [[nodiscard]] std::size_t index() const noexcept { return index_; }
  [[nodiscard]] Front& front() noexcept { return front_; }

  /// The connections of this worker. On its thread only.
  std::unordered_set<class Connection*> connections;
  /// The relay stops: a connection that starts now is closed at once. On its thread only.
  bool stopping = false;

 private:
  Front& front_;
  std::size_t index_;
  boost::asio::io_context context_{1};

 public:
  /// The service's own state for this worker (such as its upstream client): destroyed before the event
  /// loop, which may still hold its handlers.
  std::shared_ptr<void> local;
};

/// One client connection: reads a request, hands it to the service, writes its answer, and again (in
/// order: a pipelined request waits in the buffer for the answer before it).
class Connection : public Exchange, public std::enable_shared_from_this<Connection> {
 public:
  Connection(Worker& worker, Service& service, const FrontLimits& limits, FrontStats& stats,
             boost::asio::ip::tcp::socket socket)
      : worker_(worker),
        service_(service),
        limits_(limits),
        stats_(stats),
        stream_(std::move(socket)),
        buffer_(limits.max_header_bytes + (std::size_t{8} << 10)) {
    worker_.connections.insert(this);
    ++stats_.connections_open;
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  Connection(Connection&&) = delete;
  Connection& operator=(Connection&&) = delete;
  ~Connection() override {
    release_body();
    worker_.connections.erase(this);
    --stats_.connections_open;
  }

  /// Starts serving the connection (closes it at once when the relay stops).
  void run() {
    if (worker_.stopping) return close();
    next_request();
  }

  /// The relay stops: a connection between requests (or still receiving one) is closed now; one whose
  /// answer is under way closes once it is sent.
  void drain() {
    draining_ = true;
    if (phase_ != Phase::answering) close();
  }

  /// Cuts the connection now (the grace period is over).
  void cut() { broke(); }

  void send(Reply reply) override {
    responding_ = true;
    if (head_only_) {  // the answer to HEAD: its header alone, Content-Length as for GET
      auto response = std::make_shared<http::response<http::empty_body>>();
      response->version(11);
      response->result(static_cast<unsigned>(reply.status));
      for (auto& [name, value] : reply.headers) response->insert(name, value);
      response->content_length(reply.body.size());
      response->keep_alive(keep_alive());
      stream_.expires_after(limits_.write_timeout);
      http::async_write(stream_, *response,
                        [self = shared_from_this(), response](boost::beast::error_code error, std::size_t) {
                          self->answered(error);
                        });
      return;
    }
    auto response = std::make_shared<http::response<http::string_body>>();
    response->version(11);
    response->result(static_cast<unsigned>(reply.status));
    for (auto& [name, value] : reply.headers) response->insert(name, value);
    response->body() = std::move(reply.body);
    response->keep_alive(keep_alive());
    response->prepare_payload();
    stream_.expires_after(limits_.write_timeout);
    http::async_write(
        stream_, *response,
        [self = shared_from_this(), response](boost::beast::error_code error, std::size_t) { self->answered(error); });
  }

  void start(int status, std::vector<std::pair<std::string, std::string>> headers) override {
    auto response = std::make_shared<http::response<http::empty_body>>();
    response->version(11);
    response->result(static_cast<unsigned>(status));
    for (auto& [name, value] : headers) response->insert(name, value);
    if (http10_) keep_alive_ = false;  // HTTP/1.0 knows no chunks: the stream ends with the connection
    response->keep_alive(keep_alive());
    response->chunked(!http10_);
    responding_ = true;
    auto serializer = std::make_shared<http::response_serializer<http::empty_body>>(*response);
    writing_ = true;
    stream_.expires_after(limits_.write_timeout);
    http::async_write_header(stream_, *serializer,
                             [self = shared_from_this(), response, serializer](boost::beast::error_code error,
                                                                               std::size_t) { self->wrote(error); });
  }

  bool write(std::string piece) override {
    if (broken_) return false;
    backlog_ += piece.size();
    if (backlog_ > limits_.max_stream_backlog) {
      ++stats_.slow_readers_cut;
      broke();
      return false;
    }
    pieces_.push_back(std::move(piece));
    if (!writing_) write_next();
    return true;
  }

  void finish(std::string last) override {
    if (!last.empty()) write(std::move(last));
    finishing_ = true;
    if (!writing_) write_next();
  }

  boost::asio::cancellation_slot gone() override { return gone_.slot(); }
  [[nodiscard]] bool left() const noexcept override { return broken_; }

 private:
  enum class Phase { idle, receiving, answering };

  [[nodiscard]] bool keep_alive() const noexcept { return keep_alive_ && !draining_; }

  /// Waits for the next request: at once when its bytes are buffered already, else for its first byte
  /// within the idle timeout.
  void next_request() {
    ++watch_;  // a watch of the answer before ends here
    blank_bytes_ = 0;
    phase_ = Phase::idle;
    responding_ = false;
    head_only_ = false;
    pieces_.clear();
    backlog_ = 0;
    writing_ = false;
    finishing_ = false;
    if (draining_) return close();
    if (buffer_.size() > 0) return read_head();
    // A connection's first request is due within the request timeout of its accept; the next ones within
    // the idle timeout of the answer before.
    stream_.expires_after(served_ == 0 ? limits_.request_timeout : limits_.idle_timeout);
    const auto room = buffer_.max_size() - buffer_.size();
    stream_.async_read_some(buffer_.prepare(std::min<std::size_t>(room, 4096)),
                            [self = shared_from_this()](boost::beast::error_code error, std::size_t bytes) {
                              if (error) return self->unreadable(error);
                              self->buffer_.commit(bytes);
                              self->read_head();
                            });
  }

  /// Reads the request's start line and header lines within the request's deadline.
  void read_head() {
    phase_ = Phase::receiving;
    stream_.expires_after(limits_.request_timeout);
    head_parser_.emplace();
    head_parser_->header_limit(static_cast<std::uint32_t>(limits_.max_header_bytes));
    head_parser_->body_limit(limits_.max_body);
    http::async_read_header(
        stream_, buffer_, *head_parser_,
        [self = shared_from_this()](boost::beast::error_code error, std::size_t) { self->received_head(error); });
  }

  void received_head(boost::beast::error_code error) {
    if (error) return unreadable(error);
    const RequestHead& head = head_parser_->get().base();
    keep_alive_ = head_parser_->get().keep_alive();
    head_only_ = head.method() == http::verb::head;
    http10_ = head.version() < 11;
    if (auto bad = front_detail::malformed(head, limits_.max_header_fields)) return refuse_unread(reply_of(*bad));
    header_fields_ = static_cast<std::size_t>(std::distance(head.begin(), head.end()));
    std::optional<std::uint64_t> length;
    if (const auto declared = head_parser_->content_length(); declared && !head_parser_->chunked()) length = *declared;
    std::optional<Reply> refusal;
    try {
      refusal = service_.check(head, length);
    } catch (...) {  // what it says stays in the relay: it may quote the request
      refusal = failed();
    }
    if (refusal) {
      if (!head_parser_->is_done()) return refuse_unread(std::move(*refusal));
      phase_ = Phase::answering;  // nothing left to read: the connection may serve the next request
      head_parser_.reset();
      return send(std::move(*refusal));
    }
    if (!head_parser_->is_done() && !reserve_body(length.value_or(limits_.max_body))) {
      ++stats_.bodies_refused;
      Reply busy =
          reply_of({503, "the relay holds as many request bodies as it may (--max-body-memory); retry after 1 s",
                    "service_unavailable", "relay_busy"});
      busy.headers.emplace_back("Retry-After", "1");
      return refuse_unread(std::move(busy));
    }
    body_parser_.emplace(std::move(*head_parser_));
    head_parser_.reset();
    body_parser_->body_limit(limits_.max_body);
    if (body_parser_->is_done()) return received_body({});
    if (!http10_ && llmretry::detail::iequals(body_parser_->get()[http::field::expect], "100-continue")) {
      static constexpr std::string_view go_on = "HTTP/1.1 100 Continue\r\n\r\n";
      boost::asio::async_write(stream_, boost::asio::buffer(go_on.data(), go_on.size()),
                               [self = shared_from_this()](boost::beast::error_code written, std::size_t) {
                                 if (written) return self->close();
                                 self->read_body();
                               });
      return;
    }
    read_body();
  }

  void read_body() {
    http::async_read(
        stream_, buffer_, *body_parser_,
        [self = shared_from_this()](boost::beast::error_code error, std::size_t) { self->received_body(error); });
  }

  void received_body(boost::beast::error_code error) {
    if (error) return unreadable(error);
    if (static_cast<std::size_t>(std::distance(body_parser_->get().begin(), body_parser_->get().end())) !=
        header_fields_)  // a chunked body's trailer would add fields past every check of the header
      return refuse_unread(reply_of(
          {400, "trailer fields are not accepted after a chunked body", "invalid_request_error", "bad_framing"}));
    stream_.expires_never();
    phase_ = Phase::answering;
    ++served_;
    Request request;
    auto message = body_parser_->release();
    body_parser_.reset();
    if (buffer_.size() == 0) buffer_.shrink_to_fit();  // a stream may last minutes: its connection keeps no buffer
    request.head = std::move(message.base());
    request.body = std::move(message.body());
    request.worker = worker_.index();
    watch_departure();
    try {
      service_.serve(std::move(request), shared_from_this());
    } catch (...) {  // what it says stays in the relay: it may quote the request
      fail();
    }
  }

  /// Watches the connection while the current request is answered, so that a client that leaves (closes or
  /// resets its end) is told through gone() at once, not at the next write. Empty lines after the request
  /// (CR and LF bytes, at most blank_bytes_allowed) are read and dropped, as before any request-line, and the
  /// watch goes on. Other bytes that arrive instead (or are buffered already) are a pipelined request: they
  /// stay unread, for after this answer, and nothing is watched.
  void watch_departure() {
    if (buffer_.size() > 0) {
      if (!blank(static_cast<const char*>(buffer_.data().data()), buffer_.size())) return;
      buffer_.consume(buffer_.size());
    }
    stream_.socket().async_wait(
        boost::asio::socket_base::wait_read,
        [self = shared_from_this(), watch = watch_](boost::beast::error_code error) { self->readable(error, watch); });
  }

  /// Returns true when the `size` bytes at `bytes` are CR and LF only, and the watch may drop them (at most
  /// blank_bytes_allowed in all): counts them dropped.
  bool blank(const char* bytes, std::size_t size) noexcept {
    if (blank_bytes_ + size > blank_bytes_allowed ||
        !std::all_of(bytes, bytes + size, [](char c) { return c == '\r' || c == '\n'; }))
      return false;
    blank_bytes_ += size;
    return true;
  }

  /// The connection became readable (or the wait ended) during the answer that watch number `watch` began with.
  void readable(boost::beast::error_code error, std::size_t watch) {
    if (error || watch != watch_ || phase_ != Phase::answering || broken_ || !stream_.socket().is_open()) return;
    const int socket = stream_.socket().native_handle();
    std::array<char, blank_bytes_allowed + 1> bytes{};
    const ssize_t peeked = ::recv(socket, bytes.data(), bytes.size(), MSG_PEEK | MSG_DONTWAIT);
    if (peeked < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return watch_departure();
    if (peeked > 0) {
      if (!blank(bytes.data(), static_cast<std::size_t>(peeked))) return;  // a pipelined request
      if (::recv(socket, bytes.data(), static_cast<std::size_t>(peeked), MSG_DONTWAIT) != peeked) return;
      return watch_departure();
    }
    ++stats_.clients_left;  // its end closed (0: end of file) or reset
    broke();
  }

  void fail() override {
    if (!responding_) return send(failed());
    broke();
  }

  /// Returns the answer to a request the service failed to handle.
  static Reply failed() {
    return reply_of({500, "the relay failed to answer this request", "server_error", "internal_error"});
  }

  /// A request that could not be read whole: cut when too slow, answered (then closed) when malformed.
  void unreadable(boost::beast::error_code error) {
    if (error == boost::beast::error::timeout) {
      if (phase_ == Phase::receiving || served_ == 0) ++stats_.slow_requests_cut;
      return close();
    }
    if (error == http::error::end_of_stream || error == boost::asio::error::eof ||
        error == boost::asio::error::connection_reset || error == boost::asio::error::operation_aborted ||
        phase_ == Phase::idle)
      return close();
    if (error == http::error::header_limit)
      return refuse_unread(
          reply_of({431, "the request's header is larger than " + std::to_string(limits_.max_header_bytes) + " bytes",
                    "invalid_request_error", "header_too_large"}));
    if (error == http::error::body_limit)
      return refuse_unread(
          reply_of({413, "the body is larger than " + std::to_string(limits_.max_body) + " bytes (--max-body)",
                    "invalid_request_error", "body_too_large"}));
    if (error == boost::asio::error::not_found)  // the buffer is full: a header line longer than it
      return refuse_unread(reply_of({431, "a header line is too long", "invalid_request_error", "header_too_large"}));
    refuse_unread(
        reply_of({400, "malformed HTTP request: " + error.message(), "invalid_request_error", "bad_request"}));
  }

  /// Answers `reply` to a request whose rest is left unread, then closes the connection (lingering).
  void refuse_unread(Reply reply) {
    if (reply.status == 400 || reply.status == 413 || reply.status == 415 || reply.status == 417 || reply.status == 431)
      ++stats_.malformed_requests;
    head_parser_.reset();
    body_parser_.reset();
    keep_alive_ = false;
    unread_ = true;
    phase_ = Phase::answering;
    send(std::move(reply));
  }

  /// A whole answer was written (or failed).
  void answered(boost::beast::error_code error) {
    release_body();
    if (error) {
      if (error == boost::beast::error::timeout) ++stats_.slow_readers_cut;
      return close();
    }
    if (unread_) return linger();
    if (!keep_alive()) return close();
    next_request();
  }

  /// Closes a connection whose client may still be sending: stops sending, then reads and drops what
  /// comes for a short while (at most linger_bytes), so that the answer is not lost to a reset.
  void linger() {
    static constexpr std::size_t linger_bytes = std::size_t{256} << 10;
    static constexpr std::chrono::seconds linger_time{1};
    boost::beast::error_code ignored;
    stream_.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_send, ignored);
    stream_.expires_after(linger_time);
    drop(linger_bytes);
  }

  void drop(std::size_t left) {
    buffer_.clear();
    stream_.async_read_some(buffer_.prepare(std::min<std::size_t>(4096, buffer_.max_size())),
                            [self = shared_from_this(), left](boost::beast::error_code error, std::size_t bytes) {
                              if (error || bytes >= left) return self->close();
                              self->drop(left - bytes);
                            });
  }

  void write_next() {
    if (broken_) return;
    if (pieces_.empty()) {
      if (!finishing_) {
        writing_ = false;
        return;
      }
      if (http10_) return answered({});  // its end is the connection's close
      writing_ = true;
      stream_.expires_after(limits_.write_timeout);
      boost::asio::async_write(
          stream_, http::make_chunk_last(),
          [self = shared_from_this()](boost::beast::error_code error, std::size_t) { self->answered(error); });
      return;
    }
    writing_ = true;
    auto piece = std::make_shared<std::string>(std::move(pieces_.front()));
    pieces_.pop_front();
    stream_.expires_after(limits_.write_timeout);
    const auto written = [self = shared_from_this(), piece](boost::beast::error_code error, std::size_t) {
      self->backlog_ -= piece->size();
      self->wrote(error);
    };
    if (http10_) boost::asio::async_write(stream_, boost::asio::buffer(*piece), written);
    else boost::asio::async_write(stream_, http::make_chunk(boost::asio::buffer(*piece)), written);
  }

  /// A piece of a stream (or its header) was written.
  void wrote(boost::beast::error_code error) {
    if (error) {
      if (error == boost::beast::error::timeout) ++stats_.slow_readers_cut;
      return broke();
    }
    write_next();
  }

  /// The stream cannot go on: the upstream call is told, the connection closed.
  void broke() {
    if (std::exchange(broken_, true)) return;
    pieces_.clear();
    gone_.emit(boost::asio::cancellation_type::terminal);
    close();
  }

  /// Counts `bytes` of a request body in stats_.body_bytes. Returns false, counting nothing, when they would
  /// pass max_body_memory.
  bool reserve_body(std::size_t bytes) {
    std::size_t held = stats_.body_bytes.load();
    do {
      if (held + bytes > limits_.max_body_memory) return false;
    } while (!stats_.body_bytes.compare_exchange_weak(held, held + bytes));
    body_reserved_ = bytes;
    return true;
  }

  /// Counts out the body this connection holds.
  void release_body() noexcept { stats_.body_bytes -= std::exchange(body_reserved_, 0); }

  void close() {
    boost::beast::error_code ignored;
    stream_.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }

  Worker& worker_;
  Service& service_;
  const FrontLimits& limits_;
  FrontStats& stats_;
  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::empty_body>> head_parser_;
  std::optional<http::request_parser<http::string_body>> body_parser_;
  boost::asio::cancellation_signal gone_;
  Phase phase_ = Phase::idle;
  bool keep_alive_ = true;
  bool draining_ = false;
  bool unread_ = false;            ///< the client's request was not read whole: the connection ends lingering
  std::size_t body_reserved_ = 0;  ///< the bytes of its request body counted in stats_.body_bytes
  bool responding_ = false;        ///< an answer to the current request began
  bool head_only_ = false;         ///< the current request is HEAD: its answer has no body
  bool http10_ = false;            ///< the current request is HTTP/1.0: no chunks, no 100 Continue
  std::size_t header_fields_ = 0;  ///< the current request's header lines, checked
  std::size_t served_ = 0;         ///< the requests of this connection handed to the service
  std::size_t watch_ = 0;          ///< the watch of the current answer (see watch_departure)
  /// The most CR and LF bytes a watch drops after a request (two empty lines); more are a request's.
  static constexpr std::size_t blank_bytes_allowed = 4;
  std::size_t blank_bytes_ = 0;  ///< the CR and LF bytes the current watch dropped
  // A streamed answer.
  std::deque<std::string> pieces_;
  std::size_t backlog_ = 0;
  bool writing_ = false;
  bool finishing_ = false;
  bool broken_ = false;
};

/// The workers, the listening socket, and the stop.
class Front {
 public:
  /// `workers` event-loop threads (at least 1) serving `service` within `limits`; both must outlive it.
  Front(Service& service, const FrontLimits& limits, std::size_t workers) : service_(service), limits_(limits) {
    for (std::size_t i = 0; i < std::max<std::size_t>(1, workers); ++i)
      workers_.push_back(std::make_unique<Worker>(*this, i));
  }
  Front(const Front&) = delete;
  Front& operator=(const Front&) = delete;
  Front(Front&&) = delete;
  Front& operator=(Front&&) = delete;
  ~Front() { stop(); }

  /// Returns the workers (for the service's own per-worker state).
  [[nodiscard]] std::vector<std::unique_ptr<Worker>>& workers() noexcept { return workers_; }
  [[nodiscard]] FrontStats& stats() noexcept { return stats_; }
  [[nodiscard]] const FrontStats& stats() const noexcept { return stats_; }

  /// Listens on `endpoint` (port 0: any free one). Returns the port. Throws boost::system::system_error.
  unsigned short listen(const boost::asio::ip::tcp::endpoint& endpoint) {
    acceptor_.emplace(workers_.front()->context());
    accept_later_.emplace(workers_.front()->context());
    acceptor_->open(endpoint.protocol());
    acceptor_->set_option(boost::asio::socket_base::reuse_address(true));
    acceptor_->bind(endpoint);
    acceptor_->listen(boost::asio::socket_base::max_listen_connections);
    return acceptor_->local_endpoint().port();
  }

  /// Starts accepting, and the workers' threads.
  void run() {
    accept();
    for (auto& worker : workers_)
      threads_.emplace_back([&context = worker->context()] {
        const auto guard = boost::asio::make_work_guard(context);
        for (;;) {
          try {
            context.run();
            return;
          } catch (...) {  // a handler threw (out of memory): what it served is dropped, the loop serves on
          }
        }
      });
  }

  /// Stops accepting; closes the connections between requests at once, and the others once their answer
  /// is sent; after `grace`, cuts what is left and stops the workers. Blocks until they stopped.
  /// `wait(d)` sleeps for `d` (the caller's clock).
  template <class Wait>
  void drain(std::chrono::milliseconds grace, Wait wait) {
    boost::asio::post(workers_.front()->context(), [this] {
      boost::system::error_code ignored;
      if (acceptor_) acceptor_->close(ignored);
      if (accept_later_) accept_later_->cancel();
    });
    for (auto& worker : workers_)
      boost::asio::post(worker->context(), [&w = *worker] {
        w.stopping = true;
        for (Connection* connection : std::vector<Connection*>(w.connections.begin(), w.connections.end()))
          connection->drain();
      });
    for (std::chrono::milliseconds waited{0}; waited < grace && stats_.connections_open > 0;
         waited += std::chrono::milliseconds{10})
      wait(std::chrono::milliseconds{10});
    for (auto& worker : workers_)  // each worker cuts what is left, then stops
      boost::asio::post(worker->context(), [&w = *worker] {
        for (Connection* connection : std::vector<Connection*>(w.connections.begin(), w.connections.end()))
          connection->cut();
        w.context().stop();
      });
    join();
  }

 private:
  void accept() {
    Worker& next = *workers_[next_worker_++ % workers_.size()];
    acceptor_->async_accept(next.context(),
                            [this, &next](boost::system::error_code error, boost::asio::ip::tcp::socket socket) {
                              if (error == boost::asio::error::operation_aborted || !acceptor_->is_open()) return;
                              if (!error) {
                                admit(next, std::move(socket));
                                return accept();
                              }
                              // Out of descriptors (or another failure a retry at once would meet again):
                              // accept again in a moment, never in a busy loop; the clients wait in the
                              // listen queue meanwhile.
                              accept_later_->expires_after(std::chrono::milliseconds{50});
                              accept_later_->async_wait([this](boost::system::error_code waited) {
                                if (!waited && acceptor_->is_open()) accept();
                              });
                            });
  }

  /// Serves `socket` on `worker`, or refuses it with 503 when max_connections are open.
  void admit(Worker& worker, boost::asio::ip::tcp::socket socket) {
    boost::system::error_code ignored;
    socket.set_option(boost::asio::ip::tcp::no_delay(true), ignored);
    if (stats_.connections_open >= limits_.max_connections) {
      ++stats_.connections_refused;
      auto refused = std::make_shared<boost::asio::ip::tcp::socket>(std::move(socket));
      static const std::string busy = [] {
        const std::string body = error_body({503, "the relay has as many connections as it serves; retry after 1 s",
                                             "service_unavailable", "relay_busy"});
        return "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\nContent-Type: " +
               std::string(json_content_type) + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
               body;
      }();
      boost::asio::async_write(*refused, boost::asio::buffer(busy), [refused](boost::system::error_code, std::size_t) {
        boost::system::error_code closed;
        refused->shutdown(boost::asio::ip::tcp::socket::shutdown_both, closed);
        refused->close(closed);
      });
      return;
    }
    boost::asio::post(worker.context(), [this, &worker, socket = std::move(socket)]() mutable {
      std::make_shared<Connection>(worker, service_, limits_, stats_, std::move(socket))->run();
    });
  }

  void stop() {
    for (auto& worker : workers_) worker->context().stop();
    join();
  }

  /// Waits for the workers' threads to end.
  void join() {
    for (auto& thread : threads_)
      if (thread.joinable()) thread.join();
    threads_.clear();
  }

  Service& service_;
  const FrontLimits& limits_;
  FrontStats stats_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::optional<boost::asio::ip::tcp::acceptor> acceptor_;
  std::optional<boost::asio::steady_timer> accept_later_;  ///< the next accept after a failure (made by listen)
  std::vector<std::thread> threads_;
  std::size_t next_worker_ = 0;
};

}  // namespace relay

#endif  // LLMRETRY_RELAY_FRONT_HPP
