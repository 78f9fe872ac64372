#ifndef LLMRETRY_HTTP_PROVIDERS_HPP
#define LLMRETRY_HTTP_PROVIDERS_HPP

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "../detail/duration.hpp"
#include "../detail/text.hpp"
#include "../failure.hpp"
#include "../version.hpp"
#include "classify.hpp"
#include "headers.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// The API families whose error semantics the library knows.
enum class Provider {
  openai,        ///< OpenAI, and any OpenAI-compatible server
  azure_openai,  ///< Azure OpenAI (the OpenAI error body, Azure's headers)
  anthropic,     ///< Anthropic Messages API
  gemini,        ///< Google Gemini API and Vertex AI (google.rpc.Status error body)
};

/// Returns the name of a provider, such as "azure_openai".
constexpr const char* to_string(Provider provider) noexcept {
  switch (provider) {
    case Provider::openai: return "openai";
    case Provider::azure_openai: return "azure_openai";
    case Provider::anthropic: return "anthropic";
    case Provider::gemini: return "gemini";
  }
  return "unknown";
}

/// The machine-readable strings of a provider's JSON error body, already extracted (for instance by
/// llmretry::json::error_fields). Any may be empty. Decisions read the machine-readable strings; the
/// message is read for one case only (Anthropic's "prompt is too long"), and is never put in an exception's
/// text.
struct ErrorFields {
  std::string code;         ///< OpenAI / Azure `error.code`: "rate_limit_exceeded", "insufficient_quota"...
  std::string type;         ///< OpenAI `error.type`, Anthropic `error.type`: "overloaded_error"...
  std::string status;       ///< Gemini / Vertex `error.status`: "RESOURCE_EXHAUSTED"...
  std::string retry_delay;  ///< Gemini `google.rpc.RetryInfo.retryDelay`: "30s", "1.5s"
  /// Gemini `google.rpc.QuotaFailure`: the `quotaId` and `quotaMetric` of every violation, space-separated,
  /// such as "GenerateRequestsPerDayPerProjectPerModel-FreeTier".
  std::string quota;
  std::string message;  ///< `error.message`: "prompt is too long: 208310 tokens > 200000 maximum"

  /// Returns true when nothing was extracted.
  bool empty() const noexcept {
    return code.empty() && type.empty() && status.empty() && retry_delay.empty() && quota.empty() && message.empty();
  }
};

namespace detail {

/// Returns the HTTP status an Anthropic error type stands for, or 0 when unknown.
constexpr int anthropic_status(std::string_view type) noexcept {
  struct Entry {
    std::string_view type;
    int status;
  };
  constexpr Entry table[] = {{"invalid_request_error", 400}, {"authentication_error", 401},
                             {"billing_error", 402},         {"permission_error", 403},
                             {"not_found_error", 404},       {"request_too_large", 413},
                             {"rate_limit_error", 429},      {"api_error", 500},
                             {"timeout_error", 504},         {"overloaded_error", 529}};
  for (const auto& entry : table)
    if (type == entry.type) return entry.status;
  return 0;
}

/// Returns the HTTP status an OpenAI or Azure error code or type stands for, or 0 when unknown.
constexpr int openai_status(std::string_view code) noexcept {
  struct Entry {
    std::string_view code;
    int status;
  };
  constexpr Entry table[] = {
      {"invalid_request_error", 400}, {"context_length_exceeded", 400}, {"content_filter", 400},
      {"invalid_api_key", 401},       {"authentication_error", 401},    {"permission_error", 403},
      {"model_not_found", 404},       {"not_found_error", 404},         {"rate_limit_exceeded", 429},
      {"too_many_requests", 429},     {"insufficient_quota", 429},      {"server_error", 500},
      {"service_unavailable", 503}};
  for (const auto& entry : table)
    if (code == entry.code) return entry.status;
  return 0;
}

/// Returns the HTTP status a google.rpc.Code name stands for, or 0 when unknown.
constexpr int gemini_status(std::string_view status) noexcept {
  struct Entry {
    std::string_view status;
    int http;
  };
  constexpr Entry table[] = {
      {"INVALID_ARGUMENT", 400},   {"FAILED_PRECONDITION", 400}, {"OUT_OF_RANGE", 400},   {"UNAUTHENTICATED", 401},
      {"PERMISSION_DENIED", 403},  {"NOT_FOUND", 404},           {"ALREADY_EXISTS", 409}, {"ABORTED", 409},
      {"RESOURCE_EXHAUSTED", 429}, {"CANCELLED", 499},           {"INTERNAL", 500},       {"UNKNOWN", 500},
      {"DATA_LOSS", 500},          {"NOT_IMPLEMENTED", 501},     {"UNAVAILABLE", 503},    {"DEADLINE_EXCEEDED", 504}};
  for (const auto& entry : table)
    if (status == entry.status) return entry.http;
  return 0;
}

}  // namespace detail

/// Returns the failure an error response means for `provider`, from its HTTP status and the strings of
/// its JSON error body; the headers are not read (see classify_provider_response). Where the HTTP status
/// says nothing (below 400: 0, or 200 for an error inside a stream), the body's strings stand for one.
/// - OpenAI, Azure: the status of `code`, else of `type` ("rate_limit_exceeded" 429, "server_error" 500...);
///   then classify_status on `code`, then on `type` ("insufficient_quota" makes a 429 quota_exhausted;
///   "context_length_exceeded", "content_filter" refine a 400).
/// - Any provider: a `type` "overloaded_error" (Anthropic's, also sent by OpenAI-compatible servers, in an
///   error body or an SSE `event: error`) is classify_status of the HTTP status, or of 529 where the status
///   says nothing (a transient server_error), refused before any work (Sent::refused): safe to repeat.
/// - Anthropic: the status of `type`; "billing_error" is quota_exhausted; 529 is a server error refused
///   before any work (Sent::refused); an "invalid_request_error" whose message starts with "prompt is too
///   long" is context_length.
/// - Gemini / Vertex: the status of `status` ("RESOURCE_EXHAUSTED" is 429); a 429 whose QuotaFailure names
///   a per-day quota (`quota` contains "PerDay") is quota_exhausted: waiting seconds does not help.
/// Unknown strings fall back on the HTTP status. Never throws.
inline Failure classify_provider_error(Provider provider, int status, const ErrorFields& body) noexcept {
  const bool status_says_nothing = status < 400;
  if (body.type == "overloaded_error") {
    Failure failure = classify_status(status_says_nothing ? 529 : status);
    failure.sent = Sent::refused;
    return failure;
  }
  switch (provider) {
    case Provider::openai:
    case Provider::azure_openai: {
      if (status_says_nothing) {
        const int mapped =
            detail::openai_status(body.code) != 0 ? detail::openai_status(body.code) : detail::openai_status(body.type);
        if (mapped != 0) status = mapped;
      }
      const Failure plain = classify_status(status);
      const Failure by_code = classify_status(status, body.code);
      return by_code != plain ? by_code : classify_status(status, body.type);
    }
    case Provider::anthropic: {
      if (status_says_nothing && detail::anthropic_status(body.type) != 0) status = detail::anthropic_status(body.type);
      Failure failure = classify_status(status);
      if (body.type == "billing_error") failure.kind = FailureKind::quota_exhausted;
      if (body.type == "invalid_request_error" && std::string_view(body.message).substr(0, 18) == "prompt is too long")
        failure.kind = FailureKind::context_length;
      return failure;
    }
    case Provider::gemini: {
      if (status_says_nothing && detail::gemini_status(body.status) != 0) status = detail::gemini_status(body.status);
      Failure failure = classify_status(status);
      if (status == 429 && body.quota.find("PerDay") != std::string::npos) failure.kind = FailureKind::quota_exhausted;
      return failure;
    }
  }
  return classify_status(status);
}

/// Returns the failure a successful answer stands for when its finish reason says the provider withheld
/// the content: FailureKind::content_filter (status 200, Sent::maybe_processed: the call was billed, and
/// the same prompt is filtered again) for OpenAI / Azure "content_filter", Anthropic "refusal" and Gemini
/// "SAFETY", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII". nullopt for any other reason ("stop", "length"...).
/// `finish_reason`: OpenAI `choices[i].finish_reason`, Anthropic `stop_reason`, Gemini
/// `candidates[i].finishReason`. Never throws.
constexpr std::optional<Failure> finish_reason_failure(Provider provider, std::string_view finish_reason) noexcept {
  bool filtered = false;
  switch (provider) {
    case Provider::openai:
    case Provider::azure_openai: filtered = finish_reason == "content_filter"; break;
    case Provider::anthropic: filtered = finish_reason == "refusal"; break;
    case Provider::gemini:
      filtered = finish_reason == "SAFETY" || finish_reason == "PROHIBITED_CONTENT" || finish_reason == "BLOCKLIST" ||
                 finish_reason == "SPII";
      break;
  }
  if (!filtered) return std::nullopt;
  return Failure{FailureKind::content_filter, 200, std::nullopt, Sent::maybe_processed, std::nullopt};
}

/// Returns classify_provider_error(provider, status, body) completed from the response: the wait the
/// provider asked for, from the headers (see requested_wait, relative to `now`) or else from the body's
/// `retry_delay` ("30s", "1.5s", rounded up to milliseconds), and its explicit `x-should-retry`.
/// `headers`: any container of name/value pairs or look-up callable, as for requested_wait.
/// Malformed values are ignored; never throws.
template <class Headers>
Failure classify_provider_response(Provider provider, int status, const Headers& headers,
                                   std::chrono::system_clock::time_point now, const ErrorFields& body = {}) {
  Failure failure = classify_provider_error(provider, status, body);
  failure.provider_wait = requested_wait(headers, now);
  if (!failure.provider_wait && !body.retry_delay.empty())
    failure.provider_wait = detail::parse_duration_ms(body.retry_delay);
  failure.should_retry = should_retry(headers);
  return failure;
}

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_HTTP_PROVIDERS_HPP
