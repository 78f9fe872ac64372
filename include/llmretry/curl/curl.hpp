#ifndef LLMRETRY_CURL_CURL_HPP
#define LLMRETRY_CURL_CURL_HPP

/// The libcurl adapter: one HTTP attempt with separate connect, idle and total timeouts and size limits,
/// its outcome turned into the library's Failure (with whether the request can have reached the provider), one
/// Idempotency-Key per logical call, and the streaming guard for server-sent events.
/// Needs libcurl (target llmretry::curl). Requires exceptions.

#include <curl/curl.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../attempt.hpp"
#include "../clock.hpp"
#include "../detail/config.hpp"
#include "../detail/text.hpp"
#include "../errors.hpp"
#include "../failure.hpp"
#include "../http/headers.hpp"
#include "../http/idempotency.hpp"
#include "../http/providers.hpp"
#include "../http/sse.hpp"
#include "../http/stream.hpp"
#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace curl {

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
  int status = 0;      ///< the HTTP status (libcurl's `long`, narrowed: statuses are three digits)
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
  /// The most one attempt may go without receiving a byte, waiting for the first one included (checked
  /// about once a second): for a stream, the longest silence between events. Unset: no limit beyond
  /// `timeout` (a non-streamed answer arrives only once it is whole).
  std::optional<std::chrono::milliseconds> idle_timeout;
  /// Set: the caller's flag to abort the attempt, checked about once a second (the caller's client went
  /// away). Once it holds true the attempt ends as a FailureKind::unknown failure, never retried, whose
  /// text names Options::cancel. It must outlive the attempt.
  const std::atomic<bool>* cancel = nullptr;
  /// Extracts the strings of an error body (such as llmretry::json::error_fields). Empty: only the status
  /// and headers classify a failed response, and an error sent inside a stream as a data-only event
  /// (OpenAI's `data: {"error": ...}`) is not recognised.
  std::function<ErrorFields(std::string_view body)> read_error;
  /// The header that carries the idempotency key; empty: not sent.
  std::string idempotency_header = "Idempotency-Key";
  /// The header that carries the attempt number (1, 2, 3...); empty: not sent.
  std::string attempt_header = "X-Attempt";
  /// Request headers whose values never appear in an exception's text, even when the server echoes them
  /// (names case-insensitive; for "Bearer KEY" the key alone is hidden too).
  std::vector<std::string> secret_headers = {"Authorization", "Proxy-Authorization", "api-key", "x-api-key",
                                             "x-goog-api-key"};
  /// The content encodings asked for in Accept-Encoding, and decoded: empty, every one libcurl supports
  /// (gzip, deflate, br, zstd...); "identity", none (for a server on the same machine, where compressing
  /// costs more than it saves); or a list such as "gzip".
  std::string accept_encoding;
  /// Size limits, counted after decoding (the content encodings are decoded). Passing one
  /// fails the attempt as FailureKind::too_large, never retried (the next answer would be as large),
  /// except the error body: past its limit, the error is classified by status and headers alone.
  std::size_t max_body = std::size_t{64} << 20;                      ///< a whole (not streamed) 2xx body: 64 MiB
  std::size_t max_error_body = std::size_t{64} << 10;                ///< an error body, kept and parsed: 64 KiB
  std::size_t max_header_bytes = std::size_t{64} << 10;              ///< the response's header lines together: 64 KiB
  std::size_t max_event_bytes = SseParser::default_max_event_bytes;  ///< one server-sent event: 1 MiB
  /// libcurl's receive buffer of each request in flight (CURLOPT_BUFFERSIZE), 1 KiB to 10 MiB: a program with
  /// thousands of streams at once saves memory with a small one.
  std::size_t receive_buffer = std::size_t{16} << 10;
  /// libcurl's upload buffer of each request in flight that has a body to send through it
  /// (CURLOPT_UPLOAD_BUFFERSIZE), 16 KiB to 2 MiB: over HTTP/2 every request with a body has one, so a program
  /// with thousands of requests at once saves memory with a small one. With libcurl 7.88 to 8.6, which keep it
  /// until the transfer ends, a request whose body is not sent chunked gives it back once the whole body is
  /// sent and the response's headers have come (a stream holds none while its events arrive); libcurl 8.7
  /// and later send every request through a buffer of this size that the transfer keeps.
  std::size_t upload_buffer = std::size_t{64} << 10;
  /// The certificate authorities that vouch for an https server, a PEM file (CURLOPT_CAINFO), in place of
  /// libcurl's own bundle (the system's), for a server whose certificate a private authority signed; empty:
  /// libcurl's own bundle.
  std::string ca_file;
};

/// What every ProviderError the adapter throws also is (except StreamInterrupted): the response of the
/// failed attempt, as far as it arrived (status 0 when there was none). Catch the llmretry class
/// (RateLimited, ProviderTimeout...) and read the response with response_of, or catch WithResponse.
class WithResponse {
 public:
  /// Carries `response`.
  explicit WithResponse(Response response) : response_(std::move(response)) {}
  /// Returns the response that carried the error.
  const Response& response() const noexcept { return response_; }

 private:
  Response response_;
};

/// Returns the response an exception thrown by the adapter carries, or nullptr for any other exception.
inline const Response* response_of(const std::exception& error) noexcept {
  const auto* with = dynamic_cast<const WithResponse*>(&error);
  return with != nullptr ? &with->response() : nullptr;
}

/// Returns the failure a libcurl transfer error means. `request_sent`: whether any byte of the request
/// went out. Connect refused, unresolved host and a timeout before sending are Sent::not_sent (always safe to
/// repeat); a timeout, reset or cut answer after sending is Sent::maybe_processed (the provider may have done the
/// work). A header larger than libcurl accepts is FailureKind::too_large; errors that another attempt
/// cannot fix (bad URL, TLS certificate, bad content encoding...) are FailureKind::unknown, never retried.
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
#if LIBCURL_VERSION_NUM >= 0x080600
    case CURLE_TOO_LARGE: return Failure::of(FailureKind::too_large, sent);
#endif
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

/// Resets the options of `handle` (curl_easy_reset: its connections and caches stay) when it goes out of
/// scope, so that a handle kept for the next attempt never points at the locals of one that has returned
/// or thrown (its callbacks' data, header list, error buffer, request body). Requires `handle` to outlive it.
class ResetOnExit {
 public:
  explicit ResetOnExit(CURL* handle) noexcept : handle_(handle) {}
  ResetOnExit(const ResetOnExit&) = delete;
  ResetOnExit& operator=(const ResetOnExit&) = delete;
  ResetOnExit(ResetOnExit&&) = delete;
  ResetOnExit& operator=(ResetOnExit&&) = delete;
  ~ResetOnExit() { curl_easy_reset(handle_); }

 private:
  CURL* handle_;
};

/// Returns true when `event` ends a complete stream of `provider`: `data: [DONE]` (OpenAI, Azure chat
/// completions), `event: response.completed` or `response.incomplete` (their Responses API, which sends no
/// [DONE]; `response.failed` is an error, see Transfer::error_in), `event: message_stop` (Anthropic), a chunk
/// with a `finishReason` (Gemini).
inline bool ends_stream(Provider provider, const SseEvent& event) noexcept {
  switch (provider) {
    case Provider::openai:
    case Provider::azure_openai:
      return event.data == "[DONE]" || event.event == "response.completed" || event.event == "response.incomplete";
    case Provider::anthropic: return event.event == "message_stop";
    case Provider::gemini: return event.data.find("\"finishReason\"") != std::string::npos;
  }
  return false;
}

/// What the callbacks of one transfer fill in.
struct Transfer {
  Transfer(CURL* easy, const Options& transfer_options)
      : handle(easy), options(&transfer_options), sse(transfer_options.max_event_bytes), last_byte(real_now()) {}

  CURL* handle;
  const Options* options;
  /// The request body's bytes, all sent once libcurl counts that many uploaded; 0 when that says nothing (no
  /// body, or a body sent chunked, whose framing libcurl counts too)
  std::size_t upload_size = 0;
  const std::function<void(const SseEvent&)>* on_event = nullptr;  ///< set for a streamed call
  StreamGuard* guard = nullptr;                                    ///< set for a streamed call
  Response response;
  SseParser sse;
  std::optional<ErrorFields> stream_error;  ///< an SSE error event arrived
  std::exception_ptr handler_error;         ///< on_event threw
  std::optional<bool> events;               ///< whether the body is an event stream, once known
  std::size_t header_bytes = 0;             ///< header bytes received so far
  bool headers_done = false;                ///< the final response's header block has ended
  const char* too_large = nullptr;          ///< the Options limit the answer passed, if any
  bool error_body_cut = false;              ///< the error body passed max_error_body: not parsed
  bool ended = false;                       ///< the stream's end marker arrived
  bool idle = false;                        ///< aborted: no byte for Options::idle_timeout
  bool cancelled = false;                   ///< aborted: Options::cancel held true
  std::chrono::steady_clock::time_point last_byte;

  long status() const noexcept {
    long code = 0;
    curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &code);
    return code;
  }

  /// Returns true when the body is to be parsed as events: a streamed call, answered with a 2xx
  /// `text/event-stream` (anything else, such as a JSON error, is kept whole in the body).
  bool is_event_stream() {
    if (!events) {
      const long code = status();
      const auto type = response.header("Content-Type");
      events = on_event != nullptr && code >= 200 && code <= 299 && type &&
               llmretry::detail::iequals(type->substr(0, 17), "text/event-stream");
    }
    return *events;
  }

  /// Returns the strings of an error sent inside the stream: an `event: error`, an `event: response.failed`
  /// (the Responses API: its error in `response.error`), or a data-only event whose JSON has an `error`
  /// object (read with Options::read_error); nullopt for content.
  std::optional<ErrorFields> error_in(const SseEvent& event) const {
    const auto& read = options->read_error;
    if (event.event == "error" || event.event == "response.failed") return read ? read(event.data) : ErrorFields{};
    if (!read || event.data.find("\"error\"") == std::string::npos) return std::nullopt;
    ErrorFields fields = read(event.data);
    if (fields.empty()) return std::nullopt;
    return fields;
  }
};

/// Returns true when the libcurl running keeps a transfer's upload buffer until the transfer ends and frees it
/// when CURLOPT_UPLOAD_BUFFERSIZE is set (7.88 to 8.6): release_upload_buffer does something.
inline bool frees_upload_buffer() noexcept {
  static const bool frees = [] {
    const unsigned version = curl_version_info(CURLVERSION_NOW)->version_num;
    return version >= 0x075800 && version < 0x080700;
  }();
  return frees;
}

/// Frees the upload buffer of `transfer` once its whole body is sent, where frees_upload_buffer(); libcurl makes
/// another if the handle needs one. libcurl's manual asks not to set CURLOPT_UPLOAD_BUFFERSIZE during a
/// transfer; in these versions setting it only stores the size and frees the buffer, and a buffer whose bytes
/// have all gone out is referred to no more. A body byte goes out only after the request line and headers:
/// once libcurl counts Transfer::upload_size bytes uploaded, nothing is left to send. Without an upload_size
/// nothing is freed, since what is left may still be waiting there (the headers over HTTP/1.1 and TLS, a
/// chunk's framing).
inline void release_upload_buffer(const Transfer& transfer) noexcept {
  curl_off_t sent = 0;
  if (transfer.upload_size == 0 || !frees_upload_buffer() ||
      curl_easy_getinfo(transfer.handle, CURLINFO_SIZE_UPLOAD_T, &sent) != CURLE_OK || sent < 0 ||
      static_cast<std::size_t>(sent) < transfer.upload_size)
    return;
  curl_easy_setopt(transfer.handle, CURLOPT_UPLOAD_BUFFERSIZE, static_cast<long>(transfer.options->upload_buffer));
}

inline std::size_t on_header(char* data, std::size_t size, std::size_t count, void* user) noexcept {
  auto& transfer = *static_cast<Transfer*>(user);
  transfer.last_byte = real_now();
  std::string_view line(data, size * count);
  transfer.header_bytes += line.size();
  if (transfer.header_bytes > transfer.options->max_header_bytes) {
    transfer.too_large = "Options::max_header_bytes";
    return 0;
  }
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.remove_suffix(1);
  try {
    if (line.substr(0, 5) == "HTTP/") {
      transfer.response.headers.clear();  // an interim (1xx) response came first
      transfer.events.reset();
    } else if (line.empty()) {
      const long code = transfer.status();
      transfer.headers_done = code < 100 || code > 199;
      if (transfer.headers_done) release_upload_buffer(transfer);
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
  transfer.last_byte = real_now();
  const std::string_view bytes(data, size * count);
  try {
    if (!transfer.is_event_stream()) {
      const long code = transfer.status();
      const bool success = code >= 200 && code <= 299;
      const std::size_t limit = success ? transfer.options->max_body : transfer.options->max_error_body;
      if (bytes.size() > limit - std::min(limit, transfer.response.body.size())) {
        if (success) transfer.too_large = "Options::max_body";
        else transfer.error_body_cut = true;
        return 0;
      }
      transfer.response.body.append(bytes);
      return bytes.size();
    }
    bool stop = false;
    transfer.sse.feed(bytes, [&](const SseEvent& event) {
      if (stop || transfer.ended) return;
      if (auto error = transfer.error_in(event)) {
        transfer.stream_error = std::move(error);
        stop = true;
        return;
      }
      if (!transfer.guard->started()) transfer.guard->streaming_with(transfer.response.headers);
      transfer.guard->deliver(event.data.size());
      (*transfer.on_event)(event);
      transfer.ended = ends_stream(transfer.options->provider, event);
    });
    if (transfer.sse.overflowed()) transfer.too_large = "Options::max_event_bytes";
    return stop || transfer.too_large != nullptr ? 0 : bytes.size();
  } catch (...) {
    transfer.handler_error = std::current_exception();
    return 0;
  }
}

inline int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) noexcept {
  auto& transfer = *static_cast<Transfer*>(user);
  const Options& options = *transfer.options;
  transfer.cancelled = options.cancel != nullptr && options.cancel->load();
  transfer.idle = options.idle_timeout && real_now() - transfer.last_byte > *options.idle_timeout;
  return transfer.cancelled || transfer.idle ? 1 : 0;
}

/// Returns the character of `text` at `at` as JSON text may spell an ASCII one (itself, a \uXXXX escape, or
/// \/ for '/'), and where the next one begins. Requires at < text.size().
constexpr std::pair<char, std::size_t> spelled_char(std::string_view text, std::size_t at) noexcept {
  if (text[at] == '\\' && at + 1 < text.size()) {
    if (text[at + 1] == '/') return {'/', at + 2};
    if (text[at + 1] == 'u' && at + 5 < text.size()) {
      unsigned code = 0;
      for (std::size_t i = at + 2; i < at + 6; ++i) {
        const char c = llmretry::detail::ascii_lower(text[i]);
        const bool digit = c >= '0' && c <= '9';
        if (!digit && (c < 'a' || c > 'f')) return {text[at], at + 1};
        code = code * 16 + static_cast<unsigned>(digit ? c - '0' : c - 'a' + 10);
      }
      if (code < 0x80) return {static_cast<char>(code), at + 6};
    }
  }
  return {text[at], at + 1};
}

/// Returns where `secret`, spelled at `at` in `text` in any ASCII case and any of its characters escaped as
/// JSON may escape them, ends; npos when it is not there.
constexpr std::size_t spelled_end(std::string_view text, std::size_t at, std::string_view secret) noexcept {
  for (const char wanted : secret) {
    if (at >= text.size()) return std::string_view::npos;
    const auto [c, next] = spelled_char(text, at);
    if (llmretry::detail::ascii_lower(c) != llmretry::detail::ascii_lower(wanted)) return std::string_view::npos;
    at = next;
  }
  return at;
}

/// Returns `text` with every secret replaced by "[redacted]", in any ASCII case (a server may echo a key
/// upper- or lower-cased) and with any of its characters written as a JSON escape (\u0073 for 's').
/// Empty secrets are skipped. (A secret split across two texts, such as two events of a stream, is not
/// recognised.)
inline std::string redact(std::string text, const std::vector<std::string>& secrets) {
  constexpr std::string_view mark = "[redacted]";
  std::string out;
  bool found = false;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = std::string_view::npos;
    for (const auto& secret : secrets) {
      if (secret.empty()) continue;
      end = spelled_end(text, at, secret);
      if (end != std::string_view::npos) break;
    }
    if (end == std::string_view::npos) {
      if (found) out.push_back(text[at]);
      ++at;
      continue;
    }
    if (!found) out.assign(text, 0, at);  // the text before the first secret, copied once
    found = true;
    out.append(mark);
    at = end;
  }
  return found ? out : text;
}

/// Returns `text` (libcurl's words for a failed transfer) with the user name and password of every URL in it
/// replaced by "[redacted]": libcurl quotes a proxy it cannot use as given, credentials included. A URL is a
/// run of characters without space or quote; its credentials run from its "://" (or its start) to its last '@'.
inline std::string without_userinfo(std::string_view text) {
  constexpr std::string_view mark = "[redacted]";
  const auto ends_run = [](char c) { return c == ' ' || c == '\'' || c == '"' || c == '\t' || c == '\n'; };
  std::string out;
  for (std::size_t at = 0; at < text.size();) {
    if (ends_run(text[at])) {
      out.push_back(text[at++]);
      continue;
    }
    std::size_t end = at;
    while (end < text.size() && !ends_run(text[end])) ++end;
    const std::string_view run = text.substr(at, end - at);
    const std::size_t last_at = run.rfind('@');
    const std::size_t scheme = run.find("://");
    const std::size_t from = scheme == std::string_view::npos || scheme > last_at ? 0 : scheme + 3;
    if (last_at == std::string_view::npos || last_at == from) {
      out.append(run);
    } else {
      out.append(run.substr(0, from)).append(mark).append(run.substr(last_at));
    }
    at = end;
  }
  return out;
}

/// Returns the values of the request's secret headers (see Options::secret_headers), and for a value
/// such as "Bearer KEY" the key alone; values shorter than 4 characters are left out.
inline std::vector<std::string> secrets_of(const Request& request, const Options& options) {
  std::vector<std::string> secrets;
  for (const auto& header : request.headers) {
    const std::string& name = header.first;
    const std::string& value = header.second;
    const bool secret = std::any_of(options.secret_headers.begin(), options.secret_headers.end(),
                                    [&](const std::string& listed) { return llmretry::detail::iequals(listed, name); });
    if (!secret) continue;
    if (value.size() >= 4) secrets.push_back(value);
    const auto space = value.rfind(' ');
    if (space != std::string::npos && value.size() - space - 1 >= 4) secrets.push_back(value.substr(space + 1));
  }
  std::sort(secrets.begin(), secrets.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
  return secrets;
}

/// Returns " (WORD)" for the first non-empty machine-readable string of `fields` (code, type, status),
/// its secrets redacted, bytes outside printable ASCII replaced by '?', cut at 64 characters; "" when all
/// are empty.
inline std::string server_word(const ErrorFields& fields, const std::vector<std::string>& secrets) {
  constexpr std::size_t max_length = 64;
  for (const std::string* word : {&fields.code, &fields.type, &fields.status}) {
    if (word->empty()) continue;
    std::string text = redact(*word, secrets);
    if (text.size() > max_length) text.replace(max_length, std::string::npos, "...");
    for (char& c : text)
      if (c < 0x20 || c > 0x7E) c = '?';
    return " (" + text + ")";
  }
  return {};
}

/// Throws the failure of a transfer through throw_provider_error, carrying the response (WithResponse),
/// or as StreamInterrupted once a stream has started; secrets are redacted from `message`.
[[noreturn]] inline void throw_failure(Transfer& transfer, const std::vector<std::string>& secrets,
                                       const std::string& message, const Failure& failure) {
  const std::string text = redact(message, secrets);
  if (transfer.guard != nullptr && transfer.guard->started())
    throw StreamInterrupted(text + " (stream interrupted)", *transfer.guard, failure);
  throw_provider_error(text, failure, WithResponse(std::move(transfer.response)));
}

/// Throws std::invalid_argument when a timeout of `options` is not positive (libcurl would read 0 as "no
/// limit"), or its receive_buffer or upload_buffer is out of its range.
inline void validate(const Options& options) {
  using std::chrono::milliseconds;
  if (options.connect_timeout <= milliseconds::zero())
    llmretry::detail::throw_invalid_argument("curl::Options::connect_timeout must be positive");
  if (options.timeout <= milliseconds::zero())
    llmretry::detail::throw_invalid_argument("curl::Options::timeout must be positive");
  if (options.idle_timeout && *options.idle_timeout <= milliseconds::zero())
    llmretry::detail::throw_invalid_argument("curl::Options::idle_timeout must be positive when set");
  if (options.receive_buffer < (std::size_t{1} << 10) || options.receive_buffer > (std::size_t{10} << 20))
    llmretry::detail::throw_invalid_argument("curl::Options::receive_buffer must be within 1 KiB to 10 MiB");
  if (options.upload_buffer < (std::size_t{16} << 10) || options.upload_buffer > (std::size_t{2} << 20))
    llmretry::detail::throw_invalid_argument("curl::Options::upload_buffer must be within 16 KiB to 2 MiB");
}

/// Returns the attempt's total timeout: options.timeout, shortened to `time_left` when set.
/// Throws std::invalid_argument when `options` are not valid (validate) or `time_left` is not positive.
inline std::chrono::milliseconds attempt_timeout(const Options& options,
                                                 std::optional<std::chrono::milliseconds> time_left) {
  using std::chrono::milliseconds;
  validate(options);
  if (!time_left) return options.timeout;
  if (*time_left <= milliseconds::zero())
    llmretry::detail::throw_invalid_argument("curl: Attempt::time_left must be positive when set");
  return std::min(options.timeout, *time_left);
}

/// Returns true when libcurl's own bundle file of certificate authorities (CURLINFO_CAINFO) exists: then it
/// needs no directory of them. Reads it once.
inline bool has_ca_bundle(CURL* handle) noexcept {
#if LIBCURL_VERSION_NUM >= 0x075400
  static const bool has = [handle] {
    char* path = nullptr;
    std::error_code error;
    return curl_easy_getinfo(handle, CURLINFO_CAINFO, &path) == CURLE_OK && path != nullptr &&
           std::filesystem::is_regular_file(path, error);
  }();
  return has;
#else
  static_cast<void>(handle);
  return false;
#endif
}

/// Sets the method and the body of `request` on `handle`: GET and HEAD (CURLOPT_NOBODY) without a body;
/// POST, PUT and PATCH with it, even empty; any other method with it when it is not empty.
/// Throws std::invalid_argument for a GET or HEAD with a body.
inline void set_method(CURL* handle, const Request& request) {
  const std::string& method = request.method;
  if (method == "GET" || method == "HEAD") {
    if (!request.body.empty()) llmretry::detail::throw_invalid_argument("curl::Request: a GET or HEAD has no body");
    curl_easy_setopt(handle, method == "GET" ? CURLOPT_HTTPGET : CURLOPT_NOBODY, 1L);
    return;
  }
  if (method == "POST" || method == "PUT" || method == "PATCH" || !request.body.empty()) {
    curl_easy_setopt(handle, CURLOPT_POSTFIELDS, request.body.data());
    curl_easy_setopt(handle, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  }
  if (method != "POST") curl_easy_setopt(handle, CURLOPT_CUSTOMREQUEST, method.c_str());
}

/// Returns the failure of a transfer that ended with `code` (not CURLE_OK), and its message.
inline std::pair<Failure, std::string> transfer_failure(const Transfer& transfer, CURLcode code,
                                                        const char* error_text) {
  long request_size = 0;
  curl_easy_getinfo(transfer.handle, CURLINFO_REQUEST_SIZE, &request_size);
  const bool sent = request_size > 0;
  const std::string_view text = error_text;
  std::string message = curl_easy_strerror(code);
  if (!text.empty()) message.append(": ").append(without_userinfo(text));
  if (transfer.cancelled)
    return {Failure::of(FailureKind::unknown, sent ? Sent::maybe_processed : Sent::not_sent),
            "cancelled by the caller (Options::cancel)"};
  if (transfer.idle) {
    return {Failure::timed_out(sent ? Sent::maybe_processed : Sent::not_sent),
            "no byte for longer than Options::idle_timeout (" +
                std::to_string(transfer.options->idle_timeout->count()) + " ms)"};
  }
  // libcurl reports a header line above its own limit as out of memory before 8.6, and a header block
  // above its own limit or malformed chunks as a receive error: the next answer would be the same.
  const bool oversized_header = (code == CURLE_OUT_OF_MEMORY && !transfer.headers_done) ||
                                (code == CURLE_RECV_ERROR && text.find("Too large response headers") != text.npos);
  if (oversized_header) return {Failure::of(FailureKind::too_large, Sent::maybe_processed), message};
  if (code == CURLE_RECV_ERROR && text.find("chunked-encoding") != text.npos)
    return {Failure::of(FailureKind::unknown, Sent::maybe_processed), message};
  return {transport_failure(code, sent), message};
}

/// One attempt on an easy handle, blocking (curl_easy_perform) or in a multi handle: sets every option of
/// the handle for `request`, points its callbacks at a Transfer it owns, and turns the outcome into the
/// response or the exception (conclude). The handle's options are reset (curl_easy_reset: its connections
/// and caches stay) when it is destroyed, so that a handle kept for the next attempt never points at what it
/// owned. Neither copied nor moved: the handle points at it. Requires `handle`, `request`, `options` and
/// `on_event`/`guard` (both set for a streamed call, or both null) to outlive it.
/// Throws std::invalid_argument for a GET or HEAD with a body, std::bad_alloc.
class Exchange {
 public:
  Exchange(CURL* handle, const Request& request, const Options& options, const HeaderList& extra_headers,
           const std::function<void(const SseEvent&)>* on_event, StreamGuard* guard, std::chrono::milliseconds timeout)
      : transfer_(handle, options), request_(&request), reset_(handle) {
    if (on_event != nullptr && guard != nullptr) {
      transfer_.on_event = on_event;
      transfer_.guard = guard;
    }
    const auto add = [&](const std::string& line) {
      curl_slist* grown = curl_slist_append(list_.get(), line.c_str());
      if (grown == nullptr) throw std::bad_alloc();
      static_cast<void>(list_.release());
      list_.reset(grown);
    };
    for (const auto& [name, value] : request.headers) add(std::string(name).append(": ").append(value));
    for (const auto& [name, value] : extra_headers) add(std::string(name).append(": ").append(value));
    add("Expect:");  // no 100-continue round trip before the body
    const auto chunked = [](const HeaderList& headers) {
      return std::any_of(headers.begin(), headers.end(), [](const auto& header) {
        return llmretry::detail::iequals(header.first, "Transfer-Encoding");
      });
    };
    if (!chunked(request.headers) && !chunked(extra_headers)) transfer_.upload_size = request.body.size();

    curl_easy_setopt(handle, CURLOPT_URL, request.url.c_str());
    curl_easy_setopt(handle, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(handle, CURLOPT_BUFFERSIZE, static_cast<long>(options.receive_buffer));
    curl_easy_setopt(handle, CURLOPT_UPLOAD_BUFFERSIZE, static_cast<long>(options.upload_buffer));
    curl_easy_setopt(handle, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options.connect_timeout.count()));
    curl_easy_setopt(handle, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
    curl_easy_setopt(handle, CURLOPT_ACCEPT_ENCODING, options.accept_encoding.c_str());
    // libcurl keeps the authorities it read for later connections (a day) only when they come from one bundle
    // file, not also from a directory: read at every new connection, a large bundle stalls the thread each time.
    if (!options.ca_file.empty()) curl_easy_setopt(handle, CURLOPT_CAINFO, options.ca_file.c_str());
    if (!options.ca_file.empty() || has_ca_bundle(handle)) curl_easy_setopt(handle, CURLOPT_CAPATH, nullptr);
    curl_easy_setopt(handle, CURLOPT_HTTPHEADER, list_.get());
    curl_easy_setopt(handle, CURLOPT_ERRORBUFFER, error_text_.data());
    curl_easy_setopt(handle, CURLOPT_HEADERFUNCTION, &on_header);
    curl_easy_setopt(handle, CURLOPT_HEADERDATA, &transfer_);
    curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, &on_body);
    curl_easy_setopt(handle, CURLOPT_WRITEDATA, &transfer_);
    if (options.idle_timeout || options.cancel != nullptr) {
      curl_easy_setopt(handle, CURLOPT_NOPROGRESS, 0L);
      curl_easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, &on_progress);
      curl_easy_setopt(handle, CURLOPT_XFERINFODATA, &transfer_);
    }
    set_method(handle, request);
  }

  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;
  Exchange(Exchange&&) = delete;
  Exchange& operator=(Exchange&&) = delete;
  ~Exchange() = default;

  /// Ends the transfer at the attempt's timeout, kept by its caller (libcurl checks none while a request waits
  /// for a connection): returns or throws as conclude(CURLE_OPERATION_TIMEDOUT), not sent when no byte of
  /// the request went out.
  Response time_out() {
    if (error_text_[0] == '\0') {
      constexpr std::string_view why =
          "the attempt's timeout passed before the request was done (it may have waited for a connection)";
      const std::size_t length = std::min(why.size(), error_text_.size() - 1);
      std::copy_n(why.data(), length, error_text_.data());
      error_text_[length] = '\0';
    }
    return conclude(CURLE_OPERATION_TIMEDOUT);
  }

  /// Returns the 2xx response of the transfer that ended with `code`; call it once. Throws as
  /// curl::perform does (see there): the failure classified for options.provider, carrying the response.
  Response conclude(CURLcode code) {
    Transfer& transfer = transfer_;
    if (transfer.handler_error) std::rethrow_exception(transfer.handler_error);
    const long status = transfer.status();
    transfer.response.status = static_cast<int>(status);
    const bool failed = transfer.stream_error || transfer.too_large != nullptr ||
                        (code != CURLE_OK && !transfer.error_body_cut) || status < 200 || status > 299 ||
                        (transfer.is_event_stream() && (!transfer.ended || transfer.sse.partial()));
    if (!failed) return std::move(transfer.response);
    fail(code);
  }

 private:
  /// Throws the failure of the transfer that ended with `code`.
  [[noreturn]] void fail(CURLcode code) {
    Transfer& transfer = transfer_;
    const auto secrets = secrets_of(*request_, *transfer.options);
    const long status = transfer.response.status;
    const Options& options = *transfer.options;
    if (transfer.stream_error) {
      const Failure failure =
          classify_provider_error(options.provider, transfer.response.status, *transfer.stream_error);
      throw_failure(transfer, secrets,
                    "SSE error event: " + describe(failure) + server_word(*transfer.stream_error, secrets), failure);
    }
    if (transfer.too_large != nullptr) {
      const Failure failure{FailureKind::too_large, transfer.response.status, std::nullopt, Sent::maybe_processed,
                            std::nullopt};
      throw_failure(transfer, secrets, describe(failure) + ": the answer passed " + transfer.too_large, failure);
    }
    if (code != CURLE_OK && !transfer.error_body_cut) {
      const auto [failure, message] = transfer_failure(transfer, code, error_text_.data());
      throw_failure(transfer, secrets, message, failure);
    }
    if (status < 200 || status > 299) {
      const ErrorFields fields =
          options.read_error && !transfer.error_body_cut ? options.read_error(transfer.response.body) : ErrorFields{};
      const Failure failure = classify_provider_response(options.provider, transfer.response.status,
                                                         transfer.response.headers, real_wall_now(), fields);
      throw_failure(transfer, secrets, describe(failure) + server_word(fields, secrets), failure);
    }
    throw_failure(transfer, secrets, "the stream ended before its end marker",
                  Failure::connection_failed(Sent::maybe_processed));
  }

  Transfer transfer_;
  const Request* request_;
  std::unique_ptr<curl_slist, ListDeleter> list_;
  std::array<char, CURL_ERROR_SIZE> error_text_{};
  ResetOnExit reset_;  ///< last: the handle is reset before what it points at goes, even when the constructor throws
};

}  // namespace detail

/// Makes one attempt of `request` with `extra_headers` added, on the calling thread's Session (see
/// curl::Session: a thread's attempts reuse its connections, whichever call makes them), and returns the 2xx
/// response. Called from the streaming handler of an attempt on that session, it makes its attempt on a
/// Session made for it and closed after it (a new connection). Asks for and decodes the content encodings
/// of options.accept_encoding (by default every one libcurl supports). The attempt's total timeout is
/// options.timeout, shortened to `time_left` when set (the time left before the caller's deadline).
/// With `on_event` and `guard` (a streamed call), a 2xx `text/event-stream` body is parsed as server-sent
/// events handed to `on_event` one by one, each recorded in `guard`; an error sent inside the stream
/// (`event: error`, the Responses API's `event: response.failed`, or a data-only event with an `error`
/// object) ends the attempt as a failure classified for options.provider, and so does a stream that ends
/// without its end marker (see curl::Call) or inside an event. The Responses API's `event:
/// response.incomplete` ends a stream that succeeded: the answer is whole but was cut short (by
/// `max_output_tokens` or a content filter, read `response.incomplete_details.reason` in the handler, which
/// receives the event); another attempt would cut it the same way. Any other body (a server that does not
/// stream) is returned whole in the body.
/// Throws: std::invalid_argument when a timeout in `options` or `time_left` is not positive, or for a GET
/// or HEAD with a body; otherwise through throw_provider_error, the exception carrying the response
/// (WithResponse): RateLimited, ProviderTimeout, ConnectionError or ProviderError as the failure's kind
/// calls for (Sent::not_sent when no byte of the request went out; FailureKind::too_large past a size
/// limit of `options`); StreamInterrupted for any failure after `guard` has started; whatever `on_event`
/// throws, unchanged. Exception texts never contain the values of options.secret_headers.
inline Response perform(const Request& request, const Options& options, const HeaderList& extra_headers = {},
                        const std::function<void(const SseEvent&)>* on_event = nullptr, StreamGuard* guard = nullptr,
                        std::optional<std::chrono::milliseconds> time_left = std::nullopt);

/// A libcurl handle kept from one attempt to the next, so that they reuse its open connections (HTTP
/// keep-alive; libcurl keeps up to 5), its DNS and TLS session caches.
/// Its options are reset after every attempt, returned or thrown (curl_easy_reset, which keeps the
/// connections and caches): no attempt inherits the headers, body, timeouts or callbacks of the one before.
/// A connection whose answer was not read whole (a cut or aborted transfer, an oversized body) is closed, not
/// reused. Every thread has one, made on its first attempt and closed when the thread ends, that perform and
/// Call use unless a Call is given another (Call::with_session): the attempts of one thread share their
/// connections, those of two threads never do. Not thread-safe: used by one thread at a time.
class Session {
 public:
  /// Throws ProviderError when libcurl cannot be initialised or make a handle.
  Session() {
    detail::global_init();
    handle_.reset(curl_easy_init());
    if (!handle_) throw ProviderError("curl_easy_init failed", Failure{});
  }

  /// Makes one attempt as the free function perform does (same arguments, returns and throws), on this
  /// session's handle. Also throws std::logic_error when this session is making an attempt already (called
  /// from that attempt's streaming handler): use another Session, or the free function perform.
  Response perform(const Request& request, const Options& options, const HeaderList& extra_headers = {},
                   const std::function<void(const SseEvent&)>* on_event = nullptr, StreamGuard* guard = nullptr,
                   std::optional<std::chrono::milliseconds> time_left = std::nullopt);

  /// Returns true while this session makes an attempt (its streaming handler is running, for instance).
  bool busy() const noexcept { return busy_; }

 private:
  std::unique_ptr<CURL, detail::EasyDeleter> handle_;
  bool busy_ = false;
};

namespace detail {

/// Returns the calling thread's Session, made on the first call (throws as Session() does) and closed when
/// the thread ends; nullptr while it is busy (perform re-entered from a streaming handler).
inline Session* thread_session() {
  thread_local Session session;
  return session.busy() ? nullptr : &session;
}

/// Marks a Session busy for its lifetime.
class BusyWhile {
 public:
  explicit BusyWhile(bool& busy) noexcept : busy_(&busy) { *busy_ = true; }
  BusyWhile(const BusyWhile&) = delete;
  BusyWhile& operator=(const BusyWhile&) = delete;
  BusyWhile(BusyWhile&&) = delete;
  BusyWhile& operator=(BusyWhile&&) = delete;
  ~BusyWhile() { *busy_ = false; }

 private:
  bool* busy_;
};

}  // namespace detail

inline Response perform(const Request& request, const Options& options, const HeaderList& extra_headers,
                        const std::function<void(const SseEvent&)>* on_event, StreamGuard* guard,
                        std::optional<std::chrono::milliseconds> time_left) {
  (void)detail::attempt_timeout(options, time_left);  // checked before a handle is made
  if (Session* session = detail::thread_session())
    return session->perform(request, options, extra_headers, on_event, guard, time_left);
  Session nested;
  return nested.perform(request, options, extra_headers, on_event, guard, time_left);
}

inline Response Session::perform(const Request& request, const Options& options, const HeaderList& extra_headers,
                                 const std::function<void(const SseEvent&)>* on_event, StreamGuard* guard,
                                 std::optional<std::chrono::milliseconds> time_left) {
  if (busy_)
    throw std::logic_error("curl::Session::perform: this session is making an attempt already; use another one");
  const detail::BusyWhile busy(busy_);
  detail::Exchange exchange(handle_.get(), request, options, extra_headers, on_event, guard,
                            detail::attempt_timeout(options, time_left));
  return exchange.conclude(curl_easy_perform(handle_.get()));
}

/// One logical call: every attempt sends the same idempotency key and its attempt number, so that a
/// server or gateway can deduplicate and count retries. Pass it to call_with_retry as the call
/// (`llmretry::call_with_retry(call, policy)`): each invocation is one attempt.
/// Set `on_event` for a streamed call (`"stream": true`): a failure before any event reached the handler
/// is retried like any other; after, it is thrown as StreamInterrupted, which is never retried.
/// A Call is one logical call, never reused: once an attempt has returned a response or thrown
/// StreamInterrupted, invoking it again throws std::logic_error; make a new Call (a new key) for the next one.
/// Its attempts are made as perform makes them, on the session of the thread that invokes it (reusing that
/// thread's connections), unless with_session gave it one.
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

  /// Makes every attempt on `session` (Session::perform) instead of the invoking thread's session. Requires
  /// `session` to outlive the call's attempts and, as any Session, to be used by one thread at a time.
  /// Returns *this.
  Call& with_session(Session& session) noexcept {
    session_ = &session;
    return *this;
  }

  /// Makes the next attempt, its total timeout options.timeout. Returns the 2xx response; throws as perform
  /// does, and std::logic_error when the logical call has already ended.
  Response operator()() { return attempt(std::nullopt); }

  /// Makes the next attempt, its total timeout the shorter of options.timeout and `attempt.time_left`
  /// (the time left before the caller's deadline), as call_with_retry passes it. Returns and throws as
  /// operator()() does; std::invalid_argument when time_left is set and not positive.
  Response operator()(const Attempt& attempt) { return this->attempt(attempt.time_left); }

  /// Returns the idempotency key every attempt sends.
  const std::string& idempotency_key() const noexcept { return key_; }
  /// Returns the attempts made so far.
  int attempts() const noexcept { return attempts_; }
  /// Returns the stream's guard: how much content reached the handler.
  const StreamGuard& stream() const noexcept { return guard_; }

 private:
  Response attempt(std::optional<std::chrono::milliseconds> time_left) {
    if (ended_) throw std::logic_error("curl::Call: this logical call has ended; make a new Call for the next one");
    ++attempts_;
    HeaderList extra;
    if (!options_.idempotency_header.empty()) extra.emplace_back(options_.idempotency_header, key_);
    if (!options_.attempt_header.empty()) extra.emplace_back(options_.attempt_header, std::to_string(attempts_));
    const std::function<void(const SseEvent&)>* handler = on_event_ ? &on_event_ : nullptr;
    StreamGuard* guard = on_event_ ? &guard_ : nullptr;
    try {
      Response response = session_ != nullptr ? session_->perform(request_, options_, extra, handler, guard, time_left)
                                              : perform(request_, options_, extra, handler, guard, time_left);
      ended_ = true;
      return response;
    } catch (const StreamInterrupted&) {
      ended_ = true;
      throw;
    }
  }

  Request request_;
  Options options_;
  std::string key_;
  std::function<void(const SseEvent&)> on_event_;
  Session* session_ = nullptr;  ///< set by with_session; nullptr: the invoking thread's
  StreamGuard guard_;
  int attempts_ = 0;
  bool ended_ = false;
};

}  // namespace curl
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_CURL_CURL_HPP
