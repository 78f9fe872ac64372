// What a user's program does with llmretry, whichever way the project brought it in: retry a call that is
// rate limited twice, and check that the headers are the version the build expects. With
// LLMRETRY_CONSUMER_CURL (the project linked llmretry::curl), it also prepares a request of the libcurl adapter;
// with LLMRETRY_CONSUMER_PROMETHEUS_CPP (llmretry::prometheus_cpp), it counts the call in a prometheus::Registry.
#include <llmretry/llmretry.hpp>
#include <llmretry/testing.hpp>
#ifdef LLMRETRY_CONSUMER_CURL
#include <llmretry/curl/curl.hpp>
#endif
#ifdef LLMRETRY_CONSUMER_PROMETHEUS_CPP
#include <llmretry/prometheus_cpp.hpp>

#include <prometheus/registry.h>
#endif

#include <cstdio>
#include <cstring>

#define LLMRETRY_CONSUMER_STRING(x) #x
#define LLMRETRY_CONSUMER_VERSION_STRING(major, minor, patch) \
  LLMRETRY_CONSUMER_STRING(major) "." LLMRETRY_CONSUMER_STRING(minor) "." LLMRETRY_CONSUMER_STRING(patch)
#define LLMRETRY_CONSUMER_HEADER_VERSION \
  LLMRETRY_CONSUMER_VERSION_STRING(LLMRETRY_VERSION_MAJOR, LLMRETRY_VERSION_MINOR, LLMRETRY_VERSION_PATCH)

int main() {
  if (std::strcmp(LLMRETRY_CONSUMER_EXPECTED_VERSION, LLMRETRY_CONSUMER_HEADER_VERSION) != 0) {
    std::printf("expected version %s, headers version %s\n", LLMRETRY_CONSUMER_EXPECTED_VERSION,
                LLMRETRY_CONSUMER_HEADER_VERSION);
    return 1;
  }
  llmretry::testing::SimulatedProvider provider{"rate_limit:1", "rate_limit_ms:511"};
  llmretry::testing::FakeSleep sleep;
  llmretry::RetryPolicy policy;
  policy.jitter = llmretry::Jitter::none;
  const int answer = llmretry::call_with_retry([&] { return provider.call([] { return 42; }); }, policy, sleep);
  bool ok = answer == 42 && provider.calls() == 3 && sleep.total() == std::chrono::milliseconds{2000};
#ifdef LLMRETRY_CONSUMER_CURL
  llmretry::curl::Request request;
  request.url = "http://127.0.0.1/v1/chat/completions";
  llmretry::curl::Options options;
  options.connect_timeout = std::chrono::milliseconds{500};
  ok = ok && request.method == "POST" && options.timeout > options.connect_timeout;
  std::printf("llmretry::curl: %s %s\n", request.method.c_str(), request.url.c_str());
#endif
#ifdef LLMRETRY_CONSUMER_PROMETHEUS_CPP
  prometheus::Registry registry;
  llmretry::prometheus_cpp::Families families(registry);
  families.request_finished({"openai", "gpt-5.5"}, "success");
  const std::size_t collected = registry.Collect().size();
  ok = ok && collected == 1;
  std::printf("llmretry::prometheus_cpp: %zu family collected\n", collected);
#endif
  std::printf("llmretry %s: %d calls, %lld ms waited: %s\n", LLMRETRY_CONSUMER_HEADER_VERSION, provider.calls(),
              static_cast<long long>(sleep.total().count()), ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
