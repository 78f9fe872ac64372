// How llmretry-relay sends one request upstream: asio::async_call_with_fallback over the model's chain
// (pacing, circuit breaker and retry budget on each route), the asynchronous curl client of the worker
// that serves the request, and the outcome turned into the answer the client gets; every event told to a
// metrics::Observer.
#ifndef LLMRETRY_RELAY_FORWARD_HPP
#define LLMRETRY_RELAY_FORWARD_HPP

#include <llmretry/asio/fallback.hpp>
#include <llmretry/curl/async.hpp>
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

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/system/system_error.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/labels.hpp"
#include "errors.hpp"
#include "routes.hpp"

namespace relay {

/// A checked request to forward.
struct Incoming {
  Format format = Format::openai;  ///< the API the client speaks (its route's)
  std::string anthropic_version;   ///< the client's anthropic-version, sent upstream (Anthropic's API)
  std::string anthropic_beta;      ///< the client's anthropic-beta, sent upstream when set (Anthropic's API)
  std::string path;                ///< such as "/v1/chat/completions"
  std::string body;                ///< as received
  nlohmann::json json;             ///< the body parsed: an object whose "model" is a string
  std::string model;               ///< the body's "model"
  std::string model_label;         ///< its value in the metrics' model label (bounded: see BoundedLabels)
  std::string idempotency_key;     ///< sent upstream as Idempotency-Key; empty: none
  llmretry::Cost estimate;         ///< reserved on each route's Deployment
  llmretry::Priority priority = llmretry::Priority::interactive;  ///< its class in admission
  std::string tenant;          ///< whom it is for in admission (its client, or X-LLMRetry-Tenant); empty: nobody named
  double tenant_weight = 1.0;  ///< the tenant's weight (its client's)
  std::string caller_key;      ///< the client key it was sent with, scoping its Idempotency-Key; empty: none needed
  std::string sent_body;       ///< the body sent upstream when it is not `body` (degraded); empty: `body`
  std::string degraded;        ///< what the relay changed under pressure, told in x-llmretry-degraded; empty: nothing
  std::shared_ptr<const Routes> routes;  ///< the model table it was routed with, kept until it is answered
};

/// What the client gets.
struct Answer {
  int status = 200;
  llmretry::curl::HeaderList headers;  ///< passed back to the client (Content-Type among them)
  std::string body;
  bool storable = false;  ///< a final answer, kept under the request's Idempotency-Key (see README)
};

using llmretry_tools::task_type;

/// Returns true when the header name `name` begins with `prefix`, ignoring case.
inline bool header_name_starts(std::string_view name, std::string_view prefix) noexcept {
  return name.size() >= prefix.size() && llmretry::detail::iequals(name.substr(0, prefix.size()), prefix);
}

/// Returns true when `value` is a valid field value (RFC 9110, 5.5): visible characters, spaces, tabs and
/// bytes above 0x7f, no CR, LF, NUL or other control character.
inline bool valid_field_value(std::string_view value) noexcept {
  return std::all_of(value.begin(), value.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte == '\t' || (byte >= 0x20 && byte != 0x7f);
  });
}

/// Returns true for an upstream response header `name: value` passed back to the client: Content-Type,
/// X-Request-Id, Request-Id (Anthropic's), OpenAI-Processing-Ms, the rate-limit headers (x-ratelimit-*,
/// anthropic-ratelimit-*, Retry-After, retry-after-ms), each with a valid field value (a CR the upstream sent
/// could otherwise end the line early). Hop-by-hop headers, cookies and the rest stay behind.
inline bool passed_back(std::string_view name, std::string_view value) noexcept {
  if (!valid_field_value(value)) return false;
  return llmretry::detail::iequals(name, "content-type") || llmretry::detail::iequals(name, "x-request-id") ||
         llmretry::detail::iequals(name, "request-id") || llmretry::detail::iequals(name, "openai-processing-ms") ||
         llmretry::detail::iequals(name, "retry-after") || llmretry::detail::iequals(name, "retry-after-ms") ||
         header_name_starts(name, "x-ratelimit-") || header_name_starts(name, "anthropic-ratelimit-");
}

/// What receives a streamed answer: `start` once before its first event, with the upstream's headers that
/// are passed back (but Content-Type), then `event` with each event.
struct StreamTo {
  std::function<void(llmretry::curl::HeaderList headers)> start;
  std::function<void(const llmretry::SseEvent&)> event;
};

/// Sends requests along their chain, asynchronously. Thread-safe: each worker passes its own client.
class Forwarder {
 public:
  /// Tells `observer` (which must outlive it) every event. `attempt_timeout`: the most one attempt takes.
  /// `guard_pool`: where every route's guards are called when their pacing makes network round trips (Redis),
  /// never on the event loop of the request; null: on that event loop. It must outlive the calls.
  /// `ca_file`: the certificate authorities of https upstreams (curl::Options::ca_file); empty: the system's.
  Forwarder(llmretry::metrics::Observer& observer, std::chrono::milliseconds attempt_timeout,
            boost::asio::thread_pool* guard_pool = nullptr, const std::string& ca_file = {})
      : observer_(observer), guard_pool_(guard_pool) {
    for (const Format format : {Format::openai, Format::anthropic}) {
      for (const bool streamed : {false, true}) {
        llmretry::curl::Options& options = curl_options_[static_cast<std::size_t>(format)][streamed];
        options.provider = format == Format::anthropic ? llmretry::Provider::anthropic : llmretry::Provider::openai;
        options.timeout = attempt_timeout;
        options.connect_timeout = std::chrono::milliseconds{5000};
        options.accept_encoding = "identity";  // small JSON answers: compressing them costs more than it saves
        options.read_error = [](std::string_view body) { return llmretry::json::error_fields(body); };
        // Thousands of streams at once, each a few small events at a time: 15 KiB less each; a whole answer
        // (embeddings can be megabytes) is read 4 KiB at a time.
        options.receive_buffer = streamed ? std::size_t{1} << 10 : std::size_t{4} << 10;
        options.upload_buffer = std::size_t{16} << 10;  // over TLS each request has one: 48 KiB less each
        options.ca_file = ca_file;
      }
    }
  }

  /// Sends `in` through `chain` on `client` and completes `done(Answer)` on the client's executor (the
  /// caller's thread): the upstream's answer when it answered (its own 4xx included), else the relay's: 429
  /// with Retry-After when no capacity came within the longest wait, 503 when the circuit is open or the
  /// retry budget is spent, 504 after a timeout, 502 for any other give-up.
  /// With `stream_to` set (a streamed request), each event of a streamed 2xx answer goes to it as it arrives,
  /// after its headers, and the answer's body is empty (never storable); retries and fallbacks happen only before the
  /// first event, a stream cut after it ends the call (status 502, code "stream_interrupted"). When the client goes
  /// away (`gone` is emitted, or `left` says it went already), the call is cancelled at once and counted
  /// `client_gone`: a request not sent yet is never sent, a stream stops. But a request with an Idempotency-Key, not
  /// streamed, whose first attempt was sent goes on (retries included): its answer is stored for the client's retry
  /// under that key, which would otherwise pay for it twice. Nothing of an upstream key reaches the client: every
  /// header passed back, every body and every event is redacted (in any case). A 408, 409, 425, 429 or 5xx after the
  /// relay's own retries carries `x-should-retry: false`, so that a client SDK that honours it does not multiply them;
  /// the relay's 429 for want of capacity does not (its Retry-After says when to come back). `chain`, `client` and this
  /// Forwarder must outlive the call.
  template <class Done>
  void forward(llmretry::curl::AsyncClient& client, const Chain& chain, std::shared_ptr<const Incoming> in,
               StreamTo stream_to, boost::asio::cancellation_slot gone, bool left, Done done) const {
    auto call = std::make_shared<Forwarding>(chain, std::move(in), std::move(stream_to));
    if (left) {  // before the call could listen (a wait for the request's Idempotency-Key): nothing is sent
      call->client_gone = true;
      boost::asio::post(client.get_executor(), [this, call, done = std::move(done)]() mutable {
        done(cut(*call, call->chain.fallback_chain.routes().front()));
      });
      return;
    }
    if (gone.is_connected()) {
      gone.assign([weak = std::weak_ptr<Forwarding>(call)](boost::asio::cancellation_type type) {
        const auto gone_call = weak.lock();
        if (!gone_call || gone_call->client_gone || gone_call->answer_kept()) return;
        gone_call->client_gone = true;
        gone_call->cancel.emit(type);
      });
    }
    call->options.estimate = call->in->estimate;
    call->options.priority = call->in->priority;
    call->options.tenant = call->in->tenant;
    call->options.tenant_weight = call->in->tenant_weight;
    call->options.on_move = [this, raw = call.get()](const llmretry::Move& move) {
      observer_.fell_back(target(raw->chain, move.from, *raw->in), target(raw->chain, move.to, *raw->in), move.reason);
    };
    call->options.on_give_up = [raw = call.get()](const llmretry::FallbackGiveUp& report) { raw->gave_up = report; };
    call->queue = {llmretry::to_string(call->in->priority), task_type(call->in->path)};
    call->queued_since = std::chrono::steady_clock::now();
    Reporting::tell([&] { observer_.queue_entered(call->queue); });
    const auto send = [this, call, &client](const llmretry::Route& route, const llmretry::Attempt& attempt,
                                            auto handler) {
      left_queue(*call);
      call->current = &route;
      const llmretry::curl::Request* request = nullptr;
      try {
        request = &call->request_for(route);
      } catch (...) {  // the attempt fails with it (never inside this call), not the event loop
        boost::asio::post(client.get_executor(),
                          [handler = std::move(handler), error = std::current_exception()]() mutable {
                            std::move(handler)(error, llmretry::curl::Response{});
                          });
        return;
      }
      const bool streamed = static_cast<bool>(call->events);
      client.async_perform(*request,
                           curl_options_[static_cast<std::size_t>(call->chain.upstream_of(route).format)][streamed], {},
                           streamed ? &call->events : nullptr, streamed ? &call->stream : nullptr, attempt.time_left,
                           std::move(handler));
    };
    auto completion = boost::asio::bind_cancellation_slot(
        call->cancel.slot(), [this, call, gone, done = std::move(done)](
                                 std::exception_ptr error, llmretry::Routed<llmretry::curl::Response> routed) mutable {
          if (gone.is_connected()) gone.clear();  // the connection's next request listens to it next
          left_queue(*call);
          Answer answer = answer_to(*call, std::move(error), std::move(routed));
          if (!call->in->degraded.empty()) answer.headers.emplace_back("x-llmretry-degraded", call->in->degraded);
          answer.body = llmretry::curl::detail::redact(std::move(answer.body), call->keys);
          for (auto& header : answer.headers)
            header.second = llmretry::curl::detail::redact(std::move(header.second), call->keys);
          done(std::move(answer));
        });
    auto reporting = llmretry::route_guards([this, raw = call.get()](const llmretry::Route& route) {
      return Reporting{&observer_, target(route, *raw->in), raw->in->estimate.tokens(), std::nullopt};
    });
    // The guards on the guard pool when there is one (their pacing makes Redis round trips), else here.
    const auto launch = [&](auto... guards_on) {
      llmretry::asio::async_call_with_fallback<llmretry::curl::Response>(
          client.get_executor(), chain.fallback_chain, send, policy_, call->options, std::move(reporting), guards_on...,
          std::move(completion));
    };
    if (guard_pool_ != nullptr) launch(llmretry::asio::guards_on(guard_pool_->get_executor()));
    else launch();
  }

  /// Counts a request through `chain` whose client left before its call began, never sent, as forward()
  /// counts one (`client_gone`, on the first route).
  void count_gone(const Chain& chain, const Incoming& in) const {
    observer_.request_finished(target(chain.fallback_chain.routes().front(), in), "client_gone");
  }

 private:
  /// What one forwarded request keeps until its answer.
  struct Forwarding {
    Forwarding(const Chain& chain_in, std::shared_ptr<const Incoming> in_in, StreamTo to)
        : chain(chain_in), in(std::move(in_in)), keys(keys_of(chain_in)), requests(chain_in.upstreams.size()) {
      if (!to.event) return;
      events = [this, to = std::move(to)](const llmretry::SseEvent& event) {
        if (!std::exchange(started, true)) {
          llmretry::curl::HeaderList passed;
          for (const auto& [name, value] : stream.response_headers())
            if (passed_back(name, value) && !llmretry::detail::iequals(name, "content-type"))
              passed.emplace_back(name, llmretry::curl::detail::redact(value, keys));
          if (!in->degraded.empty()) passed.emplace_back("x-llmretry-degraded", in->degraded);
          to.start(std::move(passed));
        }
        if (keys.empty()) return to.event(event);
        llmretry::SseEvent told = event;
        told.data = llmretry::curl::detail::redact(std::move(told.data), keys);
        told.event = llmretry::curl::detail::redact(std::move(told.event), keys);
        told.id = llmretry::curl::detail::redact(std::move(told.id), keys);
        to.event(told);
      };
    }

    /// Returns true when the call goes on once its client is gone: not streamed, with an Idempotency-Key, and
    /// an attempt sent (its answer is stored under the key for the client's retry).
    [[nodiscard]] bool answer_kept() const noexcept { return !events && !in->idempotency_key.empty() && !queued_since; }

    /// Returns the request sent on `route`, made the first time.
    const llmretry::curl::Request& request_for(const llmretry::Route& route) {
      const std::size_t index = static_cast<std::size_t>(&route - chain.fallback_chain.routes().data());
      auto& request = requests[index];
      if (!request) {
        const Upstream& upstream = chain.upstream_of(route);
        request.emplace(llmretry::curl::Request{"POST",
                                                llmretry::resolve_url(upstream.base_url, in->path),
                                                {{"Content-Type", "application/json"}},
                                                body_for(upstream, *in)});
        if (upstream.format == Format::anthropic) {
          if (!upstream.api_key.empty()) request->headers.emplace_back("x-api-key", upstream.api_key);
          request->headers.emplace_back("anthropic-version",
                                        in->anthropic_version.empty() ? "2023-06-01" : in->anthropic_version);
          if (!in->anthropic_beta.empty()) request->headers.emplace_back("anthropic-beta", in->anthropic_beta);
        } else if (!upstream.api_key.empty()) {
          request->headers.emplace_back("Authorization", "Bearer " + upstream.api_key);
        }
        if (!in->idempotency_key.empty()) request->headers.emplace_back("Idempotency-Key", in->idempotency_key);
        if (events) request->headers.emplace_back("Accept", "text/event-stream");
      }
      return *request;
    }

    const Chain& chain;
    std::shared_ptr<const Incoming> in;
    std::vector<std::string> keys;  ///< the upstreams' keys, redacted from what goes back
    std::function<void(const llmretry::SseEvent&)>
        events;            ///< the client's stream, behind the redaction; empty: not streamed
    bool started = false;  ///< the client's stream has started
    llmretry::StreamGuard stream;
    std::vector<std::optional<llmretry::curl::Request>> requests;  ///< per route, made when first sent there
    const llmretry::Route* current = nullptr;                      ///< the route of the last attempt
    llmretry::FallbackOptions options;
    std::optional<llmretry::FallbackGiveUp> gave_up;
    llmretry::metrics::Queue queue;  ///< its class and task type, until its first attempt is sent
    std::optional<std::chrono::steady_clock::time_point> queued_since;  ///< set until then
    boost::asio::cancellation_signal cancel;                            ///< cancels the call: its client is gone
    bool client_gone = false;  ///< the client went away, and the call was cancelled for it (see forward)
  };

  /// Tells the observer that `call` left its queue (its first attempt is sent, or it ended without one).
  void left_queue(Forwarding& call) const {
    if (!call.queued_since) return;
    const auto waited = std::chrono::steady_clock::now() - *std::exchange(call.queued_since, std::nullopt);
    Reporting::tell([&] { observer_.queue_left(call.queue, waited); });
  }

  /// The relay's guard on each route: reports each attempt admitted (its tokens reserved), each retry
  /// admitted (with the failure before it) and each rate-limit hit to the observer.
  struct Reporting {
    llmretry::metrics::Observer* observer;
    llmretry::metrics::Target target;
    std::int64_t tokens;
    std::optional<llmretry::Failure> last;  ///< the failure of the attempt before

    struct Ticket {
      Reporting* owner;
      template <class... Answer>
      void succeeded(const Answer&... /*answer*/) const noexcept {}
      void failed(const llmretry::Failure& failure) const noexcept {
        owner->last = failure;
        if (failure.kind == llmretry::FailureKind::rate_limited)
          tell([&] { owner->observer->rate_limited(owner->target, llmretry::metrics::LimitType::unknown); });
      }
    };

    llmretry::Admission<Ticket> admit(const llmretry::Attempt& attempt) noexcept {
      if (last && attempt.number > 1) tell([&] { observer->retried(target, *last, attempt.number - 1); });
      tell([&] { observer->tokens_reserved(target, static_cast<std::uint64_t>(std::max<std::int64_t>(0, tokens))); });
      return llmretry::Admission<Ticket>::go(Ticket{this});
    }

    /// Tells the observer, dropping what it throws: reporting never changes what a call does.
    template <class Tell>
    static void tell(Tell&& telling) noexcept {
      try {
        telling();
      } catch (...) {}
    }
  };

  /// Returns the answer to the client once the call through the chain ended with `error` or `routed`.
  Answer answer_to(const Forwarding& call, std::exception_ptr error,
                   llmretry::Routed<llmretry::curl::Response> routed) const {
    const Incoming& in = *call.in;
    if (!error) {
      const llmretry::metrics::Target answered = target(call.chain, routed.route, in);
      if (const auto usage = llmretry::json::usage_of(routed.answer.body))
        observer_.tokens_used(answered, static_cast<std::uint64_t>(usage->tokens()));
      observer_.request_finished(answered, "success");
      return answer_of(std::move(routed.answer), !call.events);
    }
    const llmretry::Route& current =
        call.current != nullptr ? *call.current : call.chain.fallback_chain.routes().front();
    if (call.client_gone)
      return cut(call, current);  // whatever ended it: the cancel, or a give-up it came too late for
    try {
      std::rethrow_exception(error);
    } catch (const llmretry::StreamInterrupted&) {
      return cut(call, current);
    } catch (const boost::system::system_error& cancelled) {
      if (cancelled.code() == boost::asio::error::operation_aborted) return cut(call, current);
      return gave_up_answer(call, cancelled, current);
    } catch (const std::exception& failed) {
      return gave_up_answer(call, failed, current);
    } catch (...) {
      return gave_up_answer(call, std::runtime_error("unknown failure"), current);
    }
  }

  /// The answer to a stream that broke after it had begun, or to a call whose client went away.
  Answer cut(const Forwarding& call, const llmretry::Route& current) const {
    observer_.request_finished(target(current, *call.in), call.client_gone ? "client_gone" : "stream_interrupted");
    Answer answer;
    answer.status = 502;
    answer.body =
        error_body({502, "the upstream's stream broke after it had begun", "upstream_error", "stream_interrupted"},
                   call.in->format);
    answer.headers.emplace_back("x-should-retry", "false");
    return answer;
  }

  /// The answer to a call that gave up with `error` (the last route's exception).
  Answer gave_up_answer(const Forwarding& call, const std::exception& error, const llmretry::Route& current) const {
    const Incoming& in = *call.in;
    const auto& gave_up = call.gave_up;
    const llmretry::metrics::Target at = gave_up ? target(call.chain, gave_up->route, in) : target(current, in);
    const llmretry::Failure failure =
        gave_up ? gave_up->last.failure : llmretry::failure_of(error).value_or(llmretry::Failure{});
    const std::string stop = !gave_up ? "failed"
                             : never_fits(gave_up->last.reason, gave_up->last.failure)
                                 ? never_fits_code
                                 : llmretry::to_string(gave_up->last.reason);
    observer_.request_finished(at, stop);
    const std::optional<llmretry::StopReason> reason = gave_up ? std::optional(gave_up->last.reason) : std::nullopt;
    // A transport error that another attempt cannot fix (a TLS certificate refused, a bad URL) is named by
    // libcurl's word for it: the kind alone ("unknown") would leave the operator guessing. Its details (files
    // and hosts of the relay's side) are not passed on.
    std::string why;
    if (failure.status == 0 && failure.kind == llmretry::FailureKind::unknown && gave_up &&
        llmretry::curl::response_of(error) != nullptr) {
      const std::string_view text = error.what();
      why = ": " + std::string(text.substr(0, std::min(text.find(": "), std::size_t{120})));
    }
    Answer answer = give_up_answer(reason, failure, stop, why, llmretry::curl::response_of(error), at, in.format);
    if (retried_here(answer.status) && reason != llmretry::StopReason::no_capacity)
      answer.headers.emplace_back("x-should-retry", "false");  // retried here already
    return answer;
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
    const std::string& sent = in.sent_body.empty() ? in.body : in.sent_body;
    if (upstream.model.empty() || upstream.model == in.model) return sent;
    nlohmann::json body = nlohmann::json::parse(sent);  // checked when it arrived
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
      if (passed_back(header.first, header.second)) answer.headers.push_back(std::move(header));
    return answer;
  }

  Answer give_up_answer(std::optional<llmretry::StopReason> reason, const llmretry::Failure& failure,
                        const std::string& stop, const std::string& why, const llmretry::curl::Response* upstream,
                        const llmretry::metrics::Target& at, Format format) const {
    using llmretry::StopReason;
    const auto refuse = [&](int status, const std::string& message, const char* type) {
      Answer answer;
      answer.status = status;
      answer.body = error_body({status, message, type, stop}, format);
      answer.headers.emplace_back("Content-Type", json_content_type);
      return answer;
    };
    if (never_fits(reason, failure)) {
      Answer answer;  // waiting does not help: not a rate-limit hit
      answer.status = 400;
      answer.body = error_body(
          bad_request(
              "the request's estimated cost (its max_tokens and input) exceeds a limit of the relay (--tpm, --rpm, "
              "or its model's): it can never be sent",
              never_fits_code),
          format);
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
    const std::string message = "upstream gave up (" + stop + "): " + llmretry::describe(failure) + why;
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
  llmretry::curl::Options curl_options_[2][2];  ///< by Format, then streamed
  boost::asio::thread_pool* guard_pool_;
};

}  // namespace relay

#endif  // LLMRETRY_RELAY_FORWARD_HPP
