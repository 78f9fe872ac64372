// Must not compile: an argument after the policy that is none of the kinds call_with_retry takes.
#include <llmretry/retry.hpp>

int main() {
  return llmretry::call_with_retry([] { return 0; }, llmretry::RetryPolicy{}, 42);
}
