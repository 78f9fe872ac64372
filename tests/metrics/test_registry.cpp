#include <llmretry/metrics/registry.hpp>

#include <chrono>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "exposition_grammar.hpp"
#include "llmretry_catch.hpp"

using namespace llmretry;
using namespace llmretry::metrics;
using namespace std::chrono_literals;
using seconds = std::chrono::duration<double>;

namespace {

const Target gpt{"openai", "gpt-5.5"};
const Target claude{"anthropic", "claude-sonnet-4.6"};
const Queue chat{"interactive", "chat"};

// Returns the lines of `text` that start with `prefix`, joined.
std::string lines_starting(const std::string& text, const std::string& prefix) {
  std::string found;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    const std::string line = text.substr(start, end - start);
    if (line.rfind(prefix, 0) == 0) found += line + "\n";
    start = end + 1;
  }
  return found;
}

}  // namespace

TEST_CASE("Registry writes a known sequence of events exactly", "[metrics][registry]") {
  Registry registry({0.5, 1});
  registry.request_finished(gpt, "success");
  registry.request_finished(claude, "attempts_exhausted");
  registry.request_finished(gpt, "success");
  registry.tokens_reserved(gpt, 150);
  registry.tokens_reserved(gpt, 150);
  registry.tokens_used(gpt, 120);
  registry.retried(gpt, Failure::of(FailureKind::rate_limited, Sent::refused), 1);
  registry.hedged(gpt, 2);
  registry.hedged(gpt, 1);
  registry.hedge_won(gpt);
  registry.queue_entered(chat);
  registry.queue_entered(chat);
  registry.queue_left(chat, 250ms);
  registry.rate_limited(gpt, LimitType::tokens);
  registry.fell_back(gpt, claude, FallbackReason::provider_5xx);
  registry.duplicate_suppressed("chat");

  const std::string text = registry.prometheus_text();
  CHECK(text ==
        "# HELP llm_requests_total Requests that ended, by status: success, or why they stopped.\n"
        "# TYPE llm_requests_total counter\n"
        "llm_requests_total{provider=\"anthropic\",model=\"claude-sonnet-4.6\",status=\"attempts_exhausted\"} 1\n"
        "llm_requests_total{provider=\"openai\",model=\"gpt-5.5\",status=\"success\"} 2\n"
        "# HELP llm_tokens_reserved_total Tokens reserved (estimated) for the attempts sent.\n"
        "# TYPE llm_tokens_reserved_total counter\n"
        "llm_tokens_reserved_total{provider=\"openai\",model=\"gpt-5.5\"} 300\n"
        "# HELP llm_tokens_used_total Tokens the successful answers reported as used.\n"
        "# TYPE llm_tokens_used_total counter\n"
        "llm_tokens_used_total{provider=\"openai\",model=\"gpt-5.5\"} 120\n"
        "# HELP llm_retries_total Attempts sent again, by the error of the attempt before.\n"
        "# TYPE llm_retries_total counter\n"
        "llm_retries_total{provider=\"openai\",model=\"gpt-5.5\",error_type=\"rate_limited\"} 1\n"
        "# HELP llm_hedges_total Hedges sent: second requests of attempts still in flight.\n"
        "# TYPE llm_hedges_total counter\n"
        "llm_hedges_total{provider=\"openai\",model=\"gpt-5.5\"} 2\n"
        "# HELP llm_hedge_wins_total Hedges whose answer came first.\n"
        "# TYPE llm_hedge_wins_total counter\n"
        "llm_hedge_wins_total{provider=\"openai\",model=\"gpt-5.5\"} 1\n"
        "# HELP llm_queue_depth Requests waiting in a queue.\n"
        "# TYPE llm_queue_depth gauge\n"
        "llm_queue_depth{priority=\"interactive\",task_type=\"chat\"} 1\n"
        "# HELP llm_queue_wait_seconds Time requests waited in a queue before leaving it.\n"
        "# TYPE llm_queue_wait_seconds histogram\n"
        "llm_queue_wait_seconds_bucket{priority=\"interactive\",task_type=\"chat\",le=\"0.5\"} 1\n"
        "llm_queue_wait_seconds_bucket{priority=\"interactive\",task_type=\"chat\",le=\"1\"} 1\n"
        "llm_queue_wait_seconds_bucket{priority=\"interactive\",task_type=\"chat\",le=\"+Inf\"} 1\n"
        "llm_queue_wait_seconds_sum{priority=\"interactive\",task_type=\"chat\"} 0.25\n"
        "llm_queue_wait_seconds_count{priority=\"interactive\",task_type=\"chat\"} 1\n"
        "# HELP llm_rate_limit_hits_total Rate limits that requests ran into, by the limit.\n"
        "# TYPE llm_rate_limit_hits_total counter\n"
        "llm_rate_limit_hits_total{provider=\"openai\",model=\"gpt-5.5\",limit_type=\"tokens\"} 1\n"
        "# HELP llm_fallbacks_total Calls moved from one provider to another, by reason.\n"
        "# TYPE llm_fallbacks_total counter\n"
        "llm_fallbacks_total{from_provider=\"openai\",to_provider=\"anthropic\",reason=\"provider_5xx\"} 1\n"
        "# HELP llm_duplicate_suppressed_total Duplicate requests answered from a stored result or refused instead "
        "of being sent again.\n"
        "# TYPE llm_duplicate_suppressed_total counter\n"
        "llm_duplicate_suppressed_total{task_type=\"chat\"} 1\n");
  CHECK(exposition::first_error(text).empty());
}

TEST_CASE("Registry without events still declares every family", "[metrics][registry]") {
  const Registry registry;
  const std::string text = registry.prometheus_text();
  CHECK(exposition::first_error(text).empty());
  CHECK(lines_starting(text, "# TYPE") ==
        "# TYPE llm_requests_total counter\n"
        "# TYPE llm_tokens_reserved_total counter\n"
        "# TYPE llm_tokens_used_total counter\n"
        "# TYPE llm_retries_total counter\n"
        "# TYPE llm_hedges_total counter\n"
        "# TYPE llm_hedge_wins_total counter\n"
        "# TYPE llm_queue_depth gauge\n"
        "# TYPE llm_queue_wait_seconds histogram\n"
        "# TYPE llm_rate_limit_hits_total counter\n"
        "# TYPE llm_fallbacks_total counter\n"
        "# TYPE llm_duplicate_suppressed_total counter\n");
  CHECK(lines_starting(text, "llm_").empty());
}

TEST_CASE("Registry orders series by their label values", "[metrics][registry]") {
  Registry registry;
  registry.request_finished({"openai", "gpt-5.5"}, "success");
  registry.request_finished({"openai", "gpt-5.5"}, "deadline");
  registry.request_finished({"openai", "gpt-4o"}, "success");
  registry.request_finished({"anthropic", "z"}, "success");
  CHECK(lines_starting(registry.prometheus_text(), "llm_requests_total") ==
        "llm_requests_total{provider=\"anthropic\",model=\"z\",status=\"success\"} 1\n"
        "llm_requests_total{provider=\"openai\",model=\"gpt-4o\",status=\"success\"} 1\n"
        "llm_requests_total{provider=\"openai\",model=\"gpt-5.5\",status=\"deadline\"} 1\n"
        "llm_requests_total{provider=\"openai\",model=\"gpt-5.5\",status=\"success\"} 1\n");
}

TEST_CASE("Registry escapes label values", "[metrics][registry]") {
  Registry registry;
  registry.tokens_used({"my \"proxy\"", "C:\\models\nv2"}, 7);
  registry.duplicate_suppressed("bad\xFF");
  const std::string text = registry.prometheus_text();
  CHECK(lines_starting(text, "llm_tokens_used_total") ==
        "llm_tokens_used_total{provider=\"my \\\"proxy\\\"\",model=\"C:\\\\models\\nv2\"} 7\n");
  CHECK(lines_starting(text, "llm_duplicate_suppressed_total") ==
        "llm_duplicate_suppressed_total{task_type=\"bad\xEF\xBF\xBD\"} 1\n");
  CHECK(exposition::first_error(text).empty());
}

TEST_CASE("Registry places queue waits in cumulative buckets", "[metrics][registry]") {
  Registry registry({1, 2});
  for (const double wait : {0.5, 1.0, 1.5, 3.0, -1.0, std::numeric_limits<double>::quiet_NaN()})
    registry.queue_left(chat, seconds(wait));
  const std::string text = registry.prometheus_text();
  CHECK(lines_starting(text, "llm_queue_wait_seconds") ==
        "llm_queue_wait_seconds_bucket{priority=\"interactive\",task_type=\"chat\",le=\"1\"} 4\n"
        "llm_queue_wait_seconds_bucket{priority=\"interactive\",task_type=\"chat\",le=\"2\"} 5\n"
        "llm_queue_wait_seconds_bucket{priority=\"interactive\",task_type=\"chat\",le=\"+Inf\"} 6\n"
        "llm_queue_wait_seconds_sum{priority=\"interactive\",task_type=\"chat\"} 6\n"
        "llm_queue_wait_seconds_count{priority=\"interactive\",task_type=\"chat\"} 6\n");
  SECTION("the depth goes up on entering and down on leaving, below zero if told so") {
    CHECK(lines_starting(text, "llm_queue_depth{") ==
          "llm_queue_depth{priority=\"interactive\",task_type=\"chat\"} -6\n");
  }
  SECTION("no bound: only +Inf") {
    Registry only_inf(std::vector<double>{});
    only_inf.queue_left(chat, 3s);
    CHECK(lines_starting(only_inf.prometheus_text(), "llm_queue_wait_seconds_bucket") ==
          "llm_queue_wait_seconds_bucket{priority=\"interactive\",task_type=\"chat\",le=\"+Inf\"} 1\n");
  }
}

TEST_CASE("Registry's default buckets go from 10 ms to 2 minutes", "[metrics][registry]") {
  const Registry registry;
  CHECK(registry.queue_wait_buckets() == Registry::default_queue_wait_buckets());
  CHECK(registry.queue_wait_buckets().front() == 0.01);
  CHECK(registry.queue_wait_buckets().back() == 120);
}

TEST_CASE("Registry refuses bucket bounds that make no sense, naming them", "[metrics][registry]") {
  using llmretry_catch::contains;
  const double inf = std::numeric_limits<double>::infinity();
  CHECK_THROWS_WITH(Registry({1, inf}), contains("queue_wait_buckets[1] is +Inf") && contains("+Inf is always added"));
  CHECK_THROWS_WITH(Registry({std::numeric_limits<double>::quiet_NaN()}),
                    contains("queue_wait_buckets[0] is NaN") && contains("finite"));
  CHECK_THROWS_WITH(Registry({-0.5, 1}), contains("queue_wait_buckets[0] is -0.5") && contains("never negative"));
  CHECK_THROWS_WITH(Registry({1, 2, 2}), contains("queue_wait_buckets[2] is 2") && contains("the one before is 2"));
  CHECK_THROWS_AS(Registry({2, 1}), std::invalid_argument);
}

TEST_CASE("Registry's token counters stop at the largest value instead of wrapping", "[metrics][registry]") {
  Registry registry;
  registry.tokens_reserved(gpt, std::numeric_limits<std::uint64_t>::max() - 1);
  registry.tokens_reserved(gpt, 5);
  CHECK(lines_starting(registry.prometheus_text(), "llm_tokens_reserved_total") ==
        "llm_tokens_reserved_total{provider=\"openai\",model=\"gpt-5.5\"} 18446744073709551615\n");
}

TEST_CASE("Registry counts exactly what many threads report at once", "[metrics][registry]") {
  Registry registry({0.5});
  constexpr int threads = 8;
  constexpr int events = 2000;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&registry, t] {
      const Target target{"openai", t % 2 == 0 ? "even" : "odd"};
      for (int i = 0; i < events; ++i) {
        registry.request_finished(target, "success");
        registry.tokens_used(target, 3);
        registry.queue_entered(chat);
        registry.queue_left(chat, 100ms);
        if (i % 10 == 0) (void)registry.prometheus_text();
      }
    });
  }
  for (auto& worker : workers) worker.join();
  const std::string text = registry.prometheus_text();
  CHECK(lines_starting(text, "llm_requests_total") ==
        "llm_requests_total{provider=\"openai\",model=\"even\",status=\"success\"} 8000\n"
        "llm_requests_total{provider=\"openai\",model=\"odd\",status=\"success\"} 8000\n");
  CHECK(lines_starting(text, "llm_tokens_used_total") ==
        "llm_tokens_used_total{provider=\"openai\",model=\"even\"} 24000\n"
        "llm_tokens_used_total{provider=\"openai\",model=\"odd\"} 24000\n");
  CHECK(lines_starting(text, "llm_queue_depth{") == "llm_queue_depth{priority=\"interactive\",task_type=\"chat\"} 0\n");
  CHECK(lines_starting(text, "llm_queue_wait_seconds_count") ==
        "llm_queue_wait_seconds_count{priority=\"interactive\",task_type=\"chat\"} 16000\n");
}
