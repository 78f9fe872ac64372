#ifndef LLMRETRY_METRICS_OTEL_HPP
#define LLMRETRY_METRICS_OTEL_HPP

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "../failure.hpp"
#include "../version.hpp"
#include "observer.hpp"

/// The OpenTelemetry attributes of the events of an Observer, for an application that bridges them to an
/// OpenTelemetry SDK under the standard (semantic-convention) names. The Prometheus labels map to them so:
///
///   Prometheus label  OpenTelemetry attribute     events
///   provider          gen_ai.provider.name        every event with a Target
///   model             gen_ai.request.model        every event with a Target
///   error_type        error.type                  retried: to_string(failure.kind)
///   status            error.type, absent when     request_finished
///                     the status is "success"
///   (none)            http.request.resend_count   retried, hedged: the resend's number, 1 for the first
///
/// The other labels (limit_type, priority, task_type, from_provider, to_provider, reason) have no
/// standard attribute: keep their Prometheus names. gen_ai.token.type does not apply to the token
/// counters: they count input and output tokens together.

LLMRETRY_BEGIN_NAMESPACE
namespace metrics {

/// One OpenTelemetry attribute: its standard name and its value, a string or an integer.
struct Attribute {
  std::string_view name;                          ///< such as "gen_ai.provider.name"
  std::variant<std::string, std::int64_t> value;  ///< such as "openai", or 1 for a resend count

  friend bool operator==(const Attribute& a, const Attribute& b) { return a.name == b.name && a.value == b.value; }
  friend bool operator!=(const Attribute& a, const Attribute& b) { return !(a == b); }
};

/// Returns the attributes of `target`: gen_ai.provider.name and gen_ai.request.model (for the tokens,
/// rate-limit and request events).
[[nodiscard]] inline std::vector<Attribute> otel_attributes(const Target& target) {
  return {{"gen_ai.provider.name", target.provider}, {"gen_ai.request.model", target.model}};
}

/// Returns the attributes of a request to `target` that ended with `status` (request_finished): those of
/// the target, and error.type = status unless the status is "success".
[[nodiscard]] inline std::vector<Attribute> otel_attributes(const Target& target, std::string_view status) {
  std::vector<Attribute> attributes = otel_attributes(target);
  if (status != "success") attributes.push_back({"error.type", std::string(status)});
  return attributes;
}

/// Returns the attributes of a resend to `target` after `failure` (retried): those of the target,
/// error.type = to_string(failure.kind) and http.request.resend_count = `resend_count`.
[[nodiscard]] inline std::vector<Attribute> otel_attributes(const Target& target, const Failure& failure,
                                                            int resend_count) {
  std::vector<Attribute> attributes = otel_attributes(target);
  attributes.push_back({"error.type", std::string(to_string(failure.kind))});
  attributes.push_back({"http.request.resend_count", std::int64_t{resend_count}});
  return attributes;
}

/// Returns the attributes of a hedge sent to `target` (hedged): those of the target and
/// http.request.resend_count = `resend_count` (a hedge is a resend that no failure caused: no error.type).
[[nodiscard]] inline std::vector<Attribute> otel_attributes(const Target& target, int resend_count) {
  std::vector<Attribute> attributes = otel_attributes(target);
  attributes.push_back({"http.request.resend_count", std::int64_t{resend_count}});
  return attributes;
}

}  // namespace metrics
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_METRICS_OTEL_HPP
