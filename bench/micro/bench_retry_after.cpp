// Reading the wait a provider asks for: delay-seconds, retry-after-ms and the three HTTP date formats,
// against the C library on the same strings (strtod for seconds, strptime + timegm for dates).
#include <benchmark/benchmark.h>
#include <time.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <string_view>

#include <llmretry/http/headers.hpp>

namespace {

using std::chrono::system_clock;

// 2026-11-29 00:00:00 UTC, before every date below.
const system_clock::time_point now{std::chrono::seconds{1'795'910'400}};

constexpr const char* imf_fixdate = "Fri, 09 Oct 2026 02:21:39 GMT";
constexpr const char* rfc850 = "Friday, 09-Oct-26 02:21:39 GMT";
constexpr const char* asctime_date = "Fri Oct  9 02:21:39 2026";

void parse(benchmark::State& state, const char* value) {
  std::string_view text{value};
  for (auto _ : state) {
    benchmark::DoNotOptimize(text);
    benchmark::DoNotOptimize(llmretry::parse_retry_after(text, now));
  }
}

void retry_after_ms(benchmark::State& state) {
  std::string_view value{"511"};
  const auto lookup = [&](std::string_view name) { return name == "retry-after-ms" ? value : std::string_view{}; };
  for (auto _ : state) {
    benchmark::DoNotOptimize(value);
    benchmark::DoNotOptimize(llmretry::requested_wait(lookup, now));
  }
}

void c_strtod(benchmark::State& state) {
  const std::string value{"30"};
  for (auto _ : state) {
    char* end = nullptr;
    benchmark::DoNotOptimize(std::strtod(value.c_str(), &end));
    benchmark::DoNotOptimize(end);
  }
}

void c_strptime_timegm(benchmark::State& state, const char* value, const char* format) {
  const std::string text{value};
  for (auto _ : state) {
    std::tm tm{};
    benchmark::DoNotOptimize(strptime(text.c_str(), format, &tm));
    benchmark::DoNotOptimize(timegm(&tm));
  }
}

}  // namespace

BENCHMARK_CAPTURE(parse, delay_seconds, "30")->Name("parse_retry_after/delay_seconds");
BENCHMARK(retry_after_ms)->Name("retry_after/retry_after_ms");
BENCHMARK_CAPTURE(parse, imf_fixdate, imf_fixdate)->Name("parse_retry_after/imf_fixdate");
BENCHMARK_CAPTURE(parse, rfc850, rfc850)->Name("parse_retry_after/rfc850");
BENCHMARK_CAPTURE(parse, asctime, asctime_date)->Name("parse_retry_after/asctime");
BENCHMARK(c_strtod)->Name("strtod/delay_seconds");
BENCHMARK_CAPTURE(c_strptime_timegm, imf_fixdate, imf_fixdate, "%a, %d %b %Y %H:%M:%S GMT")
    ->Name("strptime_timegm/imf_fixdate");
BENCHMARK_CAPTURE(c_strptime_timegm, rfc850, rfc850, "%A, %d-%b-%y %H:%M:%S GMT")->Name("strptime_timegm/rfc850");
BENCHMARK_CAPTURE(c_strptime_timegm, asctime, asctime_date, "%a %b %e %H:%M:%S %Y")->Name("strptime_timegm/asctime");
