// Must not compile: an engine made from temporary options, its policy validated now or later, would hold
// them dangling.
#include <llmretry/engine.hpp>

int main() {
  const llmretry::RetryPolicy policy;
  llmretry::CallEngine<llmretry::NoGuard, llmretry::CallOptions> engine(llmretry::detail::validate_later, policy,
                                                                        llmretry::NoGuard{}, llmretry::CallOptions{});
  return engine.attempts();
}
