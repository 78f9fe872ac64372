// Code built without exceptions for its errors: the call returns llmretry::Result<T> (or any type with
// has_value() and error(), such as std::expected<T, llmretry::Failure>), and call_with_retry reads the
// failure from the value. Giving up returns the last result, and on_give_up says why.
#include <llmretry/llmretry.hpp>
#include <llmretry/testing.hpp>

#include <cstdio>
#include <random>
#include <string>

#include "command_line.hpp"

constexpr const char* usage = R"(usage: llmretry-example-02-result-style

Calls two SIMULATED providers in the result-value style (no exceptions): one overloaded twice, then
answering; one rejecting the prompt as too long. Exit status: 0 when both behave as shown, 2 for an option.
)";

int main(int argc, char** argv) {
  for (example::CommandLine args(argc, argv, "llmretry-example-02-result-style", usage); args.next();) args.reject();
  using namespace std::chrono;
  // A provider that is overloaded twice, then answers; and one that rejects the prompt as too long.
  llmretry::testing::SimulatedProvider busy{"overloaded", "rate_limit_ms:511"};
  llmretry::testing::SimulatedProvider strict{"context_length"};
  llmretry::testing::FakeSleep sleep;  // this example records its waits instead of sleeping
  std::mt19937_64 rng(1);

  llmretry::CallOptions options;
  options.on_give_up = [](const llmretry::GiveUp& info) {
    std::printf("  gave up: %s after %d attempt(s), last failure %s\n", llmretry::to_string(info.reason), info.attempts,
                llmretry::describe(info.failure).c_str());
  };
  const auto show = [](int attempt, const llmretry::Failure& failure, milliseconds wait) {
    std::printf("  attempt %d failed (%s); waiting %lld ms\n", attempt, llmretry::describe(failure).c_str(),
                static_cast<long long>(wait.count()));
  };

  std::printf("busy provider:\n");
  const llmretry::Result<std::string> answer =
      llmretry::call_with_retry([&] { return busy.try_call([] { return std::string("Your order ships tomorrow."); }); },
                                llmretry::RetryPolicy{}, sleep, rng, show, options);
  if (answer) std::printf("  answer after %d calls: %s\n", busy.calls(), answer->c_str());

  std::printf("prompt too long:\n");
  const auto rejected =
      llmretry::call_with_retry([&] { return strict.try_call([] { return std::string("unreachable"); }); },
                                llmretry::RetryPolicy{}, sleep, rng, show, options);
  if (!rejected) std::printf("  error: %s\n", rejected.error().message.c_str());

  return answer.has_value() && !rejected.has_value() && strict.calls() == 1 ? 0 : 1;
}
