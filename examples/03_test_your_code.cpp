// How to test YOUR code that uses llmretry: script the provider's failures, record the waits instead of
// sleeping, and move a manual clock for deadlines. Everything runs instantly and gives the same answer
// every time. (A real test would use your test framework; this program checks with plain ifs.)
#include <llmretry/llmretry.hpp>
#include <llmretry/testing.hpp>

#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "command_line.hpp"

namespace app {
// The application's function under test: summarise a ticket, retrying the model call. It takes the
// sleep and the clock so that tests can inject theirs; production passes the defaults.
template <class Provider, class Sleep>
std::string summarise(Provider& provider, Sleep& sleep, const llmretry::CallOptions& options = {}) {
  llmretry::RetryPolicy policy = llmretry::RetryPolicy::interactive();
  policy.jitter = llmretry::Jitter::none;  // exact waits in this demonstration
  return llmretry::call_with_retry([&] { return provider.call([] { return std::string("summary"); }); }, policy, sleep,
                                   options);
}
}  // namespace app

constexpr const char* usage = R"(usage: llmretry-example-03-test-your-code

Tests an application function that uses llmretry, with a scripted provider, a recording sleep and a
manual clock; prints one line per check. Exit status: 0 when every check passes, 1 when one fails, 2 for
an option.
)";

int main(int argc, char** argv) {
  for (example::CommandLine args(argc, argv, "llmretry-example-03-test-your-code", usage); args.next();) args.reject();
  using namespace std::chrono_literals;
  using llmretry::testing::FakeSleep;
  using llmretry::testing::ManualClock;
  using llmretry::testing::SimulatedProvider;
  int failed = 0;
  const auto check = [&](bool ok, const char* what) {
    std::printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    failed += ok ? 0 : 1;
  };

  {  // Two rate limits, then an answer: the waits are exactly the policy's.
    SimulatedProvider provider{"rate_limit", "rate_limit"};
    FakeSleep sleep;
    check(app::summarise(provider, sleep) == "summary", "answers after two 429s");
    check(sleep.waits() == std::vector<std::chrono::milliseconds>{500ms, 1s}, "waits 0.5 s then 1 s");
  }
  {  // A bad request is not retried.
    SimulatedProvider provider{"status:400"};
    FakeSleep sleep;
    bool threw = false;
    try {
      app::summarise(provider, sleep);
    } catch (const llmretry::ProviderError& error) {
      threw = error.status() == 400;
    }
    check(threw && provider.calls() == 1, "a 400 surfaces at once");
  }
  {  // A deadline, with a clock that the fake sleep moves.
    ManualClock clock;
    FakeSleep sleep{clock};
    llmretry::CallOptions options;
    options.clock = std::ref(clock);
    options.deadline = clock.now() + 1s;
    SimulatedProvider provider{"server_error*5"};
    bool threw = false;
    try {
      app::summarise(provider, sleep, options);
    } catch (const llmretry::ProviderError&) {
      threw = true;
    }
    check(threw && sleep.total() == 500ms, "the deadline stops before the 1 s wait");
  }
  return failed == 0 ? 0 : 1;
}
