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

TEST_CASE("a query of the base URL comes after the path, joined to the path's own; a fragment is dropped") {
  CHECK(
      llmretry::resolve_url("https://example.openai.azure.com/openai/v1?api-version=preview", "/v1/chat/completions") ==
      "https://example.openai.azure.com/openai/v1/chat/completions?api-version=preview");
  CHECK(llmretry::resolve_url("https://example.org/v1/?key=a", "/v1/embeddings?b=2") ==
        "https://example.org/v1/embeddings?key=a&b=2");
  CHECK(llmretry::resolve_url("https://example.org/v1", "/v1/embeddings?b=2") ==
        "https://example.org/v1/embeddings?b=2");
  CHECK(llmretry::resolve_url("https://example.org/api?", "/v1/responses") == "https://example.org/api/v1/responses");
  CHECK(llmretry::resolve_url("https://example.org/v1#part", "/v1/responses") == "https://example.org/v1/responses");
  CHECK(llmretry::resolve_url("https://example.org/v1?a=1#part", "/v1/responses") ==
        "https://example.org/v1/responses?a=1");
}
