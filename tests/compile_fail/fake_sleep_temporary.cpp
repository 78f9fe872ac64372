// Must not compile: a FakeSleep passed as a temporary would lose the waits it records.
#include <llmretry/retry.hpp>
#include <llmretry/testing/fake_sleep.hpp>

int main() {
  return llmretry::call_with_retry([] { return 0; }, llmretry::RetryPolicy{}, llmretry::testing::FakeSleep{});
}
