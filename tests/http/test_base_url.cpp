#include <llmretry/http/base_url.hpp>

#include <llmretry_catch.hpp>

TEST_CASE("the base URL is resolved as the OpenAI SDKs do") {
  CHECK(llmretry::resolve_url("https://api.openai.com/v1", "/v1/chat/completions") ==
        "https://api.openai.com/v1/chat/completions");
  CHECK(llmretry::resolve_url("https://api.openai.com/v1/", "/v1/embeddings") ==
        "https://api.openai.com/v1/embeddings");
  CHECK(llmretry::resolve_url("http://127.0.0.1:8080", "/v1/chat/completions") ==
        "http://127.0.0.1:8080/v1/chat/completions");
  CHECK(llmretry::resolve_url("https://example.org/openai/v1", "/v1/responses") ==
        "https://example.org/openai/v1/responses");
  CHECK(llmretry::resolve_url("https://example.org/v10", "/v1/responses") == "https://example.org/v10/v1/responses");
}
