// The application of the README test, built by the README's FetchContent recipe: a call rate limited
// once, then answered.
#include <llmretry/llmretry.hpp>
#include <llmretry/testing.hpp>

#include <cstdio>

int main() {
  llmretry::testing::SimulatedProvider provider{"rate_limit:1"};
  llmretry::testing::FakeSleep sleep;
  const int answer =
      llmretry::call_with_retry([&] { return provider.call([] { return 42; }); }, llmretry::RetryPolicy{}, sleep);
  const bool ok = answer == 42 && provider.calls() == 2;
  std::printf("llmretry %d.%d.%d from the README's recipe: %d calls: %s\n", LLMRETRY_VERSION_MAJOR,
              LLMRETRY_VERSION_MINOR, LLMRETRY_VERSION_PATCH, provider.calls(), ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
