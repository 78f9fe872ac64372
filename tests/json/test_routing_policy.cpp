#include <llmretry/json/routing_policy.hpp>

#include <string>

#include "llmretry_catch.hpp"

using namespace llmretry;

namespace {

// The routing policy as an operations team writes it.
constexpr const char* policy_text = R"({
  "task": "support_ticket_summary",
  "primary": {"provider": "anthropic", "model": "claude-sonnet-4.6"},
  "fallbacks": [
    {"provider": "openai", "model": "gpt-5.5", "when": ["provider_5xx", "rate_limit_after_retry_budget"]},
    {"provider": "google", "model": "gemini-3", "when": ["context_length_needed", "primary_unavailable"]}
  ],
  "degrade_to": {"provider": "open_model_cluster", "model": "qwen", "when": ["batch_low_priority"]},
  "under_pressure": {"light": {"max_tokens": 512}, "moderate": {"model": "claude-haiku-4.5", "max_tokens": 256},
                     "high": {"hold": "batch"}}
})";

std::string error_of(const std::string& text) {
  try {
    (void)json::routing_policy(text);
  } catch (const std::invalid_argument& error) {
    return error.what();
  }
  return "no error";
}

// The policy text with `from` replaced by `to`.
std::string edited(const std::string& from, const std::string& to) {
  std::string text = policy_text;
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("A routing policy is read into the routes of a chain", "[routing_policy]") {
  const json::RoutingPolicy policy = json::routing_policy(std::string(policy_text));
  CHECK(policy.task == "support_ticket_summary");
  CHECK(policy.primary.provider == "anthropic");
  REQUIRE(policy.fallbacks.size() == 2);
  CHECK(policy.fallbacks[1].when ==
        std::vector<FallbackReason>{FallbackReason::context_length_needed, FallbackReason::primary_unavailable});
  REQUIRE(policy.degrade_to);
  CHECK(policy.degrade_to->when == std::vector<std::string>{"batch_low_priority"});

  const PressureRules& rules = policy.under_pressure;
  CHECK(rules.in_force(Pressure::normal) == nullptr);
  REQUIRE(rules.in_force(Pressure::light) != nullptr);
  CHECK(rules.in_force(Pressure::light)->max_tokens == 512);
  CHECK(rules.in_force(Pressure::light)->model.empty());
  CHECK_FALSE(rules.in_force(Pressure::light)->hold);
  REQUIRE(rules.in_force(Pressure::moderate) != nullptr);
  CHECK(rules.in_force(Pressure::moderate)->model == "claude-haiku-4.5");
  CHECK(rules.in_force(Pressure::moderate)->max_tokens == 256);
  REQUIRE(rules.in_force(Pressure::high) != nullptr);
  CHECK(rules.in_force(Pressure::high)->hold == Priority::batch);
  CHECK_FALSE(rules.in_force(Pressure::high)->fallback);
  CHECK(rules.in_force(Pressure::extreme) == rules.in_force(Pressure::high));  // no rule of its own: the one below
  CHECK(json::pressure_rules(nlohmann::json::parse(R"({"extreme": {"fallback": true}})"))
            .in_force(Pressure::extreme)
            ->fallback);

  const FallbackChain chain{policy.routes()};
  REQUIRE(chain.routes().size() == 3);
  CHECK(chain.routes()[0].name == "anthropic/claude-sonnet-4.6");
  CHECK(chain.routes()[2].model == "gemini-3");
  CHECK(chain.next(0, FallbackReason::context_length_needed) == 2u);
  CHECK(chain.next(0, FallbackReason::provider_5xx) == 1u);
}

TEST_CASE("A bad routing policy is refused, naming the field", "[routing_policy]") {
  CHECK(error_of(edited("\"primary_unavailable\"]", "\"foo\"]")) ==
        "routing.fallbacks[1].when[1]: unknown reason \"foo\"");
  CHECK(error_of(edited("[\"provider_5xx\",", "[5,")) == "routing.fallbacks[0].when[0]: must be a string");
  CHECK(error_of(edited("\"when\": [\"context_length_needed\", \"primary_unavailable\"]", "\"when\": []")) ==
        "routing.fallbacks[1].when: must be a non-empty array of strings");
  CHECK(error_of(edited(", \"when\": [\"provider_5xx\", \"rate_limit_after_retry_budget\"]", "")) ==
        "routing.fallbacks[0].when: missing");
  CHECK(error_of(edited("\"model\": \"claude-sonnet-4.6\"", "\"modle\": \"claude-sonnet-4.6\"")) ==
        "routing.primary.modle: unknown field");
  CHECK(error_of(edited("\"provider\": \"anthropic\"", "\"provider\": \"\"")) ==
        "routing.primary.provider: must be a non-empty string");
  CHECK(error_of(R"({"fallbacks": []})") == "routing.primary: missing");
  CHECK(error_of(R"({"primary": {"provider": "a", "model": "b"}, "fallbacks": {}})") ==
        "routing.fallbacks: must be an array");
  CHECK(error_of("[1, 2]") == "routing: must be an object");
  CHECK(error_of("{\"primary\": ") == "routing: not valid JSON");
  CHECK(error_of(edited("\"when\": [\"batch_low_priority\"]", "\"when\": \"batch_low_priority\"")) ==
        "routing.degrade_to.when: must be a non-empty array of strings");
}

TEST_CASE("Pressure rules: a level without a rule takes the one below, none at normal", "[routing_policy]") {
  const PressureRules rules = json::pressure_rules(nlohmann::json::parse(R"({"moderate": {"hold": "standard"}})"));
  CHECK_FALSE(rules.empty());
  CHECK(rules.in_force(Pressure::normal) == nullptr);
  CHECK(rules.in_force(Pressure::light) == nullptr);
  REQUIRE(rules.in_force(Pressure::moderate) != nullptr);
  CHECK(rules.in_force(Pressure::moderate)->hold == Priority::standard);
  CHECK(rules.in_force(Pressure::extreme) == rules.in_force(Pressure::moderate));
  CHECK(PressureRules{}.empty());
  CHECK(PressureRules{}.in_force(Pressure::extreme) == nullptr);
  CHECK(json::routing_policy(std::string(R"({"primary": {"provider": "a", "model": "b"}})")).under_pressure.empty());
}

TEST_CASE("Bad pressure rules are refused, naming the field", "[routing_policy]") {
  const auto rules_error = [](const std::string& rules) {
    return error_of(R"({"primary": {"provider": "a", "model": "b"}, "under_pressure": )" + rules + "}");
  };
  CHECK(rules_error(R"({"severe": {"max_tokens": 5}})") == "routing.under_pressure.severe: unknown field");
  CHECK(rules_error("{}") == "routing.under_pressure: must name at least one level (light, moderate, high, extreme)");
  CHECK(rules_error("[]") == "routing.under_pressure: must be an object");
  CHECK(rules_error(R"({"light": {}})") ==
        "routing.under_pressure.light: must say what it does: max_tokens, model, hold or fallback");
  CHECK(rules_error(R"({"moderate": {"fallback": false}})") ==
        "routing.under_pressure.moderate: must say what it does: max_tokens, model, hold or fallback");
  CHECK(rules_error(R"({"extreme": {"fallback": 1}})") ==
        "routing.under_pressure.extreme.fallback: must be true or false");
  CHECK(rules_error(R"({"extreme": {"fallback": true, "model": "small"}})") ==
        "routing.under_pressure.extreme: model and fallback: a request goes to one of them, choose");
  CHECK(rules_error(R"({"light": 5})") == "routing.under_pressure.light: must be an object");
  CHECK(rules_error(R"({"light": {"max_token": 5}})") == "routing.under_pressure.light.max_token: unknown field");
  for (const char* tokens : {"0", "-1", "1.5", "\"5\"", "10000001", "true"})
    CHECK(rules_error(std::string(R"({"light": {"max_tokens": )") + tokens + "}}") ==
          "routing.under_pressure.light.max_tokens: must be a whole number in [1, 10000000]");
  CHECK(rules_error(R"({"high": {"model": ""}})") == "routing.under_pressure.high.model: must be a non-empty string");
  for (const char* hold : {"\"interactive\"", "\"urgent\"", "1"})
    CHECK(rules_error(std::string(R"({"high": {"hold": )") + hold + "}}")
              .rfind("routing.under_pressure.high.hold: must", 0) == 0);
  CHECK(rules_error(R"({"high": {"hold": "interactive"}})") ==
        "routing.under_pressure.high.hold: must be \"standard\" or \"batch\" (the class held, with those below it)");
  try {
    (void)json::pressure_rules(nlohmann::json::parse(R"({"light": {"max_tokens": 0}})"), "models.gpt.under_pressure");
    FAIL("no error");
  } catch (const std::invalid_argument& error) {
    CHECK(std::string(error.what()) ==
          "models.gpt.under_pressure.light.max_tokens: must be a whole number in [1, 10000000]");
  }
}
