// Watch the retry policy work: the provider is SIMULATED, it fails on purpose, then answers.
//
//   llmretry-example-01-try-retry                 # rate_limit, timeout, server_error, then success
//   llmretry-example-01-try-retry --no-jitter     # waits exactly 0.5, 1, 2 s
//   llmretry-example-01-try-retry --script rate_limit:0.511
//   llmretry-example-01-try-retry --script rate_limit:30  # more than the cap: stop at once
#include <llmretry/llmretry.hpp>
#include <llmretry/testing.hpp>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "command_line.hpp"

namespace {
constexpr const char* usage = R"(usage: llmretry-example-01-try-retry [options]

Calls a SIMULATED provider that fails on purpose, then answers, and prints each attempt and wait.

  --script ITEM[,ITEM...]  the provider's failures, in order (default rate_limit,timeout,server_error);
                           items: ok, rate_limit[:SECONDS], rate_limit_ms:MS, timeout, connect_timeout,
                           connection_refused, connection_reset, server_error, overloaded, quota_exhausted,
                           context_length, content_filter, status:NNN[:SECONDS], each optionally *N
  --no-jitter              wait the exact backoff (0.5, 1, 2 s...) instead of a random part of it
  --seed N                 seed of the jitter draws (default 8)
  --fake-sleep             record the waits instead of sleeping (the total is then the sum of the waits)
  --help                   this text

Options take their value as --option VALUE or --option=VALUE. Exit status: 0 when the call succeeds,
1 when it gives up, 2 for a bad option.
)";

struct Options {
  std::vector<std::string> script{"rate_limit", "timeout", "server_error"};
  bool jitter = true;
  bool fake_sleep = false;
  std::uint64_t seed = 8;
};

std::vector<std::string> split(std::string_view text) {
  std::vector<std::string> items;
  for (std::size_t start = 0;;) {
    const auto comma = text.find(',', start);
    items.emplace_back(text.substr(start, comma - start));
    if (comma == std::string_view::npos) return items;
    start = comma + 1;
  }
}

Options parse(int argc, char** argv) {
  Options options;
  for (example::CommandLine args(argc, argv, "llmretry-example-01-try-retry", usage); args.next();) {
    if (args.is("--script")) options.script = split(args.value());
    else if (args.is_flag("--no-jitter")) options.jitter = false;
    else if (args.is_flag("--fake-sleep")) options.fake_sleep = true;
    else if (args.is("--seed")) options.seed = args.number();
    else args.reject();
  }
  return options;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace std::chrono;
  const Options options = parse(argc, argv);
  try {
    llmretry::testing::SimulatedProvider provider{options.script};
    llmretry::RetryPolicy policy;
    policy.jitter = options.jitter ? llmretry::Jitter::full : llmretry::Jitter::none;
    std::mt19937_64 rng(options.seed);  // fixed draws, so every run shows the same waits
    llmretry::testing::FakeSleep recorded;
    const auto sleep = [&](milliseconds wait) {
      if (options.fake_sleep) recorded(wait);
      else std::this_thread::sleep_for(wait);
    };
    const auto show = [](int attempt, const llmretry::Failure& failure, milliseconds wait) {
      std::printf("attempt %d: %s Wait %.2f s.\n", attempt,
                  llmretry::testing::SimulatedProvider::message(failure).c_str(), duration<double>(wait).count());
    };
    llmretry::CallOptions call_options;
    call_options.on_give_up = [](const llmretry::GiveUp& info) {
      std::printf("attempt %d: gave up (%s) after %.2f s of waiting.\n", info.attempts,
                  llmretry::to_string(info.reason), duration<double>(info.waited).count());
    };

    const auto start = steady_clock::now();
    const auto finish_reason = llmretry::call_with_retry(
        [&] { return provider.call([] { return std::string("stop"); }); }, policy, sleep, rng, show, call_options);
    const auto total = options.fake_sleep ? duration<double>(recorded.total()).count()
                                          : duration<double>(steady_clock::now() - start).count();
    std::printf("attempt %d: finish_reason %s, %.1f s in total\n", provider.calls(), finish_reason.c_str(), total);
    return 0;
  } catch (const llmretry::ProviderError& error) {
    std::fprintf(stderr, "llmretry::ProviderError: %s\n", error.what());
  } catch (const std::invalid_argument& error) {  // a malformed --script item
    std::fprintf(stderr, "llmretry-example-01-try-retry: --script: %s\n", error.what());
    return 2;
  }
  return 1;
}
