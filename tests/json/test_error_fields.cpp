#include <llmretry/json/error_fields.hpp>

#include <llmretry_catch.hpp>

using llmretry::json::error_fields;

TEST_CASE("error_fields reads every provider's error body") {
  SECTION("OpenAI / Azure") {
    const auto fields = error_fields(
        "{\"error\": {\"message\": \"Your requests to gpt-6-luna for chat-small in eastus2 have exceeded token rate "
        "limit.\",\n           \"type\": \"too_many_requests\", \"code\": \"rate_limit_exceeded\"}}");
    CHECK(fields.code == "rate_limit_exceeded");
    CHECK(fields.type == "too_many_requests");
    CHECK(fields.status.empty());
  }
  SECTION("Anthropic") {
    const auto fields = error_fields(R"({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}})");
    CHECK(fields.type == "overloaded_error");
    CHECK(fields.code.empty());
  }
  SECTION("Gemini, also wrapped in an array") {
    const char* body =
        R"({"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure"},)"
        R"({"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"30s"}]}})";
    // append, not "[" + std::string(body): GCC 12 at -O3 in C++20 reports a false -Wrestrict on the latter.
    for (const auto& text : {std::string(body), std::string("[").append(body).append("]")}) {
      const auto fields = error_fields(text);
      CHECK(fields.status == "RESOURCE_EXHAUSTED");
      CHECK(fields.retry_delay == "30s");
      CHECK(fields.code.empty());  // a number, not a string
    }
  }
  SECTION("OpenAI's Responses API: the response.failed stream event") {
    const auto fields =
        error_fields(R"({"type":"response.failed","sequence_number":3,"response":{"id":"resp_1","status":"failed",)"
                     R"("error":{"code":"server_error","message":"The model failed to generate a response."}}})");
    CHECK(fields.code == "server_error");
    CHECK(fields.message == "The model failed to generate a response.");
  }
}

TEST_CASE("error_fields ignores what it does not understand") {
  for (const char* body :
       {"", "not json", "{\"error\": \"text\"}", "[]", "42", "{\"error\": {\"code\": null, \"details\": 3}}",
        "{\"error\": {\"details\": [1, {\"@type\": 2}]}}", "{\"error\": {\"code\": \"x\"",
        R"({"type":"response.completed","response":{"status":"completed","error":null}})", R"({"response":"text"})",
        R"({"error":null,"response":{"error":{"code":"server_error"}}})"}) {
    INFO(body);
    const auto fields = error_fields(body);
    CHECK(fields.empty());
  }
}
