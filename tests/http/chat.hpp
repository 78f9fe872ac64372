#ifndef LLMRETRY_TESTS_HTTP_CHAT_HPP
#define LLMRETRY_TESTS_HTTP_CHAT_HPP

// What the libcurl tests send the loopback provider: a chat completion request and the options of an attempt.

#include <llmretry/curl/curl.hpp>
#include <llmretry/json/error_fields.hpp>
#include <llmretry/loopback/provider.hpp>

#include <chrono>
#include <string>
#include <string_view>

namespace llmretry_test {

/// The API key the tests send: never to be seen in an exception's text.
inline const std::string secret_key = "sk-test-never-shown";

/// Returns a chat completion request to `server`, authorised with secret_key.
inline llmretry::curl::Request chat_request(const llmretry::testing::LoopbackProvider& server) {
  llmretry::curl::Request request;
  request.url = server.base_url() + "/v1/chat/completions";
  request.headers = {{"Authorization", "Bearer " + secret_key}, {"Content-Type", "application/json"}};
  request.body = R"({"model":"chat-small","messages":[{"role":"user","content":"hello"}]})";
  return request;
}

/// Returns the options of an attempt classified for `provider`: 1 s to connect, 2 s in all, error bodies read.
inline llmretry::curl::Options options_for(llmretry::Provider provider) {
  using namespace std::chrono_literals;
  llmretry::curl::Options options;
  options.provider = provider;
  options.connect_timeout = 1000ms;
  options.timeout = 2000ms;
  options.read_error = [](std::string_view body) { return llmretry::json::error_fields(body); };
  return options;
}

}  // namespace llmretry_test

#endif  // LLMRETRY_TESTS_HTTP_CHAT_HPP
