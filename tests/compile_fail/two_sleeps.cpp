// Must not compile: two arguments of the same kind (two sleeps) after the policy.
#include <llmretry/retry.hpp>

int main() {
  llmretry::RealSleep first, second;
  return llmretry::call_with_retry([] { return 0; }, llmretry::RetryPolicy{}, first, second);
}
