#ifndef LLMRETRY_TESTING_SIMULATED_PROVIDER_HPP
#define LLMRETRY_TESTING_SIMULATED_PROVIDER_HPP

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../detail/config.hpp"
#include "../detail/number.hpp"
#include "../errors.hpp"
#include "../failure.hpp"
#include "../result.hpp"
#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace testing {

/// One parsed script item: a failure to report `repeat` times, or success (no failure).
struct ScriptStep {
  std::optional<Failure> failure;
  int repeat = 1;
};

namespace detail {

/// Returns true when item is "name:VALUE" with VALUE a decimal number of `unit_ms` milliseconds (stored
/// in `wait`), or just `name` when the value is optional (leaving `wait` empty).
[[nodiscard]] inline bool take_wait(std::string_view item, std::string_view name, std::int64_t unit_ms,
                                    bool value_optional, std::optional<std::chrono::milliseconds>& wait) {
  if (item == name) return value_optional;
  if (item.size() <= name.size() + 1 || item.substr(0, name.size()) != name || item[name.size()] != ':') return false;
  wait = llmretry::detail::parse_decimal_ms(item.substr(name.size() + 1), unit_ms);
  return wait.has_value();
}

/// Returns the outcome an item without its "*N" names: a failure, or nullopt for "ok"; returns an empty
/// outer optional when the item is not in the vocabulary.
[[nodiscard]] inline std::optional<std::optional<Failure>> parse_outcome(std::string_view item) {
  using std::chrono::milliseconds;
  const auto with_sent = [](FailureKind kind, Sent sent) { return Failure::of(kind, sent); };
  if (item == "ok") return std::optional<Failure>{};
  if (item == "timeout") return with_sent(FailureKind::timeout, Sent::maybe_processed);
  if (item == "connect_timeout") return with_sent(FailureKind::timeout, Sent::not_sent);
  if (item == "connection_refused") return with_sent(FailureKind::connection, Sent::not_sent);
  if (item == "connection_reset") return with_sent(FailureKind::connection, Sent::maybe_processed);
  if (item == "server_error") return classify_status(503);
  if (item == "overloaded") return classify_status(529);
  if (item == "quota_exhausted") return classify_status(429, "insufficient_quota");
  if (item == "context_length") return classify_status(400, "context_length_exceeded");
  if (item == "content_filter") return classify_status(400, "content_filter");
  std::optional<milliseconds> wait;
  if (take_wait(item, "rate_limit", 1000, true, wait) || take_wait(item, "rate_limit_ms", 1, false, wait)) {
    Failure failure = classify_status(429);
    failure.provider_wait = wait;
    return failure;
  }
  if (item.substr(0, 7) == "status:") {  // status:NNN or status:NNN:SECONDS
    const auto rest = item.substr(7);
    const auto code = rest.substr(0, 3);
    const auto status = code.size() == 3 ? llmretry::detail::parse_digits(code) : std::nullopt;
    if (status && *status >= 400 && *status <= 599 && (rest.size() == 3 || take_wait(rest, code, 1000, false, wait))) {
      Failure failure = classify_status(static_cast<int>(*status));
      failure.provider_wait = wait;
      return failure;
    }
  }
  return std::nullopt;
}

}  // namespace detail

/// Parses one script item: "ok", "rate_limit", "rate_limit:SECONDS" (429 with Retry-After, fractions
/// allowed), "rate_limit_ms:MS" (429 with retry-after-ms), "timeout" (no answer; the request may have been
/// processed), "connect_timeout" and "connection_refused" (never sent), "connection_reset" (reset after
/// sending), "server_error" (503), "overloaded" (529), "quota_exhausted" (429 insufficient_quota),
/// "context_length" and "content_filter" (400), "status:NNN" or "status:NNN:SECONDS" (any status 400-599,
/// optionally with Retry-After); any of them may end with "*N" to repeat it N times (1 to 1,000,000).
/// Throws std::invalid_argument naming the item when it is none of these.
[[nodiscard]] inline ScriptStep parse_script_item(std::string_view item) {
  const auto fail = [&] {
    throw std::invalid_argument("SimulatedProvider: malformed script item \"" + std::string(item) +
                                "\" (expected ok, rate_limit[:SECONDS], rate_limit_ms:MS, timeout, "
                                "connect_timeout, connection_refused, connection_reset, server_error, overloaded, "
                                "quota_exhausted, context_length, content_filter or status:NNN[:SECONDS], "
                                "optionally followed by *N)");
  };
  ScriptStep step;
  auto outcome = item;
  if (const auto star = item.rfind('*'); star != std::string_view::npos) {
    outcome = item.substr(0, star);
    const auto n = llmretry::detail::parse_digits(item.substr(star + 1));
    if (!n || *n < 1 || *n > 1'000'000) fail();
    step.repeat = static_cast<int>(*n);
  }
  const auto parsed = detail::parse_outcome(outcome);
  if (!parsed) fail();
  step.failure = *parsed;
  return step;
}

/// A provider that fails on purpose, in a fixed order: each call takes the next script item, and after
/// the script every call succeeds. Stands in front of your real (or mock) call in tests and examples.
/// Safe to call from several threads.
class SimulatedProvider {
 public:
  /// Builds the provider from a script (see parse_script_item for the items).
  /// Throws std::invalid_argument naming the first malformed item and its position.
  explicit SimulatedProvider(const std::vector<std::string>& script) {
    for (std::size_t i = 0; i < script.size(); ++i) {
      ScriptStep step;
      try {
        step = parse_script_item(script[i]);
      } catch (const std::invalid_argument& error) {
        throw std::invalid_argument(std::string(error.what()) + " at position " + std::to_string(i));
      }
      steps_.insert(steps_.end(), static_cast<std::size_t>(step.repeat), step.failure);
    }
  }
  SimulatedProvider(std::initializer_list<std::string> script) : SimulatedProvider(std::vector<std::string>(script)) {}

  /// Takes the next script item: returns its failure, or nullopt when this call succeeds.
  [[nodiscard]] std::optional<Failure> next() {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto index = static_cast<std::size_t>(calls_++);
    return index < steps_.size() ? steps_[index] : std::nullopt;
  }

  /// Performs one call: throws the scripted error (RateLimited, ProviderTimeout, ConnectionError or
  /// ProviderError, as a real adapter would), or returns on_ok() when the call succeeds.
  template <class OnOk>
  decltype(auto) call(OnOk&& on_ok) {
    if (const auto failure = next()) throw_provider_error(message(*failure), *failure);
    return on_ok();
  }
  /// Performs one call that returns nothing: throws the scripted error, if any.
  void call() {
    call([] {});
  }

  /// Performs one call without exceptions: returns the scripted failure as an Error, or on_ok().
  template <class OnOk>
  auto try_call(OnOk&& on_ok) -> Result<decltype(on_ok())> {
    if (const auto failure = next()) return Error{*failure, message(*failure)};
    if constexpr (std::is_void_v<decltype(on_ok())>) {
      on_ok();
      return {};
    } else {
      return on_ok();
    }
  }
  /// Performs one call without exceptions that returns nothing.
  Result<void> try_call() {
    return try_call([] {});
  }

  /// Returns how many calls were made.
  [[nodiscard]] int calls() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }

  /// Returns the message a real adapter would give the failure, such as "HTTP 429: rate limited (simulated).".
  [[nodiscard]] static std::string message(const Failure& failure) {
    switch (failure.kind) {
      case FailureKind::timeout:
        return failure.sent == Sent::not_sent ? "Could not connect within the timeout (simulated)."
                                              : "The provider did not answer within the timeout (simulated).";
      case FailureKind::connection:
        return failure.sent == Sent::not_sent ? "Connection refused (simulated)."
                                              : "Connection reset after sending (simulated).";
      case FailureKind::rate_limited: return "HTTP 429: rate limited (simulated).";
      case FailureKind::quota_exhausted: return "HTTP 429: quota exhausted (simulated).";
      case FailureKind::server_error:
        return "HTTP " + std::to_string(failure.status) +
               (failure.status == 529 ? ": overloaded (simulated)." : ": service unavailable (simulated).");
      default: return "HTTP " + std::to_string(failure.status) + ": " + to_string(failure.kind) + " (simulated).";
    }
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::optional<Failure>> steps_;
  int calls_ = 0;
};

}  // namespace testing
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_TESTING_SIMULATED_PROVIDER_HPP
