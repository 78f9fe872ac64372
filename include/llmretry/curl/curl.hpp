#ifndef LLMRETRY_CURL_CURL_HPP
#define LLMRETRY_CURL_CURL_HPP

/// The libcurl adapter: one HTTP attempt with separate connect and total timeouts, its outcome turned
/// into the library's Failure (with whether the request can have reached the provider), one
/// Idempotency-Key per logical call, and the streaming guard for server-sent events.
/// Needs libcurl (target llmretry::curl). Requires exceptions.

#include <curl/curl.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../detail/config.hpp"
#include "../detail/text.hpp"
#include "../errors.hpp"
#include "../failure.hpp"
#include "../headers.hpp"
#include "../idempotency.hpp"
#include "../providers.hpp"
#include "../sse.hpp"
#include "../stream.hpp"

namespace llmretry::curl {

/// Header names and values, in the order sent or received.
using HeaderList = std::vector<std::pair<std::string, std::string>>;

/// An HTTP request to send. The body is sent as is (serialise your JSON first).
struct Request {
  std::string method = "POST";  ///< "POST", "GET", or any other method
  std::string url;
  HeaderList headers;  ///< such as Authorization and Content-Type; never logged by the library
  std::string body;
};

/// What the server answered to one attempt.
struct Response {
  int status = 0;
  HeaderList headers;  ///< those of the final response, as received
  std::string body;    ///< empty for a streamed answer, whose events went to the handler

  /// Returns the value of the first header called `name` (case-insensitive), or nullopt.
  std::optional<std::string_view> header(std::string_view name) const {
    std::optional<std::string_view> found;
    llmretry::detail::with_header(headers, name, [&](std::string_view value) { found = value; });
    return found;
  }
};

/// How attempts are made. Every member has a meaningful default.
struct Options {
  Provider provider = Provider::openai;               ///< whose error semantics classify a failed response
  std::chrono::milliseconds connect_timeout{10'000};  ///< the most one attempt may take to connect
  std::chrono::milliseconds timeout{600'000};         ///< the most one attempt may take in all
  /// No attempt may run past this point (each attempt's timeout is shortened to end by then, and an
  /// attempt that would start after it fails at once as a timeout that was not sent). Measured on
  /// std::chrono::steady_clock. Unset: no limit beyond `timeout`.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  /// Extracts the strings of an error body (such as llmretry::json::error_fields). Empty: only the status
  /// and headers classify a failed response.
  std::function<ErrorFields(std::string_view body)> read_error;
  /// The header that carries the idempotency key; empty: not sent.
  std::string idempotency_header = "Idempotency-Key";
  /// The header that carries the attempt number (1, 2, 3...); empty: not sent.
  std::string attempt_header = "X-Attempt";
};

/// The provider answered with an error status. Carries the classified failure and the whole response
/// (status, headers, body), for instance to read its rate-limit state with parse_rate_limits.
class HttpError : public ProviderError {
 public:
  /// An error for `response`, classified as `failure`.
  HttpError(const std::string& message, const Failure& failure, Response response)
      : ProviderError(message, failure), response_(std::move(response)) {}
  /// Returns the response that carried the error.
  const Response& response() const noexcept { return response_; }

 private:
  Response response_;
};

/// Returns the failure a libcurl transfer error means. `request_sent`: whether any byte of the request
/// went out. Connect refused, unresolved host and a timeout before sending are Sent::not_sent (always safe to
/// repeat); a timeout, reset or cut answer after sending is Sent::maybe_processed (the provider may have done the
/// work). Errors that another attempt cannot fix (bad URL, TLS certificate...) are FailureKind::unknown,
/// never retried.
constexpr Failure transport_failure(CURLcode code, bool request_sent) noexcept {
  const Sent sent = request_sent ? Sent::maybe_processed : Sent::not_sent;
  switch (code) {
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT: return Failure::connection_failed(Sent::not_sent);
    case CURLE_OPERATION_TIMEDOUT: return Failure::timed_out(sent);
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM: return Failure::connection_failed(sent);
    default: return Failure::of(FailureKind::unknown, sent);
  }
}

namespace detail {

/// Initialises libcurl once per process, before the first handle (curl_easy_init alone is not
/// thread-safe about it).
inline void global_init() {
  static const CURLcode code = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (code != CURLE_OK) throw ProviderError("curl_global_init failed", Failure{});
}

struct EasyDeleter {
  void operator()(CURL* handle) const noexcept { curl_easy_cleanup(handle); }
};
struct ListDeleter {
  void operator()(curl_slist* list) const noexcept { curl_slist_free_all(list); }
};

/// What the callbacks of one transfer fill in.
struct Transfer {
  CURL* handle = nullptr;
  const Options* options = nullptr;
  const std::function<void(const SseEvent&)>* on_event = nullptr;  ///< set for a streamed call
  StreamGuard* guard = nullptr;                                    ///< set for a streamed call
  Response response;
  SseParser sse;
  std::optional<ErrorFields> stream_error;  ///< an SSE `error` event arrived
  std::exception_ptr handler_error;         ///< on_event threw
  std::optional<bool> events;               ///< whether the body is an event stream, once known

  /// Returns true when the body is to be parsed as events: a streamed call, answered with a 2xx
  /// `text/event-stream` (anything else, such as a JSON error, is kept whole in the body).
  bool is_event_stream() {
    if (!events) {
      long status = 0;
      curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &status);
      const auto type = response.header("Content-Type");
      events = on_event != nullptr && status >= 200 && status <= 299 && type &&
               llmretry::detail::iequals(type->substr(0, 17), "text/event-stream");
    }
    return *events;
  }
};

inline std::size_t on_header(char* data, std::size_t size, std::size_t count, void* user) noexcept {
  auto& transfer = *static_cast<Transfer*>(user);
  std::string_view line(data, size * count);
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.remove_suffix(1);
  try {
    if (line.substr(0, 5) == "HTTP/") {
      transfer.response.headers.clear();  // an interim (1xx) response came first
      transfer.events.reset();
    } else if (const auto colon = line.find(':'); colon != std::string_view::npos && colon > 0) {
      transfer.response.headers.emplace_back(std::string(llmretry::detail::trim_ows(line.substr(0, colon))),
                                             std::string(llmretry::detail::trim_ows(line.substr(colon + 1))));
    }
  } catch (...) {
    transfer.handler_error = std::current_exception();
    return 0;
  }
  return size * count;
}

inline std::size_t on_body(char* data, std::size_t size, std::size_t count, void* user) noexcept {
  auto& transfer = *static_cast<Transfer*>(user);
  const std::string_view bytes(data, size * count);
  try {
    if (!transfer.is_event_stream()) {
      transfer.response.body.append(bytes);
      return bytes.size();
    }
    bool stop = false;
    transfer.sse.feed(bytes, [&](const SseEvent& event) {
      if (stop) return;
      if (event.event == "error") {
        transfer.stream_error = transfer.options->read_error ? transfer.options->read_error(event.data) : ErrorFields{};
        stop = true;
        return;
      }
      transfer.guard->deliver(event.data.size());
      (*transfer.on_event)(event);
    });
    return stop ? 0 : bytes.size();
  } catch (...) {
    transfer.handler_error = std::current_exception();
    return 0;
  }
}

/// Throws the failure of a transfer, as StreamInterrupted once a stream has started.
[[noreturn]] inline void throw_failure(const Transfer& transfer, const std::string& message, const Failure& failure) {
  if (transfer.guard != nullptr && transfer.guard->started())
    throw StreamInterrupted(message + " (stream interrupted)", *transfer.guard, failure);
  if (failure.status != 0) throw HttpError(message, failure, transfer.response);
  throw_provider_error(message, failure);  // a transport failure: no status
}

/// Returns the attempt's total timeout: options.timeout, shortened to end at the deadline.
/// Throws std::invalid_argument when a timeout is not positive (libcurl would read 0 as "no limit"),
/// ProviderTimeout (not sent) when the deadline has passed.
inline std::chrono::milliseconds attempt_timeout(const Options& options) {
  using namespace std::chrono;
  if (options.connect_timeout <= milliseconds::zero())
    llmretry::detail::throw_invalid_argument("curl::Options::connect_timeout must be positive");
  if (options.timeout <= milliseconds::zero())
    llmretry::detail::throw_invalid_argument("curl::Options::timeout must be positive");
  if (!options.deadline) return options.timeout;
  const auto left = floor<milliseconds>(*options.deadline - steady_clock::now());
  if (left <= milliseconds::zero()) throw ProviderTimeout("deadline passed before the attempt", Sent::not_sent);
  return std::min(options.timeout, left);
}

}  // namespace detail

/// Makes one attempt of `request` with `extra_headers` added, and returns the 2xx response.
/// With `on_event` and `guard` (a streamed call), a 2xx `text/event-stream` body is parsed as server-sent
/// events handed to `on_event` one by one, each recorded in `guard`; an SSE `error` event ends the
/// attempt as a failure. Any other body (a server that does not stream) is returned whole in the body.
/// Throws: std::invalid_argument when a timeout in `options` is not positive; HttpError for an error
/// status (classified for options.provider); ProviderTimeout or ConnectionError for a transfer failure
/// (Sent::not_sent when no byte of the request went out); StreamInterrupted for any failure after `guard` has
/// started; ProviderError (kind unknown) for other libcurl errors; whatever `on_event` throws, unchanged.
inline Response perform(const Request& request, const Options& options, const HeaderList& extra_headers = {},
                        const std::function<void(const SseEvent&)>* on_event = nullptr, StreamGuard* guard = nullptr) {
  detail::global_init();
  const std::unique_ptr<CURL, detail::EasyDeleter> easy(curl_easy_init());
  if (!easy) throw ProviderError("curl_easy_init failed", Failure{});
  CURL* handle = easy.get();
  detail::Transfer transfer;
  transfer.handle = handle;
  transfer.options = &options;
  if (on_event != nullptr && guard != nullptr) {
    transfer.on_event = on_event;
    transfer.guard = guard;
  }

  std::unique_ptr<curl_slist, detail::ListDeleter> list;
  const auto add = [&](const std::string& line) {
    curl_slist* grown = curl_slist_append(list.get(), line.c_str());
    if (grown == nullptr) throw std::bad_alloc();
    static_cast<void>(list.release());
    list.reset(grown);
  };
  for (const auto& [name, value] : request.headers) add(std::string(name).append(": ").append(value));
  for (const auto& [name, value] : extra_headers) add(std::string(name).append(": ").append(value));
  add("Expect:");  // no 100-continue round trip before the body

  std::array<char, CURL_ERROR_SIZE> error_text{};
  const auto timeout = detail::attempt_timeout(options);
  curl_easy_setopt(handle, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(handle, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(handle, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options.connect_timeout.count()));
  curl_easy_setopt(handle, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
  curl_easy_setopt(handle, CURLOPT_HTTPHEADER, list.get());
  curl_easy_setopt(handle, CURLOPT_ERRORBUFFER, error_text.data());
  curl_easy_setopt(handle, CURLOPT_HEADERFUNCTION, &detail::on_header);
  curl_easy_setopt(handle, CURLOPT_HEADERDATA, &transfer);
  curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, &detail::on_body);
  curl_easy_setopt(handle, CURLOPT_WRITEDATA, &transfer);
  if (request.method == "GET") {
    curl_easy_setopt(handle, CURLOPT_HTTPGET, 1L);
  } else {
    curl_easy_setopt(handle, CURLOPT_POSTFIELDS, request.body.data());
    curl_easy_setopt(handle, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
    if (request.method != "POST") curl_easy_setopt(handle, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  }

  const CURLcode code = curl_easy_perform(handle);
  if (transfer.handler_error) std::rethrow_exception(transfer.handler_error);
  long status = 0;
  curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &status);
  transfer.response.status = static_cast<int>(status);

  if (transfer.stream_error) {
    const Failure failure = classify_provider_error(options.provider, transfer.response.status, *transfer.stream_error);
    detail::throw_failure(transfer, "SSE error event: " + describe(failure), failure);
  }
  if (code != CURLE_OK) {
    long request_size = 0;
    curl_easy_getinfo(handle, CURLINFO_REQUEST_SIZE, &request_size);
    const Failure failure = transport_failure(code, request_size > 0);
    std::string message = curl_easy_strerror(code);
    if (error_text[0] != '\0') message.append(": ").append(error_text.data());
    detail::throw_failure(transfer, message, failure);
  }
  if (status < 200 || status > 299) {
    const ErrorFields fields = options.read_error ? options.read_error(transfer.response.body) : ErrorFields{};
    const Failure failure =
        classify_provider_response(options.provider, transfer.response.status, transfer.response.headers,
                                   std::chrono::system_clock::now(), fields);
    std::string message = describe(failure);
    for (const std::string* name : {&fields.code, &fields.type, &fields.status}) {
      if (name->empty()) continue;
      message += " (" + *name + ")";
      break;
    }
    detail::throw_failure(transfer, message, failure);
  }
  return std::move(transfer.response);
}

/// One logical call: every attempt sends the same idempotency key and its attempt number, so that a
/// server or gateway can deduplicate and count retries. Pass it to call_with_retry as the call
/// (`llmretry::call_with_retry(call, policy)`): each invocation is one attempt.
/// Set `on_event` for a streamed call (`"stream": true`): a failure before any event reached the handler
/// is retried like any other; after, it is thrown as StreamInterrupted, which is never retried.
class Call {
 public:
  /// A call of `request` under `options`. `idempotency_key`: your own key (such as the id of the
  /// operation in your database); empty: a new UUID v4 (new_idempotency_key).
  explicit Call(Request request, Options options = {}, std::string idempotency_key = {})
      : request_(std::move(request)),
        options_(std::move(options)),
        key_(idempotency_key.empty() ? new_idempotency_key() : std::move(idempotency_key)) {}

  /// Makes the call streamed: each server-sent event of a 2xx answer goes to `handler`, in order.
  /// Returns *this.
  Call& on_event(std::function<void(const SseEvent&)> handler) {
    on_event_ = std::move(handler);
    return *this;
  }

  /// Makes the next attempt. Returns the 2xx response; throws as perform does.
  Response operator()() {
    ++attempts_;
    HeaderList extra;
    if (!options_.idempotency_header.empty()) extra.emplace_back(options_.idempotency_header, key_);
    if (!options_.attempt_header.empty()) extra.emplace_back(options_.attempt_header, std::to_string(attempts_));
    if (on_event_) return perform(request_, options_, extra, &on_event_, &guard_);
    return perform(request_, options_, extra);
  }

  /// Returns the idempotency key every attempt sends.
  const std::string& idempotency_key() const noexcept { return key_; }
  /// Returns the attempts made so far.
  int attempts() const noexcept { return attempts_; }
  /// Returns the stream's guard: how much content reached the handler.
  const StreamGuard& stream() const noexcept { return guard_; }

 private:
  Request request_;
  Options options_;
  std::string key_;
  std::function<void(const SseEvent&)> on_event_;
  StreamGuard guard_;
  int attempts_ = 0;
};

}  // namespace llmretry::curl

#endif  // LLMRETRY_CURL_CURL_HPP
