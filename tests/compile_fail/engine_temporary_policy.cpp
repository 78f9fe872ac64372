// Must not compile: an engine made from a temporary policy, validated now or later, would hold it dangling.
#include <llmretry/engine.hpp>

int main() {
  const llmretry::CallOptions options;
  llmretry::CallEngine<llmretry::NoGuard, llmretry::CallOptions> engine(
      llmretry::detail::validate_later, llmretry::RetryPolicy::interactive(), llmretry::NoGuard{}, options);
  return engine.attempts();
}
