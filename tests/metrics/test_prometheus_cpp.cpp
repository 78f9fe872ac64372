#include <llmretry/prometheus_cpp/families.hpp>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <llmretry/metrics/registry.hpp>

#include "exposition_grammar.hpp"
#include "llmretry_catch.hpp"

using namespace llmretry;
using llmretry::metrics::Queue;
using llmretry::metrics::Target;
using llmretry::prometheus_cpp::Families;
using namespace std::chrono_literals;
using seconds = std::chrono::duration<double>;

namespace {

const Target gpt{"openai", "gpt-5.5"};
const Target claude{"anthropic", "claude-sonnet-4.6"};
const Queue chat{"interactive", "chat"};
const Queue batch{"background", "embeddings"};

// What a scrape says, whatever its order and number format: each family's type and help, and each sample's
// value by its name and label set (labels sorted by name; an `le` bound written as metrics::format_value).
struct Scrape {
  std::map<std::string, std::string> types;
  std::map<std::string, std::string> helps;
  std::map<std::string, double> samples;
};

// Returns the value of a sample or a bucket bound ("1", "1.844674407370955e+19", "+Inf", "NaN").
double number(const std::string& text) { return std::strtod(text.c_str(), nullptr); }

// Reads `text` in the text exposition format 0.0.4 (label values stay escaped as written).
Scrape parse(const std::string& text) {
  Scrape scrape;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      const std::size_t space = line.find(' ', 7);
      auto& into = line[2] == 'H' ? scrape.helps : scrape.types;
      into[line.substr(7, space - 7)] = line.substr(space + 1);
      continue;
    }
    std::size_t at = line.find_first_of("{ ");
    const std::string name = line.substr(0, at);
    std::map<std::string, std::string> labels;
    if (line[at] == '{') {
      ++at;
      while (line[at] != '}') {
        const std::size_t equals = line.find('=', at);
        const std::string label = line.substr(at, equals - at);
        std::string value;
        std::size_t i = equals + 2;  // past ="
        for (; line[i] != '"'; ++i) {
          if (line[i] == '\\') value += line[i++];
          value += line[i];
        }
        if (label == "le") value = metrics::format_value(number(value));
        labels[label] = value;
        at = i + 1;
        if (line[at] == ',') ++at;
      }
      ++at;
    }
    std::string key = name + "{";
    for (const auto& [label, value] : labels) key += label + "=\"" + value + "\",";
    key += "}";
    INFO(line);
    CHECK(scrape.samples.count(key) == 0);
    scrape.samples[key] = number(line.substr(at + 1));
  }
  return scrape;
}

// Returns the text prometheus-cpp's TextSerializer writes for `registry`.
std::string serialized(const ::prometheus::Registry& registry) {
  return ::prometheus::TextSerializer().Serialize(registry.Collect());
}

// Returns whether two sample values are the same within a relative 1e-15 (prometheus-cpp writes 16
// significant digits).
bool same_value(double a, double b) { return std::fabs(a - b) <= 1e-15 * std::fabs(b); }

// Checks that the two scrapes have the same samples with the same values, and that each family of `actual`
// has the type and help text it has in `expected` (prometheus-cpp leaves out a family without series).
void check_same(const Scrape& expected, const Scrape& actual) {
  for (const auto& [name, type] : actual.types) {
    INFO(name);
    CHECK(expected.types.count(name) == 1);
    CHECK(expected.types.at(name) == type);
    CHECK(expected.helps.at(name) == actual.helps.at(name));
  }
  REQUIRE(actual.samples.size() == expected.samples.size());
  for (const auto& [key, value] : expected.samples) {
    INFO(key);
    const auto found = actual.samples.find(key);
    REQUIRE(found != actual.samples.end());
    CHECK(same_value(found->second, value));
  }
}

// Returns the two observers, to give both the same events.
std::array<metrics::Observer*, 2> both(metrics::Registry& registry, Families& families) {
  return {&registry, &families};
}

// Gives `observer` one of each event, several series of some.
void report_every_event(metrics::Observer& observer) {
  observer.request_finished(gpt, "success");
  observer.request_finished(gpt, "success");
  observer.request_finished(claude, "attempts_exhausted");
  observer.tokens_reserved(gpt, 150);
  observer.tokens_reserved(gpt, 150);
  observer.tokens_used(gpt, 120);
  observer.retried(gpt, Failure::of(FailureKind::rate_limited, Sent::refused), 1);
  observer.retried(claude, Failure::of(FailureKind::server_error, Sent::maybe_processed), 2);
  observer.hedged(gpt, 2);
  observer.hedge_won(gpt);
  observer.queue_entered(chat);
  observer.queue_entered(chat);
  observer.queue_entered(batch);
  observer.queue_left(chat, 250ms);
  observer.queue_left(batch, 3s);
  observer.rate_limited(gpt, LimitType::tokens);
  observer.rate_limited(claude, LimitType::unknown);
  observer.fell_back(gpt, claude, FallbackReason::provider_5xx);
  observer.duplicate_suppressed("chat");
}

}  // namespace

TEST_CASE("Families writes the series of Registry, through prometheus-cpp's serializer", "[metrics][prometheus_cpp]") {
  metrics::Registry expected;
  ::prometheus::Registry registry;
  Families families(registry);
  report_every_event(expected);
  report_every_event(families);

  const std::string text = serialized(registry);
  INFO(text);
  CHECK(exposition::first_error(text).empty());
  const Scrape actual = parse(text);
  const Scrape written = parse(expected.prometheus_text());
  check_same(written, actual);
  CHECK(actual.types == written.types);  // every family has a series here
  CHECK(actual.helps == written.helps);
  CHECK(actual.types.size() == 11);
  CHECK(actual.samples.at("llm_tokens_reserved_total{model=\"gpt-5.5\",provider=\"openai\",}") == 300);
  CHECK(actual.samples.at("llm_queue_wait_seconds_bucket{le=\"0.25\",priority=\"interactive\",task_type=\"chat\",}") ==
        1);
  CHECK(families.queue_wait_buckets() == metrics::Registry::default_queue_wait_buckets());
}

TEST_CASE("Families writes a family once it has a series", "[metrics][prometheus_cpp]") {
  ::prometheus::Registry registry;
  Families families(registry);
  CHECK(serialized(registry).empty());
  families.hedge_won(gpt);
  CHECK(parse(serialized(registry)).types == std::map<std::string, std::string>{{"llm_hedge_wins_total", "counter"}});
}

TEST_CASE("Families writes the label values Registry writes", "[metrics][prometheus_cpp]") {
  metrics::Registry expected;
  ::prometheus::Registry registry;
  Families families(registry);
  for (metrics::Observer* observer : both(expected, families)) {
    observer->tokens_used({"my \"proxy\"", "C:\\models\nv2"}, 7);
    observer->duplicate_suppressed("bad\xFF");
    observer->request_finished({"caf\xC3\xA9", "\xE2\x82"}, "success");
  }
  const std::string text = serialized(registry);
  INFO(text);
  CHECK(exposition::first_error(text).empty());
  check_same(parse(expected.prometheus_text()), parse(text));
  CHECK(text.find("task_type=\"bad\xEF\xBF\xBD\"") != std::string::npos);
}

TEST_CASE("Families's token counters stop where Registry's do", "[metrics][prometheus_cpp]") {
  constexpr std::uint64_t most = std::numeric_limits<std::uint64_t>::max();
  metrics::Registry expected;
  ::prometheus::Registry registry;
  Families families(registry);
  for (metrics::Observer* observer : both(expected, families)) {
    observer->tokens_reserved(gpt, most);
    observer->tokens_reserved(gpt, most);
    observer->tokens_used(gpt, most - 10);
    observer->tokens_used(gpt, 5);
    observer->tokens_used(gpt, 100);
    observer->tokens_used(claude, 1);
  }
  const Scrape actual = parse(serialized(registry));
  check_same(parse(expected.prometheus_text()), actual);
  CHECK(same_value(actual.samples.at("llm_tokens_reserved_total{model=\"gpt-5.5\",provider=\"openai\",}"),
                   static_cast<double>(most)));
  CHECK(actual.samples.at("llm_tokens_used_total{model=\"claude-sonnet-4.6\",provider=\"anthropic\",}") == 1);
}

TEST_CASE("Families places queue waits in Registry's buckets", "[metrics][prometheus_cpp]") {
  metrics::Registry expected({0.5, 1, 10});
  ::prometheus::Registry registry;
  Families families(registry, {0.5, 1, 10});
  CHECK(families.queue_wait_buckets() == std::vector<double>{0.5, 1, 10});
  for (metrics::Observer* observer : both(expected, families)) {
    for (const auto waited : {seconds(0.5), seconds(0.75), seconds(1), seconds(5), seconds(60), seconds(-2),
                              seconds(std::numeric_limits<double>::quiet_NaN())}) {
      observer->queue_entered(chat);
      observer->queue_left(chat, waited);
    }
  }
  const Scrape actual = parse(serialized(registry));
  check_same(parse(expected.prometheus_text()), actual);
  const std::string labels = "priority=\"interactive\",task_type=\"chat\",}";
  CHECK(actual.samples.at("llm_queue_wait_seconds_bucket{le=\"0.5\"," + labels) == 3);  // 0.5, and -2 and NaN as 0
  CHECK(actual.samples.at("llm_queue_wait_seconds_bucket{le=\"1\"," + labels) == 5);
  CHECK(actual.samples.at("llm_queue_wait_seconds_bucket{le=\"10\"," + labels) == 6);
  CHECK(actual.samples.at("llm_queue_wait_seconds_bucket{le=\"+Inf\"," + labels) == 7);
  CHECK(actual.samples.at("llm_queue_wait_seconds_sum{" + labels) == 67.25);
  CHECK(actual.samples.at("llm_queue_wait_seconds_count{" + labels) == 7);
}

TEST_CASE("Families's queue depth goes up and down", "[metrics][prometheus_cpp]") {
  metrics::Registry expected;
  ::prometheus::Registry registry;
  Families families(registry);
  const std::string key = "llm_queue_depth{priority=\"interactive\",task_type=\"chat\",}";
  for (metrics::Observer* observer : both(expected, families)) {
    observer->queue_entered(chat);
    observer->queue_entered(chat);
    observer->queue_entered(chat);
    observer->queue_left(chat, 1s);
  }
  CHECK(parse(serialized(registry)).samples.at(key) == 2);
  for (metrics::Observer* observer : both(expected, families)) {
    observer->queue_left(chat, 1s);
    observer->queue_left(chat, 1s);
  }
  const Scrape actual = parse(serialized(registry));
  check_same(parse(expected.prometheus_text()), actual);
  CHECK(actual.samples.at(key) == 0);
}

TEST_CASE("Families refuses bucket bounds as Registry does, registering nothing", "[metrics][prometheus_cpp]") {
  using llmretry_catch::contains;
  ::prometheus::Registry registry;
  CHECK_THROWS_WITH(Families(registry, {0.5, 0.5}),
                    contains("Families: queue_wait_buckets[1] is 0.5: bounds must increase (the one before is 0.5)"));
  CHECK_THROWS_WITH(Families(registry, {-1}), contains("queue_wait_buckets[0] is -1") && contains("never negative"));
  CHECK_THROWS_WITH(Families(registry, {1, std::numeric_limits<double>::infinity()}),
                    contains("queue_wait_buckets[1] is +Inf"));
  // Nothing was registered: the names are free for families of any type.
  CHECK_NOTHROW(::prometheus::BuildGauge().Name("llm_requests_total").Help("x").Register(registry));
}

TEST_CASE("Families throws when the registry refuses a name", "[metrics][prometheus_cpp]") {
  SECTION("a family of that name of another type") {
    ::prometheus::Registry registry;
    ::prometheus::BuildGauge().Name("llm_hedges_total").Help("mine").Register(registry);
    CHECK_THROWS_AS(Families(registry), std::invalid_argument);
  }
  SECTION("a registry that refuses any name twice") {
    ::prometheus::Registry registry(::prometheus::Registry::InsertBehavior::Throw);
    const Families first(registry);
    CHECK_THROWS_AS(Families(registry), std::invalid_argument);
  }
  SECTION("the application's own families stay beside them") {
    ::prometheus::Registry registry;
    auto& mine = ::prometheus::BuildCounter().Name("app_requests_total").Help("mine").Register(registry);
    Families families(registry);
    mine.Add({{"route", "/chat"}}).Increment();
    families.hedged(gpt, 1);
    const Scrape scrape = parse(serialized(registry));
    CHECK(scrape.samples.at("app_requests_total{route=\"/chat\",}") == 1);
    CHECK(scrape.samples.at("llm_hedges_total{model=\"gpt-5.5\",provider=\"openai\",}") == 1);
  }
}

TEST_CASE("Families counts exactly what many threads report while the registry is collected",
          "[metrics][prometheus_cpp]") {
  ::prometheus::Registry registry;
  Families families(registry);
  constexpr int threads = 4;
  constexpr int events = 2000;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      const Target mine{"openai", "model-" + std::to_string(t % 2)};
      for (int i = 0; i < events; ++i) {
        families.request_finished(mine, "success");
        families.tokens_used(mine, 3);
        families.queue_entered(chat);
        families.queue_left(chat, seconds(0.001 * i));
      }
    });
  }
  for (int i = 0; i < 20; ++i) CHECK(exposition::first_error(serialized(registry)).empty());
  for (auto& worker : workers) worker.join();
  const Scrape scrape = parse(serialized(registry));
  for (const char* model : {"model-0", "model-1"}) {
    const std::string labels = std::string("model=\"") + model + "\",provider=\"openai\",";
    CHECK(scrape.samples.at("llm_requests_total{" + labels + "status=\"success\",}") == events * threads / 2);
    CHECK(scrape.samples.at("llm_tokens_used_total{" + labels + "}") == 3.0 * events * threads / 2);
  }
  CHECK(scrape.samples.at("llm_queue_depth{priority=\"interactive\",task_type=\"chat\",}") == 0);
  CHECK(scrape.samples.at("llm_queue_wait_seconds_count{priority=\"interactive\",task_type=\"chat\",}") ==
        events * threads);
}
