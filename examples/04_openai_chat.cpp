// An OpenAI-compatible chat completion client with retries, over libcurl.
//
//   OPENAI_API_KEY=... [OPENAI_BASE_URL=https://api.openai.com/v1] [OPENAI_MODEL=...] llmretry-example-04-openai-chat
//   [--stream] [prompt]
//
// Like the official SDKs, it reads the base URL and the API key from the environment. With neither, it
// starts the loopback provider on 127.0.0.1 and shows the retries against it: a real Azure 429,
// then a 503, then the answer. The API key and the Authorization header are never printed.
#include <llmretry/curl/curl.hpp>
#include <llmretry/json/error_fields.hpp>
#include <llmretry/loopback/provider.hpp>

#include <llmretry/llmretry.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>

#include "command_line.hpp"

namespace {

constexpr const char* usage = R"(usage: llmretry-example-04-openai-chat [--stream] [PROMPT]

Sends PROMPT (default "Say hello in French.") to an OpenAI-compatible chat completion endpoint, with
retries. Reads OPENAI_BASE_URL, OPENAI_API_KEY and OPENAI_MODEL; with neither of the first two, it runs
against a loopback provider on 127.0.0.1 that answers 429, then 503, then the answer.

  --stream  stream the answer (server-sent events)
  --help    this text

Exit status: 0 when answered, 1 when the call failed, 2 for a bad option.
)";

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

/// Returns choices[0].message.content (or .delta.content for a streamed chunk), or "" when absent.
std::string content_of(std::string_view json_text, const char* part) {
  const auto json = nlohmann::json::parse(json_text.begin(), json_text.end(), nullptr, false);
  if (!json.is_object()) return "";
  const auto choices = json.find("choices");
  if (choices == json.end() || !choices->is_array() || choices->empty()) return "";
  const auto& choice = choices->front();
  if (!choice.is_object() || !choice.contains(part) || !choice[part].is_object()) return "";
  const auto& message = choice[part];
  const auto content = message.find("content");
  return content != message.end() && content->is_string() ? content->get<std::string>() : "";
}

}  // namespace

int main(int argc, char* argv[]) {
  bool stream = false;
  std::string prompt = "Say hello in French.";
  for (example::CommandLine args(argc, argv, "llmretry-example-04-openai-chat", usage); args.next();) {
    if (args.is_flag("--stream")) stream = true;
    else if (args.is_positional()) prompt = args.argument();
    else args.reject();
  }

  std::string base_url = environment("OPENAI_BASE_URL");
  std::string api_key = environment("OPENAI_API_KEY");
  std::unique_ptr<llmretry::testing::LoopbackProvider> loopback;
  if (base_url.empty() && api_key.empty()) {
    loopback = std::make_unique<llmretry::testing::LoopbackProvider>();
    loopback->then(llmretry::testing::LoopbackProvider::azure_rate_limited())
        .then(llmretry::testing::LoopbackProvider::service_unavailable())
        .then(stream ? llmretry::testing::LoopbackProvider::stream({"Bon", "jour", " !"})
                     : llmretry::testing::LoopbackProvider::chat_completion("Bonjour !"));
    base_url = loopback->base_url() + "/v1";
    api_key = "loopback-key";
    std::cout << "No OPENAI_BASE_URL or OPENAI_API_KEY: using the loopback provider at " << base_url << "\n";
  } else if (base_url.empty()) {
    base_url = "https://api.openai.com/v1";
  }
  while (!base_url.empty() && base_url.back() == '/') base_url.pop_back();
  std::string model = environment("OPENAI_MODEL");
  if (model.empty()) model = "gpt-4o-mini";

  nlohmann::json body = {{"model", model}, {"messages", {{{"role", "user"}, {"content", prompt}}}}};
  if (stream) body["stream"] = true;

  llmretry::curl::Request request;
  request.url = base_url + "/chat/completions";
  request.headers = {{"Content-Type", "application/json"}};
  if (!api_key.empty()) request.headers.emplace_back("Authorization", "Bearer " + api_key);
  request.body = body.dump();

  llmretry::curl::Options options;
  options.provider = llmretry::Provider::openai;
  options.connect_timeout = std::chrono::seconds{5};
  options.timeout = std::chrono::seconds{60};
  options.read_error = [](std::string_view text) { return llmretry::json::error_fields(text); };

  llmretry::curl::Call call(request, options);
  if (stream) {
    call.on_event([](const llmretry::SseEvent& event) {
      if (event.data != "[DONE]") std::cout << content_of(event.data, "delta") << std::flush;
    });
  }

  llmretry::CallOptions call_options;
  call_options.on_give_up = [](const llmretry::GiveUp& give_up) {
    std::cerr << "gave up after " << give_up.attempts << " attempt(s): " << to_string(give_up.reason) << " ("
              << describe(give_up.failure) << ")\n";
  };
  const auto on_retry = [](int attempt, const llmretry::Failure& failure, std::chrono::milliseconds wait) {
    std::cerr << "attempt " << attempt << " failed: " << describe(failure) << "; retrying in " << wait.count()
              << " ms\n";
  };

  std::cout << "Idempotency-Key for this call: " << call.idempotency_key() << "\n";
  try {
    const auto response = llmretry::call_with_retry(call, llmretry::RetryPolicy::interactive(), on_retry, call_options);
    if (stream) std::cout << "\n";
    else std::cout << content_of(response.body, "message") << "\n";
    const auto limits = llmretry::parse_rate_limits(response.headers, std::chrono::system_clock::now());
    if (limits.requests.remaining) std::cout << "requests remaining: " << *limits.requests.remaining << "\n";
    if (limits.tokens.remaining) std::cout << "tokens remaining: " << *limits.tokens.remaining << "\n";
    std::cout << "done in " << call.attempts() << " attempt(s)\n";
    return EXIT_SUCCESS;
  } catch (const llmretry::StreamInterrupted& error) {
    std::cerr << "\nthe answer broke after " << error.delivered_events() << " event(s): " << error.what() << "\n";
  } catch (const llmretry::ProviderError& error) {
    std::cerr << "failed: " << error.what() << "\n";
  }
  return EXIT_FAILURE;
}
