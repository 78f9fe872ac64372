// The microbenchmark program: Google Benchmark's console output, then each llmretry figure against its
// reference as a ratio. Counts allocations by replacing the global operator new.
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <new>
#include <string>
#include <vector>

#include "allocations.hpp"

namespace {

std::atomic<std::uint64_t> allocation_count{0};

// Keeps each benchmark's CPU time per iteration (ns) for the ratios: the median when repeated.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& run : runs) {
      const bool single = run.run_type == Run::RT_Iteration && run.repetitions <= 1;
      const bool median = run.run_type == Run::RT_Aggregate && run.aggregate_name == "median";
      if (!run.error_occurred && (single || median)) ns_[run.run_name.str()] = run.GetAdjustedCPUTime();
    }
    ConsoleReporter::ReportRuns(runs);
  }

  // Prints `subject` against `reference`: both times, the difference and the ratio.
  void compare(const std::string& subject, const std::string& reference) const {
    const auto s = ns_.find(subject);
    const auto r = ns_.find(reference);
    if (s == ns_.end() || r == ns_.end()) return;
    std::printf("%-44s %8.2f ns  vs %-36s %8.2f ns: %+7.2f ns, ratio %.2f\n", subject.c_str(), s->second,
                reference.c_str(), r->second, s->second - r->second, s->second / r->second);
  }

 private:
  std::map<std::string, double> ns_;
};

}  // namespace

void* operator new(std::size_t size) {
  allocation_count.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc{};
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

std::uint64_t llmretry_bench::allocations() noexcept { return allocation_count.load(std::memory_order_relaxed); }

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::printf("\nAgainst the reference (CPU time per call, the median when repeated):\n");
  reporter.compare("call_with_retry/throwing_call", "direct_call/throwing_call");
  reporter.compare("call_with_retry/result_call", "direct_call/result_call");
  reporter.compare("call_with_retry/default_policy", "direct_call/throwing_call");
  reporter.compare("call_with_retry/deployment_pace", "direct_call/throwing_call");
  reporter.compare("call_with_retry/deployment_pace", "call_with_retry/throwing_call");
  reporter.compare("rate_limiter/reserve_settle", "mutex_bucket/acquire");
  reporter.compare("rate_limiter/reserve", "mutex_bucket/acquire");
  reporter.compare("rate_limiter/reserve_settle", "mutex_bucket/acquire_settle");
  for (const char* threads : {"2", "8"}) {
    const std::string suffix = std::string("/contended/threads:") + threads;
    reporter.compare("rate_limiter/reserve_settle" + suffix, "mutex_bucket/acquire" + suffix);
    reporter.compare("rate_limiter/reserve_settle" + suffix, "mutex_bucket/acquire_settle" + suffix);
  }
  reporter.compare("call_with_retry/budget_breaker_pacing", "direct_call/throwing_call");
  reporter.compare("call_with_retry/observe", "call_with_retry/throwing_call");
  reporter.compare("strptime_timegm/imf_fixdate", "parse_retry_after/imf_fixdate");
  reporter.compare("strptime_timegm/rfc850", "parse_retry_after/rfc850");
  reporter.compare("strptime_timegm/asctime", "parse_retry_after/asctime");
  reporter.compare("strtod/delay_seconds", "parse_retry_after/delay_seconds");
  benchmark::Shutdown();
  return 0;
}
