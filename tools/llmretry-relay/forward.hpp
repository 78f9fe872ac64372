// How llmretry-relay sends one request upstream: call_with_fallback over the model's chain (pacing,
// circuit breaker and retry budget on each route), the curl adapter on the thread's session
// (curl::perform), and the outcome turned into the answer the client gets; every event told to a
// metrics::Observer.
#ifndef LLMRETRY_RELAY_FORWARD_HPP
#define LLMRETRY_RELAY_FORWARD_HPP

#include <llmretry/curl/curl.hpp>
#include <llmretry/detail/text.hpp>
#include <llmretry/errors.hpp>
#include <llmretry/fallback.hpp>
#include <llmretry/guard.hpp>
#include <llmretry/http/base_url.hpp>
#include <llmretry/http/sse.hpp>
#include <llmretry/http/stream.hpp>
#include <llmretry/json/error_fields.hpp>
#include <llmretry/json/usage.hpp>
#include <llmretry/metrics/observer.hpp>
#include <llmretry/policy.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "errors.hpp"
#include "routes.hpp"

namespace relay {

/// A checked request to forward.
struct Incoming {
  std::string path;             ///< such as "/v1/chat/completions"
  std::string body;             ///< as received
  nlohmann::json json;          ///< the body parsed: an object whose "model" is a string
  std::string model;            ///< the body's "model"
  std::string model_label;      ///< its value in the metrics' model label (bounded: see ModelLabels)
  std::string idempotency_key;  ///< sent upstream as Idempotency-Key; empty: none
  llmretry::Cost estimate;      ///< reserved on each route's Deployment
};

/// What the client gets.
struct Answer {
  int status = 200;
  llmretry::curl::HeaderList headers;  ///< passed back to the client (Content-Type among them)
  std::string body;
  bool storable = false;  ///< a final answer, kept under the request's Idempotency-Key (see README)
};

/// Returns the label task_type of a route's path: "chat", "responses", "embeddings" (or "other").
inline const char* task_type(std::string_view path) noexcept {
  if (path == "/v1/chat/completions") return "chat";
  if (path == "/v1/responses") return "responses";
  if (path == "/v1/embeddings") return "embeddings";
  return "other";
}

/// Returns true when the header name `name` begins with `prefix`, ignoring case.
inline bool header_name_starts(std::string_view name, std::string_view prefix) noexcept {
  return name.size() >= prefix.size() && llmretry::detail::iequals(name.substr(0, prefix.size()), prefix);
}

/// Returns true for an upstream response header passed back to the client: Content-Type, X-Request-Id,
/// OpenAI-Processing-Ms, the rate-limit headers (x-ratelimit-*, Retry-After, retry-after-ms). Hop-by-hop
/// headers, cookies and the rest stay behind.
inline bool passed_back(std::string_view name) noexcept {
  return llmretry::detail::iequals(name, "content-type") || llmretry::detail::iequals(name, "x-request-id") ||
         llmretry::detail::iequals(name, "openai-processing-ms") || llmretry::detail::iequals(name, "retry-after") ||
         llmretry::detail::iequals(name, "retry-after-ms") || header_name_starts(name, "x-ratelimit-");
}

/// A stream that broke after its first event reached the client: it cannot be retried.
struct StreamCut : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Sends requests along their chain. Thread-safe: each thread keeps its own curl session.
class Forwarder {
 public:
  /// Tells `observer` (which must outlive it) every event. `attempt_timeout`: the most one attempt takes.
  Forwarder(llmretry::metrics::Observer& observer, std::chrono::milliseconds attempt_timeout) : observer_(observer) {
    curl_options_.timeout = attempt_timeout;
    curl_options_.connect_timeout = std::chrono::milliseconds{5000};
    curl_options_.accept_encoding = "identity";  // small JSON answers: compressing them costs more than it saves
    curl_options_.read_error = [](std::string_view body) { return llmretry::json::error_fields(body); };
  }

  /// Returns the answer to `in` through `chain`: the upstream's when it answered (its own 4xx included),
  /// else the relay's: 429 with Retry-After when no capacity came within the longest wait, 503 when the
  /// circuit is open or the retry budget is spent, 504 after a timeout, 502 for any other give-up.
  /// With `on_event` (a streamed request), each event of a streamed 2xx answer goes to it as it arrives,
  /// and the answer's body is empty (never storable); retries and fallbacks happen only before the first
  /// event, a stream cut after it ends the call (status 502, code "stream_interrupted"). `cancel`, when
  /// set, aborts the upstream transfer within about a second once it holds true (the client went away):
  /// the call then ends as a cut stream.
  /// Nothing of an upstream key reaches the client: every header passed back, every body and every event
  /// is redacted (in any case). A 408, 409, 425, 429 or 5xx after the relay's own retries carries
  /// `x-should-retry: false`, so that a client SDK that honours it does not multiply them; the relay's 429
  /// for want of capacity does not (its Retry-After says when to come back).
  Answer forward(const Chain& chain, const Incoming& in,
                 const std::function<void(const llmretry::SseEvent&)>* on_event = nullptr,
                 const std::atomic<bool>* cancel = nullptr) const {
    const std::vector<std::string> keys = keys_of(chain);
    std::function<void(const llmretry::SseEvent&)> redacting;
    if (on_event != nullptr && !keys.empty()) {
      redacting = [&keys, on_event](const llmretry::SseEvent& event) {
        llmretry::SseEvent told = event;
        told.data = llmretry::curl::detail::redact(std::move(told.data), keys);
        told.event = llmretry::curl::detail::redact(std::move(told.event), keys);
        told.id = llmretry::curl::detail::redact(std::move(told.id), keys);
        (*on_event)(told);
      };
      on_event = &redacting;
    }
    Answer answer = forward_redacted(chain, in, on_event, cancel);
    answer.body = llmretry::curl::detail::redact(std::move(answer.body), keys);
    for (auto& header : answer.headers) header.second = llmretry::curl::detail::redact(std::move(header.second), keys);
    return answer;
  }

 private:
  /// forward() before the redaction.
  Answer forward_redacted(const Chain& chain, const Incoming& in,
                          const std::function<void(const llmretry::SseEvent&)>* on_event,
                          const std::atomic<bool>* cancel) const {
    std::optional<llmretry::curl::Options> cancellable;
    if (cancel != nullptr) {
      cancellable.emplace(curl_options_);
      cancellable->cancel = cancel;
    }
    const llmretry::curl::Options& curl_options = cancellable ? *cancellable : curl_options_;
    const llmretry::metrics::Queue queue{"interactive", task_type(in.path)};
    const llmretry::Route* current = &chain.fallback_chain.routes().front();
    std::optional<llmretry::FallbackGiveUp> gave_up;
    llmretry::StreamGuard stream;

    llmretry::FallbackOptions options;
    options.estimate = in.estimate;
    options.on_move = [&](const llmretry::Move& move) {
      observer_.fell_back(target(chain, move.from, in), target(chain, move.to, in), move.reason);
    };
    options.on_give_up = [&](const llmretry::FallbackGiveUp& report) { gave_up = report; };
    const auto sleep = [&](std::chrono::milliseconds wait, llmretry::WaitReason reason) {
      const bool waiting_for_capacity = reason == llmretry::WaitReason::capacity;
      if (waiting_for_capacity) observer_.queue_entered(queue);
      std::this_thread::sleep_for(wait);
      if (waiting_for_capacity) observer_.queue_left(queue, wait);
    };
    const auto call = [&](const llmretry::Route& route, const llmretry::Attempt& attempt) {
      current = &route;
      const Upstream& upstream = chain.upstream_of(route);
      observer_.tokens_reserved(target(route, in), static_cast<std::uint64_t>(in.estimate.tokens()));
      llmretry::curl::Request request{"POST",
                                      llmretry::resolve_url(upstream.base_url, in.path),
                                      {{"Content-Type", "application/json"}},
                                      body_for(upstream, in)};
      if (!upstream.api_key.empty()) request.headers.emplace_back("Authorization", "Bearer " + upstream.api_key);
      if (!in.idempotency_key.empty()) request.headers.emplace_back("Idempotency-Key", in.idempotency_key);
      if (on_event != nullptr) request.headers.emplace_back("Accept", "text/event-stream");
      const auto send = [&] {
        return llmretry::curl::perform(request, curl_options, {}, on_event, on_event != nullptr ? &stream : nullptr,
                                       attempt.time_left);
      };
      try {
        return send();
      } catch (const llmretry::StreamInterrupted& error) {
        throw StreamCut(error.what());  // not a provider error: neither retried nor moved to a fallback
      } catch (const llmretry::ProviderError& error) {
        if (cancel != nullptr && *cancel) throw StreamCut("the client went away");
        if (error.failure().kind == llmretry::FailureKind::rate_limited)
          observer_.rate_limited(target(route, in), llmretry::metrics::LimitType::unknown);
        throw;
      }
    };
    const auto on_retry = [&](int attempt, const llmretry::Failure& failure, std::chrono::milliseconds) {
      observer_.retried(target(*current, in), failure, attempt);
    };

    try {
      auto routed = llmretry::call_with_fallback(chain.fallback_chain, call, policy_, options, on_retry, sleep);
      const llmretry::metrics::Target answered = target(chain, routed.route, in);
      if (const auto usage = llmretry::json::usage_of(routed.answer.body))
        observer_.tokens_used(answered, static_cast<std::uint64_t>(usage->tokens()));
      observer_.request_finished(answered, "success");
      return answer_of(std::move(routed.answer), on_event == nullptr);
    } catch (const StreamCut&) {
      observer_.request_finished(target(*current, in), "stream_interrupted");
      Answer answer;
      answer.status = 502;
      answer.body =
          error_body({502, "the upstream's stream broke after it had begun", "upstream_error", "stream_interrupted"});
      answer.headers.emplace_back("x-should-retry", "false");
      return answer;
    } catch (const std::exception& error) {
      const llmretry::metrics::Target at = gave_up ? target(chain, gave_up->route, in) : target(*current, in);
      const llmretry::Failure failure =
          gave_up ? gave_up->last.failure : llmretry::failure_of(error).value_or(llmretry::Failure{});
      const std::string stop = !gave_up ? "failed"
                               : never_fits(gave_up->last.reason, gave_up->last.failure)
                                   ? never_fits_code
                                   : llmretry::to_string(gave_up->last.reason);
      observer_.request_finished(at, stop);
      const std::optional<llmretry::StopReason> reason = gave_up ? std::optional(gave_up->last.reason) : std::nullopt;
      Answer answer = give_up_answer(reason, failure, stop, llmretry::curl::response_of(error), at);
      if (retried_here(answer.status) && reason != llmretry::StopReason::no_capacity)
        answer.headers.emplace_back("x-should-retry", "false");  // retried here already
      return answer;
    }
  }

  static constexpr const char* never_fits_code = "request_too_large_for_limit";

  /// Returns true for a status the relay retries itself (408, 409, 425, 429, 5xx): when one is its answer,
  /// it has given up on it.
  static constexpr bool retried_here(int status) noexcept {
    return status == 408 || status == 409 || status == 425 || status == 429 || status >= 500;
  }

  /// Returns true for a request refused for a cost above a limit of its route, which never fits.
  static bool never_fits(std::optional<llmretry::StopReason> reason, const llmretry::Failure& failure) noexcept {
    return reason == llmretry::StopReason::no_capacity && failure.kind == llmretry::FailureKind::too_large;
  }

  /// Returns the body sent to `upstream`: the client's, with the model replaced when the route has its own.
  static std::string body_for(const Upstream& upstream, const Incoming& in) {
    if (upstream.model.empty() || upstream.model == in.model) return in.body;
    nlohmann::json body = in.json;
    body["model"] = upstream.model;
    return body.dump();
  }

  static llmretry::metrics::Target target(const llmretry::Route& route, const Incoming& in) {
    return {route.provider, route.model.empty() ? in.model_label : route.model};
  }
  static llmretry::metrics::Target target(const Chain& chain, std::string_view name, const Incoming& in) {
    for (const auto& route : chain.fallback_chain.routes())
      if (route.name == name) return target(route, in);
    return {std::string(name), in.model_label};
  }

  /// Returns the keys of the upstreams of `chain`, the longest first (one may contain another).
  static std::vector<std::string> keys_of(const Chain& chain) {
    std::vector<std::string> keys;
    for (const Upstream* upstream : chain.upstreams)
      if (!upstream->api_key.empty()) keys.push_back(upstream->api_key);
    std::sort(keys.begin(), keys.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
    return keys;
  }

  /// Returns the upstream's answer as the client gets it.
  static Answer answer_of(llmretry::curl::Response response, bool storable) {
    Answer answer;
    answer.status = response.status;
    answer.body = std::move(response.body);
    answer.storable = storable;
    for (auto& header : response.headers)
      if (passed_back(header.first)) answer.headers.push_back(std::move(header));
    return answer;
  }

  Answer give_up_answer(std::optional<llmretry::StopReason> reason, const llmretry::Failure& failure,
                        const std::string& stop, const llmretry::curl::Response* upstream,
                        const llmretry::metrics::Target& at) const {
    using llmretry::StopReason;
    const auto refuse = [&](int status, const std::string& message, const char* type) {
      Answer answer;
      answer.status = status;
      answer.body = error_body({status, message, type, stop});
      answer.headers.emplace_back("Content-Type", json_content_type);
      return answer;
    };
    if (never_fits(reason, failure)) {
      Answer answer;  // waiting does not help: not a rate-limit hit
      answer.status = 400;
      answer.body = error_body(bad_request(
          "the request's estimated cost (its max_tokens and input) exceeds a limit of the relay (--tpm, --rpm, "
          "or its model's): it can never be sent",
          never_fits_code));
      answer.headers.emplace_back("Content-Type", json_content_type);
      return answer;
    }
    if (reason == StopReason::no_capacity) {
      observer_.rate_limited(at, failure.provider_wait ? llmretry::metrics::LimitType::unknown
                                                       : llmretry::metrics::LimitType::concurrency);
      const auto wait = failure.provider_wait.value_or(std::chrono::seconds{1});
      const auto seconds = std::max<std::int64_t>(1, (wait.count() + 999) / 1000);
      Answer answer = refuse(429,
                             "the relay has no capacity upstream within its longest wait (--max-wait); retry after " +
                                 std::to_string(seconds) + " s",
                             "rate_limit_error");
      answer.headers.emplace_back("Retry-After", std::to_string(seconds));
      return answer;
    }
    if (upstream != nullptr && upstream->status >= 400 && upstream->status <= 499) {
      const int status = upstream->status;
      const bool final = !retried_here(status);
      return answer_of(*upstream, final);
    }
    const std::string message = "upstream gave up (" + stop + "): " + llmretry::describe(failure);
    if (reason == StopReason::circuit_open || reason == StopReason::retry_budget)
      return refuse(503, message, "service_unavailable");
    if (reason == StopReason::refused || reason == StopReason::pacing_unavailable)  // refused unsent
      return refuse(503, "the relay could not admit the request (" + stop + "): " + llmretry::describe(failure),
                    "service_unavailable");
    if (failure.kind == llmretry::FailureKind::timeout) return refuse(504, message, "upstream_timeout");
    return refuse(502, message, "upstream_error");
  }

  llmretry::metrics::Observer& observer_;
  llmretry::RetryPolicy policy_ = llmretry::RetryPolicy::interactive();
  llmretry::curl::Options curl_options_;
};

}  // namespace relay

#endif  // LLMRETRY_RELAY_FORWARD_HPP
