// Watch the retry policy work: the provider is SIMULATED, it fails on purpose, then answers.
//
//   try_retry                       # rate_limit, timeout, server_error, then success; full jitter, seed 8
//   try_retry --no-jitter           # waits exactly 0.5, 1, 2 s
//   try_retry --script rate_limit:0.511
//   try_retry --script rate_limit:30  # the provider asks for more than the cap: stop at once
//
// Options: --script ITEM[,ITEM...] (see llmretry::testing::parse_script_item), --no-jitter, --seed N,
// --fake-sleep (record the waits instead of sleeping; the total is then the sum of the waits).
#include <llmretry/llmretry.hpp>
#include <llmretry/testing.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace {
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

[[noreturn]] void usage(const char* problem) {
  std::fprintf(stderr, "try_retry: %s\nusage: try_retry [--script ITEM,...] [--no-jitter] [--seed N] [--fake-sleep]\n",
               problem);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const auto value = [&] {
      if (i + 1 >= argc) usage("an option is missing its value");
      return std::string_view(argv[++i]);
    };
    if (arg == "--script") options.script = split(value());
    else if (arg == "--no-jitter") options.jitter = false;
    else if (arg == "--fake-sleep") options.fake_sleep = true;
    else if (arg == "--seed") {
      const std::string text(value());
      char* end = nullptr;
      options.seed = std::strtoull(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0') usage("--seed takes a whole number");
    } else usage("unknown option");
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
  } catch (const std::invalid_argument& error) {
    std::fprintf(stderr, "try_retry: %s\n", error.what());
  }
  return 1;
}
