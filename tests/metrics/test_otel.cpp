#include <llmretry/metrics/otel.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "llmretry_catch.hpp"

using namespace llmretry;
using namespace llmretry::metrics;

TEST_CASE("otel_attributes name a target with the gen_ai attributes", "[metrics][otel]") {
  CHECK(otel_attributes(Target{"openai", "gpt-5.5"}) ==
        std::vector<Attribute>{{"gen_ai.provider.name", std::string("openai")},
                               {"gen_ai.request.model", std::string("gpt-5.5")}});
}

TEST_CASE("otel_attributes of a request: error.type unless it succeeded", "[metrics][otel]") {
  const Target target{"anthropic", "claude-sonnet-4.6"};
  CHECK(otel_attributes(target, "success") == otel_attributes(target));
  const auto attributes = otel_attributes(target, "attempts_exhausted");
  REQUIRE(attributes.size() == 3);
  CHECK(attributes[2] == Attribute{"error.type", std::string("attempts_exhausted")});
}

TEST_CASE("otel_attributes of a resend: error.type and http.request.resend_count", "[metrics][otel]") {
  const auto attributes =
      otel_attributes(Target{"openai", "gpt-5.5"}, Failure::of(FailureKind::rate_limited, Sent::refused), 2);
  REQUIRE(attributes.size() == 4);
  CHECK(attributes[2] == Attribute{"error.type", std::string("rate_limited")});
  CHECK(attributes[3] == Attribute{"http.request.resend_count", std::int64_t{2}});
}

TEST_CASE("otel_attributes of a hedge: http.request.resend_count and no error.type", "[metrics][otel]") {
  CHECK(otel_attributes(Target{"openai", "gpt-5.5"}, 3) ==
        std::vector<Attribute>{{"gen_ai.provider.name", std::string("openai")},
                               {"gen_ai.request.model", std::string("gpt-5.5")},
                               {"http.request.resend_count", std::int64_t{3}}});
}

TEST_CASE("to_string names each limit type", "[metrics][observer]") {
  CHECK(std::string(to_string(LimitType::requests)) == "requests");
  CHECK(std::string(to_string(LimitType::tokens)) == "tokens");
  CHECK(std::string(to_string(LimitType::concurrency)) == "concurrency");
  CHECK(std::string(to_string(LimitType::unknown)) == "unknown");
}
