#ifndef LLMRETRY_JSON_ROUTING_POLICY_HPP
#define LLMRETRY_JSON_ROUTING_POLICY_HPP

/// Reads a routing policy (a primary, its fallbacks and the reasons to move to each, a degraded
/// target, what each level of pressure does) written in JSON, with nlohmann::json (target llmretry::json), into the
/// routes of a FallbackChain.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "../admission/pressure.hpp"
#include "../admission/priority.hpp"
#include "../fallback.hpp"
#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace json {

/// A deployment named by a routing policy, and the reasons that allow moving to it.
struct RoutingTarget {
  std::string provider;
  std::string model;
  std::vector<FallbackReason> when;  ///< empty for the primary
};

/// Where the application may send work it chooses to degrade, and its own conditions for doing so
/// (such as "batch_low_priority"): the library reports them, the application decides.
struct Degradation {
  std::string provider;
  std::string model;
  std::vector<std::string> when;
};

/// A routing policy:
///
///   {"task": "support_ticket_summary",
///    "primary": {"provider": "anthropic", "model": "claude-sonnet-4.6"},
///    "fallbacks": [{"provider": "openai", "model": "gpt-5.5",
///                   "when": ["provider_5xx", "rate_limit_after_retry_budget"]}, ...],
///    "degrade_to": {"provider": "open_model_cluster", "model": "qwen", "when": ["batch_low_priority"]},
///    "under_pressure": {"light": {"max_tokens": 512}, "moderate": {"model": "claude-haiku-4.5"},
///                       "high": {"hold": "batch"}}}
struct RoutingPolicy {
  std::string task;                       ///< optional; empty when absent
  RoutingTarget primary;                  ///< required
  std::vector<RoutingTarget> fallbacks;   ///< optional; in order
  std::optional<Degradation> degrade_to;  ///< optional
  /// Optional: what pressure on the primary (llmretry::pressure) does to its requests; a rule's model is
  /// another model of the primary's provider, its fallback the fallbacks above.
  PressureRules under_pressure;

  /// Returns the routes of a FallbackChain, the primary first, each named "provider/model". Attach each
  /// route's deployment, breaker and budget before making the chain.
  [[nodiscard]] std::vector<Route> routes() const {
    std::vector<Route> routes;
    const auto add = [&](const RoutingTarget& target) {
      routes.push_back(Route{target.provider + "/" + target.model, target.provider, target.model, target.when});
    };
    add(primary);
    for (const RoutingTarget& fallback : fallbacks) add(fallback);
    return routes;
  }
};

namespace detail {

[[noreturn]] inline void policy_error(const std::string& at, const std::string& problem) {
  throw std::invalid_argument(at + ": " + problem);
}

/// Requires `value` (at `at`) to be an object whose keys are all among `known`.
inline void check_object(const nlohmann::json& value, const std::string& at, std::initializer_list<const char*> known) {
  if (!value.is_object()) policy_error(at, "must be an object");
  for (const auto& item : value.items()) {
    bool found = false;
    for (const char* key : known) found = found || item.key() == key;
    if (!found) policy_error(at + "." + item.key(), "unknown field");
  }
}

/// Returns the non-empty string `object[key]`.
inline std::string required_string(const nlohmann::json& object, const std::string& at, const char* key) {
  const auto found = object.find(key);
  if (found == object.end()) policy_error(at + "." + key, "missing");
  if (!found->is_string() || found->get_ref<const std::string&>().empty())
    policy_error(at + "." + key, "must be a non-empty string");
  return found->get<std::string>();
}

/// Returns the strings of the non-empty array `object["when"]`.
inline std::vector<std::string> when_strings(const nlohmann::json& object, const std::string& at) {
  const auto found = object.find("when");
  if (found == object.end()) policy_error(at + ".when", "missing");
  if (!found->is_array() || found->empty()) policy_error(at + ".when", "must be a non-empty array of strings");
  std::vector<std::string> names;
  for (std::size_t i = 0; i < found->size(); ++i) {
    const auto& name = (*found)[i];
    if (!name.is_string()) policy_error(at + ".when[" + std::to_string(i) + "]", "must be a string");
    names.push_back(name.get<std::string>());
  }
  return names;
}

inline RoutingTarget routing_target(const nlohmann::json& value, const std::string& at, bool primary) {
  if (primary) check_object(value, at, {"provider", "model"});
  else check_object(value, at, {"provider", "model", "when"});
  RoutingTarget target{required_string(value, at, "provider"), required_string(value, at, "model"), {}};
  if (primary) return target;
  const std::vector<std::string> names = when_strings(value, at);
  for (std::size_t i = 0; i < names.size(); ++i) {
    const auto reason = fallback_reason_named(names[i]);
    if (!reason) policy_error(at + ".when[" + std::to_string(i) + "]", "unknown reason \"" + names[i] + "\"");
    target.when.push_back(*reason);
  }
  return target;
}

/// Returns the rules of `value` (at `at`). Throws std::invalid_argument naming the field.
inline PressureRules read_pressure_rules(const nlohmann::json& value, const std::string& at) {
  check_object(value, at, {"light", "moderate", "high", "extreme"});
  if (value.empty()) policy_error(at, "must name at least one level (light, moderate, high, extreme)");
  PressureRules rules;
  for (const Pressure level : {Pressure::light, Pressure::moderate, Pressure::high, Pressure::extreme}) {
    const auto found = value.find(to_string(level));
    if (found == value.end()) continue;
    const std::string here = at + "." + to_string(level);
    check_object(*found, here, {"max_tokens", "model", "hold", "fallback"});
    PressureRule rule;
    if (const auto tokens = found->find("max_tokens"); tokens != found->end()) {
      constexpr std::int64_t most = 10'000'000;
      if (!tokens->is_number_integer() || tokens->get<std::int64_t>() < 1 || tokens->get<std::int64_t>() > most)
        policy_error(here + ".max_tokens", "must be a whole number in [1, " + std::to_string(most) + "]");
      rule.max_tokens = tokens->get<std::int64_t>();
    }
    if (found->contains("model")) rule.model = required_string(*found, here, "model");
    if (found->contains("hold")) {
      const std::string hold = required_string(*found, here, "hold");
      const std::optional<Priority> held = priority_from_string(hold);
      if (!held || *held == Priority::interactive)
        policy_error(here + ".hold", "must be \"standard\" or \"batch\" (the class held, with those below it)");
      rule.hold = held;
    }
    if (const auto fallback = found->find("fallback"); fallback != found->end()) {
      if (!fallback->is_boolean()) policy_error(here + ".fallback", "must be true or false");
      rule.fallback = fallback->get<bool>();
      if (rule.fallback && !rule.model.empty())
        policy_error(here, "model and fallback: a request goes to one of them, choose");
    }
    if (!rule.max_tokens && rule.model.empty() && !rule.hold && !rule.fallback)
      policy_error(here, "must say what it does: max_tokens, model, hold or fallback");
    rules.levels[static_cast<std::size_t>(level) - 1] = std::move(rule);
  }
  return rules;
}

inline RoutingPolicy read_policy(const nlohmann::json& document) {
  const std::string root = "routing";
  detail::check_object(document, root, {"task", "primary", "fallbacks", "degrade_to", "under_pressure"});
  RoutingPolicy policy;
  if (const auto task = document.find("task"); task != document.end()) {
    if (!task->is_string()) detail::policy_error(root + ".task", "must be a string");
    policy.task = task->get<std::string>();
  }
  const auto primary = document.find("primary");
  if (primary == document.end()) detail::policy_error(root + ".primary", "missing");
  policy.primary = detail::routing_target(*primary, root + ".primary", true);
  if (const auto fallbacks = document.find("fallbacks"); fallbacks != document.end()) {
    if (!fallbacks->is_array()) detail::policy_error(root + ".fallbacks", "must be an array");
    for (std::size_t i = 0; i < fallbacks->size(); ++i)
      policy.fallbacks.push_back(
          detail::routing_target((*fallbacks)[i], root + ".fallbacks[" + std::to_string(i) + "]", false));
  }
  if (const auto degrade = document.find("degrade_to"); degrade != document.end()) {
    const std::string at = root + ".degrade_to";
    detail::check_object(*degrade, at, {"provider", "model", "when"});
    policy.degrade_to = Degradation{detail::required_string(*degrade, at, "provider"),
                                    detail::required_string(*degrade, at, "model"), detail::when_strings(*degrade, at)};
  }
  if (const auto rules = document.find("under_pressure"); rules != document.end())
    policy.under_pressure = detail::read_pressure_rules(*rules, root + ".under_pressure");
  return policy;
}

}  // namespace detail

/// Returns the routing policy in `document`.
/// Throws std::invalid_argument naming the field and the problem, such as
/// `routing.fallbacks[1].when[0]: unknown reason "foo"`: a field missing, of the wrong type, empty, or
/// unknown (a misspelt field is an error, not a silent default).
/// (A template only so that a string argument picks the overload below.)
template <class Json, std::enable_if_t<std::is_same_v<Json, nlohmann::json>, int> = 0>
[[nodiscard]] RoutingPolicy routing_policy(const Json& document) {
  return detail::read_policy(document);
}

/// Returns the pressure rules in `rules`, such as {"light": {"max_tokens": 512}, "high": {"hold": "batch"}}
/// (a routing policy's "under_pressure", or any configuration's), its fields named from `at` in errors.
/// Throws std::invalid_argument naming the field and the problem: an unknown level or field, a level that
/// does nothing, max_tokens not a whole number in [1, 10000000], a model not a non-empty string, a hold
/// other than "standard" or "batch", a fallback not a boolean or with a model.
[[nodiscard]] inline PressureRules pressure_rules(const nlohmann::json& rules,
                                                  const std::string& at = "under_pressure") {
  return detail::read_pressure_rules(rules, at);
}

/// Returns the routing policy in the JSON `text`.
/// Throws std::invalid_argument: `routing: not valid JSON`, or naming the field as above.
[[nodiscard]] inline RoutingPolicy routing_policy(std::string_view text) {
  nlohmann::json document = nlohmann::json::parse(text, nullptr, false);
  if (document.is_discarded()) detail::policy_error("routing", "not valid JSON");
  return routing_policy(document);
}

}  // namespace json
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_JSON_ROUTING_POLICY_HPP
