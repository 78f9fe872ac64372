#ifndef LLMRETRY_LOOPBACK_PROVIDER_HPP
#define LLMRETRY_LOOPBACK_PROVIDER_HPP

/// A scriptable HTTP provider on 127.0.0.1 and an ephemeral port, for end-to-end tests and examples of
/// code that calls an LLM API over real sockets, scripted or rate-limited like OpenAI. Needs cpp-httplib
/// (target llmretry::loopback).

#include <httplib.h>

#if !defined(_WIN32)
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#endif

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "../clock.hpp"
#include "../detail/text.hpp"
#include "../version.hpp"
#include "rate_limit.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace testing {

/// One scripted answer of the LoopbackProvider.
struct ScriptedResponse {
  /// How the answer is delivered.
  enum class Mode {
    whole,     ///< status, headers and the whole body
    cut_body,  ///< announces the body's full length, sends `cut_after` bytes of it, then closes
    stream,    ///< `text/event-stream`, chunked: sends `chunks` in order, then ends (or closes, if `cut`)
  };
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string content_type = "application/json";
  Mode mode = Mode::whole;
  std::size_t cut_after = 0;                    ///< for Mode::cut_body
  std::vector<std::string> chunks;              ///< for Mode::stream: raw SSE text, written one after the other
  bool cut = false;                             ///< for Mode::stream: close the connection after the chunks
  std::chrono::milliseconds chunk_interval{0};  ///< for Mode::stream: the wait before each chunk but the first
  std::chrono::milliseconds delay{0};           ///< wait before answering (cut short when the provider stops)
};

/// A request the LoopbackProvider received.
struct ReceivedRequest {
  std::string method;
  std::string path;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  /// The port of the client's end of the connection the request came over: requests with the same port
  /// came over one connection (kept alive), unless the system gave the port again to a later one.
  int client_port = 0;

  /// Returns the value of the first header called `name` (case-insensitive), or nullopt.
  std::optional<std::string> header(std::string_view name) const {
    for (const auto& [key, value] : headers)
      if (llmretry::detail::iequals(key, name)) return value;
    return std::nullopt;
  }
};

/// An HTTP server on 127.0.0.1 and an ephemeral port, started by the constructor and stopped by the
/// destructor: each request gets the next scripted response (a 500 saying so once the script is empty),
/// and every request is recorded, headers included, so that a test can prove what was sent. In the
/// rate-limited mode (enforce) it admits or refuses each request like a provider with per-minute limits,
/// and answers the admitted ones itself once the script is empty.
/// Thread-safe.
class LoopbackProvider {
 public:
  /// The limits of the rate-limited mode.
  using Limits = LoopbackLimits;

  /// Binds 127.0.0.1 on `port` (0: a port the system chooses) and starts serving, `threads` connections at
  /// once (each one kept alive holds a thread; 0: cpp-httplib's default, 8 on a small machine), with a
  /// listen queue as long as the system allows, so that many clients connecting at once are not delayed.
  /// A connection is kept alive for up to 1,000,000 requests. Throws std::runtime_error when it cannot bind
  /// or listen.
  explicit LoopbackProvider(int port = 0, std::size_t threads = 0) {
    server_.set_keep_alive_timeout(1);
    server_.set_keep_alive_max_count(1000000);  // as a provider does: a connection serves many requests
    server_.set_tcp_nodelay(true);              // each answer goes out at once, never held back to wait for an ACK
    if (threads > 0) {
      // NOLINTNEXTLINE(cppcoreguidelines-owning-memory): cpp-httplib takes ownership of the pool
      server_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    }
    server_.set_socket_options([this](socket_t socket) {
      httplib::default_socket_options(socket);
      listening_ = socket;
    });
    const auto handler = [this](const httplib::Request& request, httplib::Response& response) {
      answer(request, response);
    };
    // Which connections are answering a request (see shut_down_connections): from before its handler
    // until its answer is written (cpp-httplib logs a request once its answer is written).
    server_.set_pre_routing_handler([this](const httplib::Request& request, httplib::Response&) {
      std::lock_guard<std::mutex> lock(mutex_);
      ++answering_[request.remote_port];
      return httplib::Server::HandlerResponse::Unhandled;
    });
    server_.set_logger([this](const httplib::Request& request, const httplib::Response&) {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto found = answering_.find(request.remote_port);
      if (found != answering_.end() && --found->second <= 0) answering_.erase(found);
    });
    server_.Get(".*", handler);
    server_.Post(".*", handler);
    server_.Put(".*", handler);
    server_.Delete(".*", handler);
    port_ = port == 0 ? server_.bind_to_any_port("127.0.0.1") : (server_.bind_to_port("127.0.0.1", port) ? port : 0);
    if (port_ <= 0) throw std::runtime_error("loopback provider: cannot bind 127.0.0.1:" + std::to_string(port));
    if (::listen(listening_, SOMAXCONN) != 0) {  // again: cpp-httplib listens with a queue of 5
      const int error = errno;
      httplib::detail::close_socket(listening_);
      throw std::runtime_error("loopback provider: cannot listen on 127.0.0.1:" + std::to_string(port_) + ": " +
                               std::strerror(error));
    }
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() only stops a server that is running: wait for it, so that the destructor cannot miss it.
    for (int i = 0; i < 5000 && !server_.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds{1});
  }

  LoopbackProvider(const LoopbackProvider&) = delete;
  LoopbackProvider& operator=(const LoopbackProvider&) = delete;
  LoopbackProvider(LoopbackProvider&&) = delete;
  LoopbackProvider& operator=(LoopbackProvider&&) = delete;

  /// Stops serving: scripted delays are cut short (the answers they held still go out), the connections
  /// clients keep alive between requests are closed (so that stopping never waits for their keep-alive
  /// timeout; see shut_down_connections), and the server thread is joined.
  ~LoopbackProvider() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    server_.stop();
    shut_down_connections();
    thread_.join();
  }

  /// Returns "http://127.0.0.1:PORT", the base URL to send requests to.
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  /// Appends `response` to the script. Returns *this.
  LoopbackProvider& then(ScriptedResponse response) {
    std::lock_guard<std::mutex> lock(mutex_);
    script_.push_back(std::move(response));
    return *this;
  }

  /// Switches to the rate-limited mode, its buckets full now: each request is first admitted or refused
  /// by `limits` (see LoopbackRateLimit; its tokens are loopback_usage's), a refusal being OpenAI's 429
  /// `rate_limit_exceeded` with `retry-after-ms`, the exact wait until it would be admitted. Every answer
  /// carries the `x-ratelimit-*` headers. An admitted request gets the next scripted response, or once
  /// the script is empty an answer whose usage is what it was charged, each after limits.latency (and its
  /// own delay). That answer is an OpenAI chat completion, or an Anthropic message for a path that ends in
  /// `/messages` (such as /v1/messages); for a body with `"stream": true`, it is streamed instead
  /// (`text/event-stream`), one content event per completion token, each after limits.token_interval:
  /// - OpenAI: `chat.completion.chunk` events, the first with the assistant's role, then the content, then
  ///   one with `finish_reason` "stop", then (when `stream_options.include_usage` is true) one with the
  ///   `usage` and no choices, then `data: [DONE]`;
  /// - Anthropic: `message_start` (with `usage.input_tokens`), `content_block_start`, the
  ///   `content_block_delta`s, `content_block_stop`, `message_delta` (`stop_reason` "end_turn",
  ///   `usage.output_tokens`), `message_stop`.
  /// The body is read by scanning, not parsed: its first `"stream"` member, at any depth, decides.
  /// Returns *this.
  /// Throws std::invalid_argument naming the field when a limit makes no sense.
  LoopbackProvider& enforce(const Limits& limits) {
    const LoopbackRateLimit rate(limits, real_now());
    std::lock_guard<std::mutex> lock(mutex_);
    rate_.emplace(rate);
    return *this;
  }

  /// Returns how many requests were admitted: all of them but those refused().
  std::int64_t served() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return served_;
  }
  /// Returns how many requests the rate-limited mode refused with a 429.
  std::int64_t refused() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return refused_;
  }

  /// Returns a copy of every request received so far, in order of arrival.
  std::vector<ReceivedRequest> requests() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return received_;
  }
  /// Returns how many requests were received so far.
  std::size_t request_count() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return received_.size();
  }
  /// Returns how many connections the requests received so far came over: the distinct
  /// ReceivedRequest::client_port among them (a port the system gave again to a later connection counts
  /// once). A client that reuses its connections opens fewer than it sends requests.
  std::size_t connection_count() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return client_ports_.size();
  }

  /// Returns the real Azure OpenAI 429 of the project's seed: `retry-after: 30`, `retry-after-ms: 511`,
  /// the x-ratelimit-* values and the JSON body, verbatim.
  static ScriptedResponse azure_rate_limited() {
    ScriptedResponse r;
    r.status = 429;
    r.body =
        "{\"error\": {\"message\": \"Your requests to gpt-6-luna for chat-small in eastus2 have exceeded token rate "
        "limit.\",\n           \"type\": \"too_many_requests\", \"code\": \"rate_limit_exceeded\"}}";
    r.headers = {{"retry-after", "30"},
                 {"retry-after-ms", "511"},
                 {"x-ratelimit-limit-tokens", "100000"},
                 {"x-ratelimit-remaining-tokens", "-853"},
                 {"x-ratelimit-limit-requests", "100"},
                 {"x-ratelimit-remaining-requests", "65"}};
    return r;
  }
  /// Returns an OpenAI-style 503.
  static ScriptedResponse service_unavailable() {
    return error(
        503,
        R"({"error":{"message":"The server is overloaded or not ready yet.","type":"server_error","param":null,"code":null}})");
  }
  /// Returns Anthropic's 529 overloaded_error.
  static ScriptedResponse overloaded() {
    return error(529, R"({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}})");
  }
  /// Returns an OpenAI 400 context_length_exceeded.
  static ScriptedResponse context_length_exceeded() {
    return error(
        400,
        R"({"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}})");
  }
  /// Returns an OpenAI 429 insufficient_quota (billing: waiting does not help).
  static ScriptedResponse insufficient_quota() {
    return error(
        429,
        R"({"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}})");
  }
  /// Returns a Gemini 429 RESOURCE_EXHAUSTED whose google.rpc.RetryInfo asks for `retry_delay` ("1.5s").
  static ScriptedResponse gemini_resource_exhausted(const std::string& retry_delay) {
    return error(
        429,
        R"({"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":")" +
            retry_delay + R"("}]}})");
  }
  /// Returns a success after `delay`: longer than the client's timeout, it is a hang.
  static ScriptedResponse hang(std::chrono::milliseconds delay) {
    ScriptedResponse r = chat_completion("late");
    r.delay = delay;
    return r;
  }
  /// Returns a 200 whose connection closes after half of its body.
  static ScriptedResponse closed_mid_body() {
    ScriptedResponse r = chat_completion("this answer never arrives whole");
    r.mode = ScriptedResponse::Mode::cut_body;
    r.cut_after = r.body.size() / 2;
    return r;
  }
  /// Returns an OpenAI chat completion whose answer is `content`.
  static ScriptedResponse chat_completion(const std::string& content) {
    ScriptedResponse r;
    r.body =
        R"({"id":"chatcmpl-loopback","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":")" +
        content + R"("},"finish_reason":"stop"}]})";
    return r;
  }
  /// Returns an OpenAI chat completion whose answer is `content` and whose `usage` is `usage`.
  static ScriptedResponse chat_completion(const std::string& content, const LoopbackUsage& usage) {
    ScriptedResponse r = chat_completion(content);
    r.body.pop_back();  // the closing brace
    r.body += R"(,"usage":{"prompt_tokens":)" + std::to_string(usage.prompt_tokens) + R"(,"completion_tokens":)" +
              std::to_string(usage.completion_tokens) + R"(,"total_tokens":)" + std::to_string(usage.tokens()) + "}}";
    return r;
  }
  /// Returns OpenAI's 429 for a request over the `window` limit ("requests" or "tokens"), to be tried
  /// again after `wait` (sent as `retry-after-ms`).
  static ScriptedResponse rate_limit_exceeded(const std::string& window, std::chrono::milliseconds wait) {
    ScriptedResponse r =
        error(429, R"({"error":{"message":"Rate limit reached for )" + window + " per min. Please try again in " +
                       std::to_string(wait.count()) + R"(ms.","type":")" + window +
                       R"(","param":null,"code":"rate_limit_exceeded"}})");
    r.headers = {{"retry-after-ms", std::to_string(wait.count())}};
    return r;
  }
  /// Returns an OpenAI SSE stream of one chunk per token, ended by `data: [DONE]`.
  static ScriptedResponse stream(const std::vector<std::string>& tokens) {
    ScriptedResponse r;
    r.mode = ScriptedResponse::Mode::stream;
    r.content_type = "text/event-stream";
    for (const auto& token : tokens)
      r.chunks.emplace_back(R"(data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":")" +
                            token + "\"}}]}\n\n");
    r.chunks.emplace_back("data: [DONE]\n\n");
    return r;
  }
  /// Returns an Anthropic Messages SSE stream of one content_block_delta per token, ended by
  /// `event: message_stop`.
  static ScriptedResponse anthropic_stream(const std::vector<std::string>& tokens) {
    ScriptedResponse r;
    r.mode = ScriptedResponse::Mode::stream;
    r.content_type = "text/event-stream";
    r.chunks.emplace_back(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_loopback\"}}\n\n");
    for (const auto& token : tokens)
      r.chunks.emplace_back(
          "event: content_block_delta\ndata: "
          R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":")" +
          token + "\"}}\n\n");
    r.chunks.emplace_back("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    return r;
  }
  /// Returns stream(tokens) without its end: the connection closes after the last token.
  static ScriptedResponse stream_cut(const std::vector<std::string>& tokens) {
    ScriptedResponse r = stream(tokens);
    r.chunks.pop_back();
    r.cut = true;
    return r;
  }
  /// Returns stream(tokens) with Anthropic's mid-stream `event: error` (overloaded_error) after the tokens.
  static ScriptedResponse stream_error(const std::vector<std::string>& tokens) {
    ScriptedResponse r = stream(tokens);
    r.chunks.back() =
        "event: error\ndata: "
        "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    return r;
  }

 private:
  static ScriptedResponse error(int status, std::string body) {
    ScriptedResponse r;
    r.status = status;
    r.body = std::move(body);
    return r;
  }

  /// A streamed answer the rate-limited mode makes by itself: `head`, then `count` content events (the
  /// first `first`, the others `next`), each after `interval`, then `tail`.
  struct OwnStream {
    std::string head;
    std::string first;
    std::string next;
    std::int64_t count = 0;
    std::string tail;
    std::chrono::milliseconds interval{0};
  };

  /// Returns an Anthropic message whose text is `content` and whose `usage` is `usage`.
  static ScriptedResponse anthropic_message(const std::string& content, const LoopbackUsage& usage) {
    ScriptedResponse r;
    r.body =
        R"({"id":"msg_loopback","type":"message","role":"assistant","model":"loopback","content":[{"type":"text","text":")" +
        content + R"("}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":)" +
        std::to_string(usage.prompt_tokens) + R"(,"output_tokens":)" + std::to_string(usage.completion_tokens) + "}}";
    return r;
  }

  /// Returns the streamed answer to a request charged `usage` (see enforce): Anthropic's events when
  /// `anthropic`, else OpenAI's chunks, with a usage chunk when `include_usage`.
  static OwnStream own_stream(bool anthropic, const LoopbackUsage& usage, bool include_usage,
                              std::chrono::milliseconds interval) {
    OwnStream stream;
    stream.count = usage.completion_tokens;
    stream.interval = interval;
    if (anthropic) {
      const auto event = [](const char* name, const std::string& data) {
        return std::string("event: ").append(name).append("\ndata: ").append(data).append("\n\n");
      };
      const auto delta = [&](const char* text) {
        return event("content_block_delta",
                     std::string(R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":")")
                         .append(text)
                         .append(R"("}})"));
      };
      stream.head =
          event(
              "message_start",
              R"({"type":"message_start","message":{"id":"msg_loopback","type":"message","role":"assistant","model":"loopback","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":)" +
                  std::to_string(usage.prompt_tokens) + R"(,"output_tokens":0}}})") +
          event("content_block_start",
                R"({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})");
      stream.first = delta("loopback");
      stream.next = delta(" loopback");
      stream.tail =
          event("content_block_stop", R"({"type":"content_block_stop","index":0})") +
          event(
              "message_delta",
              R"({"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":)" +
                  std::to_string(usage.completion_tokens) + "}}") +
          event("message_stop", R"({"type":"message_stop"})");
      return stream;
    }
    const std::string created =
        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(real_wall_now().time_since_epoch()).count());
    const auto chunk = [&](const std::string& rest) {
      return std::string(R"(data: {"id":"chatcmpl-loopback","object":"chat.completion.chunk","created":)")
          .append(created)
          .append(R"(,"model":"loopback",)")
          .append(rest)
          .append("}\n\n");
    };
    const auto content = [&](const char* text) {
      return chunk(std::string(R"("choices":[{"index":0,"delta":{"content":")")
                       .append(text)
                       .append(R"("},"finish_reason":null}])"));
    };
    stream.head = chunk(R"("choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}])");
    stream.first = content("loopback");
    stream.next = content(" loopback");
    stream.tail = chunk(R"("choices":[{"index":0,"delta":{},"finish_reason":"stop"}])");
    if (include_usage) {
      stream.tail += chunk(R"("choices":[],"usage":{"prompt_tokens":)" + std::to_string(usage.prompt_tokens) +
                           R"(,"completion_tokens":)" + std::to_string(usage.completion_tokens) +
                           R"(,"total_tokens":)" + std::to_string(usage.tokens()) + "}");
    }
    stream.tail += "data: [DONE]\n\n";
    return stream;
  }

  /// Writes `stream` to `sink`, pausing before each content event. Returns false when the client went away
  /// or the provider stops.
  bool write(const OwnStream& stream, httplib::DataSink& sink) {
    if (!sink.write(stream.head.data(), stream.head.size())) return false;
    for (std::int64_t i = 0; i < stream.count; ++i) {
      if (stream.interval.count() > 0 && !pause(stream.interval)) return false;
      const std::string& event = i == 0 ? stream.first : stream.next;
      if (!sink.write(event.data(), event.size())) return false;
    }
    if (!sink.write(stream.tail.data(), stream.tail.size())) return false;
    sink.done();
    return true;
  }

  void answer(const httplib::Request& request, httplib::Response& response) {
    ReceivedRequest received{request.method, request.path, {}, request.body, request.remote_port};
    for (const auto& [name, value] : request.headers) received.headers.emplace_back(name, value);
    ScriptedResponse scripted;
    std::optional<OwnStream> own;
    LoopbackRateLimit::Headers rate_headers;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      client_ports_.insert(received.client_port);
      received_.push_back(std::move(received));
      std::optional<LoopbackUsage> usage;
      bool admitted = true;
      if (rate_) {
        usage = loopback_usage(request.body, rate_->limits());
        LoopbackRateLimit::Verdict verdict = rate_->admit(usage->tokens(), real_now());
        admitted = verdict.admitted;
        if (!admitted) scripted = rate_limit_exceeded(verdict.limited_by, verdict.wait);
        rate_headers = std::move(verdict.headers);
      }
      if (!admitted) {
        ++refused_;
      } else {
        ++served_;
        if (!script_.empty()) {
          scripted = std::move(script_.front());
          script_.pop_front();
        } else if (usage) {
          const std::string_view path = request.path;
          const bool anthropic = path.size() >= 9 && path.substr(path.size() - 9) == "/messages";
          if (detail::json_true(request.body, "stream")) {
            own = own_stream(anthropic, *usage, detail::json_true(request.body, "include_usage"),
                             rate_->limits().token_interval);
          } else {
            scripted = anthropic ? anthropic_message("loopback", *usage) : chat_completion("loopback", *usage);
          }
        } else {
          scripted.status = 500;
          scripted.body = R"({"error":{"message":"loopback provider: the script is empty","type":"server_error"}})";
        }
        if (rate_) scripted.delay += rate_->limits().latency;
      }
      if (scripted.delay.count() > 0) wake_.wait_for(lock, scripted.delay, [this] { return stopping_; });
    }
    response.status = scripted.status;
    for (const auto& [name, value] : scripted.headers) response.set_header(name, value);
    for (const auto& [name, value] : rate_headers)
      if (!response.has_header(name.c_str())) response.set_header(name, value);
    if (own) {
      response.set_chunked_content_provider(
          "text/event-stream",
          [this, stream = std::move(*own)](std::size_t, httplib::DataSink& sink) { return write(stream, sink); });
      return;
    }
    switch (scripted.mode) {
      case ScriptedResponse::Mode::whole: response.set_content(scripted.body, scripted.content_type.c_str()); break;
      case ScriptedResponse::Mode::cut_body: {
        const std::string part = scripted.body.substr(0, scripted.cut_after);
        response.set_content_provider(scripted.body.size(), scripted.content_type.c_str(),
                                      [part](std::size_t, std::size_t, httplib::DataSink& sink) {
                                        sink.write(part.data(), part.size());
                                        return false;  // closes the connection before the rest
                                      });
        break;
      }
      case ScriptedResponse::Mode::stream: {
        response.set_chunked_content_provider(
            scripted.content_type.c_str(), [this, chunks = scripted.chunks, cut = scripted.cut,
                                            interval = scripted.chunk_interval](std::size_t, httplib::DataSink& sink) {
              for (std::size_t i = 0; i < chunks.size(); ++i) {
                if (i > 0 && interval.count() > 0 && !pause(interval)) return false;
                if (!sink.write(chunks[i].data(), chunks[i].size())) return false;
              }
              if (cut) return false;  // closes the connection without the final chunk
              sink.done();
              return true;
            });
        break;
      }
    }
  }

  /// Shuts down every connection this server accepted that is still open and not answering a request,
  /// found among the process's descriptors (listed in /proc/self/fd or /dev/fd; where neither exists, does
  /// nothing): a server thread waiting for the next request of a connection kept alive sees it end at once
  /// instead of after the keep-alive timeout, while an answer being made or written still goes out whole
  /// (a request that arrives at that very moment may be cut). Each descriptor is duplicated first, so that
  /// the check and the shutdown concern one socket even when its number is closed and reused meanwhile.
  void shut_down_connections() noexcept {
#if !defined(_WIN32)
    std::map<int, int> answering;
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      answering = answering_;
    } catch (...) {
      return;  // out of memory: the idle connections wait for their keep-alive timeout
    }
    std::vector<int> descriptors;
    for (const char* folder : {"/proc/self/fd", "/dev/fd"}) {
      DIR* dir = ::opendir(folder);
      if (dir == nullptr) continue;
      while (const dirent* entry = ::readdir(dir)) {
        const std::string_view name(static_cast<const char*>(entry->d_name));
        if (name.empty() || name.find_first_not_of("0123456789") != std::string_view::npos || name.size() > 9) continue;
        int descriptor = 0;
        for (const char digit : name) descriptor = descriptor * 10 + (digit - '0');
        try {
          descriptors.push_back(descriptor);
        } catch (...) {
          break;  // out of memory: the rest wait for their keep-alive timeout
        }
      }
      ::closedir(dir);
      break;
    }
    for (const int descriptor : descriptors) {
      const int copy = ::fcntl(descriptor, F_DUPFD_CLOEXEC, 0);
      if (copy < 0) continue;
      sockaddr_in local{};
      sockaddr_in peer{};
      socklen_t local_size = sizeof local;
      socklen_t peer_size = sizeof peer;
      auto* local_address = reinterpret_cast<sockaddr*>(&local);  // NOLINT(*-reinterpret-cast): the sockets API
      auto* peer_address = reinterpret_cast<sockaddr*>(&peer);    // NOLINT(*-reinterpret-cast): the sockets API
      const bool idle = ::getsockname(copy, local_address, &local_size) == 0 && local.sin_family == AF_INET &&
                        ntohs(local.sin_port) == port_ && ntohl(local.sin_addr.s_addr) == INADDR_LOOPBACK &&
                        ::getpeername(copy, peer_address, &peer_size) == 0 &&
                        answering.count(ntohs(peer.sin_port)) == 0;
      if (idle) ::shutdown(copy, SHUT_RDWR);
      ::close(copy);
    }
#endif
  }

  /// Waits `duration`, cut short when the provider stops. Returns false when it stops.
  bool pause(std::chrono::milliseconds duration) {
    std::unique_lock<std::mutex> lock(mutex_);
    return !wake_.wait_for(lock, duration, [this] { return stopping_; });
  }

  httplib::Server server_;
  socket_t listening_ = INVALID_SOCKET;  ///< the server's listening socket, once bound
  std::thread thread_;
  int port_ = 0;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::deque<ScriptedResponse> script_;
  std::vector<ReceivedRequest> received_;
  std::set<int> client_ports_;    ///< the ReceivedRequest::client_port of every request
  std::map<int, int> answering_;  ///< the client ports of the connections answering a request: how many
  std::optional<LoopbackRateLimit> rate_;
  std::int64_t served_ = 0;
  std::int64_t refused_ = 0;
};

}  // namespace testing
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_LOOPBACK_PROVIDER_HPP
