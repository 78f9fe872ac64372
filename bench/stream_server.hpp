// An OpenAI-like provider for the benchmarks that holds any number of connections on one event loop: a
// streamed chat completion is a chunked text/event-stream of events spaced by timers, any other request is
// answered at once. Not a test server for HTTP in general: it reads what libcurl sends (a request with a
// Content-Length, keep-alive), nothing else.
#ifndef LLMRETRY_BENCH_STREAM_SERVER_HPP
#define LLMRETRY_BENCH_STREAM_SERVER_HPP

#include <boost/asio/buffer.hpp>
#include <boost/asio/buffers_iterator.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace bench {

/// Returns true when `body` holds `"stream"` followed by `: true` (spaces allowed).
inline bool asks_stream(std::string_view body) {
  const auto at = body.find("\"stream\"");
  if (at == std::string_view::npos) return false;
  std::size_t i = at + 8;
  while (i < body.size() && (body[i] == ' ' || body[i] == ':')) ++i;
  return body.substr(i, 4) == "true";
}

/// Returns the body of the chat.completion answered at once.
inline const std::string& completion_body() {
  static const std::string body =
      R"({"id":"chatcmpl-bench","object":"chat.completion","created":0,"model":"bench","choices":[{"index":0,)"
      R"("message":{"role":"assistant","content":"Hello."},"finish_reason":"stop"}],)"
      R"("usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}})";
  return body;
}

/// Returns one event of a streamed answer, a chat.completion.chunk.
inline const std::string& chunk_event() {
  static const std::string event = R"(data: {"id":"chatcmpl-bench","object":"chat.completion.chunk",)"
                                   R"("created":0,"model":"bench","choices":[{"index":0,)"
                                   R"("delta":{"content":"token"},"finish_reason":null}]})"
                                   "\n\n";
  return event;
}

/// Returns the event that ends a streamed answer.
inline const std::string& done_event() {
  static const std::string event = "data: [DONE]\n\n";
  return event;
}

/// Accepts connections on `acceptor` until it is closed, each with Nagle's algorithm off, and hands each socket
/// to `serve`.
template <class Serve>
void accept_each(boost::asio::ip::tcp::acceptor& acceptor, Serve serve) {
  acceptor.async_accept(
      [&acceptor, serve = std::move(serve)](boost::system::error_code e, boost::asio::ip::tcp::socket socket) mutable {
        if (e == boost::asio::error::operation_aborted) return;
        if (!e) {
          boost::system::error_code ignored;
          socket.set_option(boost::asio::ip::tcp::no_delay(true), ignored);
          serve(std::move(socket));
        }
        accept_each(acceptor, std::move(serve));
      });
}

/// Serves on 127.0.0.1 (any free port) on the io_context it is given, which runs it: a POST whose body asks
/// for `"stream": true` gets an OpenAI chat stream, `chunks` chat.completion.chunk events `interval` apart
/// (the first after one interval), then `data: [DONE]`, chunked; any other request gets a small
/// chat.completion after `latency` (a timer: the wait costs no thread). Connections are kept alive. Destroy it
/// only once the io_context is stopped.
class StreamServer {
 public:
  StreamServer(boost::asio::io_context& io, int chunks, std::chrono::milliseconds interval,
               std::chrono::milliseconds latency = std::chrono::milliseconds::zero())
      : acceptor_(io, boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0)),
        chunks_(chunks),
        interval_(interval),
        latency_(latency) {
    acceptor_.listen(boost::asio::socket_base::max_listen_connections);
    accept_each(acceptor_,
                [this](tcp::socket socket) { std::make_shared<Connection>(std::move(socket), *this)->read_request(); });
  }

  /// Returns the port it listens on.
  [[nodiscard]] unsigned short port() const { return acceptor_.local_endpoint().port(); }

 private:
  using tcp = boost::asio::ip::tcp;

  struct Connection : std::enable_shared_from_this<Connection> {
    Connection(tcp::socket s, const StreamServer& owner)
        : socket(std::move(s)), timer(socket.get_executor()), server(owner) {}

    void read_request() {
      boost::asio::async_read_until(
          socket, buffer, "\r\n\r\n", [self = shared_from_this()](boost::system::error_code e, std::size_t end) {
            if (e) return;
            std::string head(boost::asio::buffers_begin(self->buffer.data()),
                             boost::asio::buffers_begin(self->buffer.data()) + static_cast<std::ptrdiff_t>(end));
            self->buffer.consume(end);
            std::transform(head.begin(), head.end(), head.begin(),
                           [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); });
            std::size_t length = 0;
            if (const auto at = head.find("\r\ncontent-length:"); at != std::string::npos)
              length = std::strtoul(head.c_str() + at + 17, nullptr, 10);
            self->read_body(length);
          });
    }

    void read_body(std::size_t length) {
      const std::size_t have = std::min(length, buffer.size());
      boost::asio::async_read(socket, buffer, boost::asio::transfer_exactly(length - have),
                              [self = shared_from_this(), length](boost::system::error_code e, std::size_t) {
                                if (e) return;
                                const auto begin = boost::asio::buffers_begin(self->buffer.data());
                                const std::string body(begin, begin + static_cast<std::ptrdiff_t>(length));
                                self->buffer.consume(length);
                                if (asks_stream(body)) self->start_stream();
                                else self->answer_after_latency();
                              });
    }

    void answer_after_latency() {
      if (server.latency_ <= std::chrono::milliseconds::zero()) return answer_at_once();
      timer.expires_after(server.latency_);
      timer.async_wait([self = shared_from_this()](boost::system::error_code e) {
        if (!e) self->answer_at_once();
      });
    }

    void answer_at_once() {
      static const std::string answer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                                        std::to_string(completion_body().size()) + "\r\n\r\n" + completion_body();
      boost::asio::async_write(socket, boost::asio::buffer(answer),
                               [self = shared_from_this()](boost::system::error_code e, std::size_t) {
                                 if (!e) self->read_request();
                               });
    }

    void start_stream() {
      out = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
      sent = 0;
      write_then([](Connection& c) { c.next_chunk(); });
    }

    void next_chunk() {
      timer.expires_after(server.interval_);
      timer.async_wait([self = shared_from_this()](boost::system::error_code e) {
        if (e) return;
        Connection& c = *self;
        const bool last = ++c.sent > c.server.chunks_;
        const std::string& event = last ? done_event() : chunk_event();
        char size[16];
        std::snprintf(size, sizeof size, "%zx\r\n", event.size());
        c.out = std::string(size).append(event).append("\r\n");
        if (last) c.out.append("0\r\n\r\n");
        c.write_then([last](Connection& again) {
          if (last) again.read_request();
          else again.next_chunk();
        });
      });
    }

    template <class Then>
    void write_then(Then then) {
      boost::asio::async_write(socket, boost::asio::buffer(out),
                               [self = shared_from_this(), then](boost::system::error_code e, std::size_t) {
                                 if (!e) then(*self);
                               });
    }

    tcp::socket socket;
    boost::asio::steady_timer timer;
    const StreamServer& server;
    boost::asio::streambuf buffer;
    std::string out;
    int sent = 0;
  };

  tcp::acceptor acceptor_;
  int chunks_;
  std::chrono::milliseconds interval_;
  std::chrono::milliseconds latency_;
};

}  // namespace bench

#endif  // LLMRETRY_BENCH_STREAM_SERVER_HPP
