// llmretry-loopback: the loopback provider as a program, rate-limited like OpenAI, so that a client (such
// as llmretry-batch) can be tried without an API key. Serves until interrupted (Ctrl-C, SIGTERM).

#include <llmretry/loopback/provider.hpp>

#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>

#include "common/command_line.hpp"
#include "common/program.hpp"

namespace {

constexpr const char* description =
    R"(Serves an OpenAI-compatible endpoint on 127.0.0.1 that enforces requests and tokens per minute
per second, as OpenAI does: x-ratelimit-* headers on every answer, a 429 rate_limit_exceeded with
retry-after-ms when over, and a chat completion with its usage otherwise (an Anthropic message on
/v1/messages), streamed as server-sent events when the request says "stream": true. Prints the base URL,
then serves until interrupted, and prints how many requests it served and refused.)";

/// Serves until SIGINT or SIGTERM. Returns the exit status.
int run(int argc, char** argv) {
  int port = 0;
  llmretry::testing::LoopbackLimits limits;
  limits.requests_per_minute = 6000;
  limits.tokens_per_minute = 600'000;
  CLI::App app{description, "llmretry-loopback"};
  app.add_option("--port", port, "port on 127.0.0.1 (default 0: one the system chooses)")->check(CLI::Range(0, 65535));
  app.add_option("--rpm", limits.requests_per_minute, "requests per minute (default 6000)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1'000'000'000}));
  app.add_option("--tpm", limits.tokens_per_minute, "tokens per minute (default 600000)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1'000'000'000'000}));
  limits.latency = std::chrono::milliseconds{20};
  limits.token_interval = std::chrono::milliseconds::zero();
  llmretry_tools::add_duration_option(app, "--latency", limits.latency, std::chrono::milliseconds::zero(),
                                      std::chrono::minutes{1}, "how long each answer takes (default 20ms, 0 to 1m)");
  llmretry_tools::add_duration_option(app, "--token-interval", limits.token_interval, std::chrono::milliseconds::zero(),
                                      std::chrono::minutes{1},
                                      "the wait before each content event of a streamed answer, one per completion "
                                      "token (default 0, at most 1m)");
  app.footer("Durations carry their unit (h, m, s, ms, us, ns): 20ms, 1s; 0 alone may go without.");
  llmretry_tools::parse_command_line(app, argc, argv);

  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);  // before the server's threads start: they inherit it
  llmretry::testing::LoopbackProvider provider(port);
  provider.enforce(limits);
  std::printf("%s/v1\n", provider.base_url().c_str());
  std::fflush(stdout);
  int signal = 0;
  sigwait(&stop_signals, &signal);
  std::printf("served %lld, refused %lld (429)\n", static_cast<long long>(provider.served()),
              static_cast<long long>(provider.refused()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  llmretry_tools::MainOptions statuses;
  statuses.usage_suffix = " (see --help)";
  return llmretry_tools::run_main(
      "llmretry-loopback", [&] { return run(argc, argv); }, statuses);
}
