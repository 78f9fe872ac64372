// llmretry-loopback: the loopback provider as a program, rate-limited like OpenAI, so that a client (such
// as llmretry-batch) can be tried without an API key. Serves until interrupted (Ctrl-C, SIGTERM).

#include <llmretry/loopback/provider.hpp>

#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>

namespace {

constexpr const char* description =
    R"(Serves an OpenAI-compatible endpoint on 127.0.0.1 that enforces requests and tokens per minute
per second, as OpenAI does: x-ratelimit-* headers on every answer, a 429 rate_limit_exceeded with
retry-after-ms when over, and a chat completion with its usage otherwise. Prints the base URL, then serves
until interrupted, and prints how many requests it served and refused.)";

}  // namespace

int main(int argc, char** argv) {
  int port = 0;
  std::int64_t latency_ms = 20;
  llmretry::testing::LoopbackLimits limits;
  limits.requests_per_minute = 6000;
  limits.tokens_per_minute = 600'000;
  CLI::App app{description, "llmretry-loopback"};
  app.add_option("--port", port, "port on 127.0.0.1 (default 0: one the system chooses)")->check(CLI::Range(0, 65535));
  app.add_option("--rpm", limits.requests_per_minute, "requests per minute (default 6000)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1'000'000'000}));
  app.add_option("--tpm", limits.tokens_per_minute, "tokens per minute (default 600000)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1'000'000'000'000}));
  app.add_option("--latency", latency_ms, "milliseconds each answer takes (default 20)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{60'000}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& error) {
    std::cerr << "llmretry-loopback: " << error.what() << " (see --help)\n";
    return 2;
  }
  limits.latency = std::chrono::milliseconds{latency_ms};

  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);  // before the server's threads start: they inherit it
  try {
    llmretry::testing::LoopbackProvider provider(port);
    provider.enforce(limits);
    std::printf("%s/v1\n", provider.base_url().c_str());
    std::fflush(stdout);
    int signal = 0;
    sigwait(&stop_signals, &signal);
    std::printf("served %lld, refused %lld (429)\n", static_cast<long long>(provider.served()),
                static_cast<long long>(provider.refused()));
  } catch (const std::exception& error) {
    std::cerr << "llmretry-loopback: " << error.what() << '\n';
    return 1;
  }
  return 0;
}
