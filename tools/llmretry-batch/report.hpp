// What llmretry-batch counts while it runs, its progress line and its summary.
#ifndef LLMRETRY_BATCH_REPORT_HPP
#define LLMRETRY_BATCH_REPORT_HPP

#include <llmretry/admission/deployment.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace batch {

/// The counters of one run, shared by the workers. Thread-safe.
class Stats {
 public:
  std::atomic<std::int64_t> answered{0};           ///< lines written to the output file
  std::atomic<std::int64_t> failed{0};             ///< lines written to the errors file
  std::atomic<std::int64_t> requests{0};           ///< requests sent
  std::atomic<std::int64_t> rate_limited{0};       ///< requests answered 429
  std::atomic<std::int64_t> tokens_reserved{0};    ///< the estimates of the requests sent
  std::atomic<std::int64_t> tokens_used{0};        ///< the usage the answers reported
  std::atomic<std::int64_t> resumed_in_flight{0};  ///< lines an earlier run left in flight, sent again
  std::atomic<std::int64_t> reclaimed{0};          ///< jobs an earlier run held when it stopped, ready at once
  std::atomic<std::int64_t> leases_lost{0};        ///< jobs taken by another worker while this one held them

  /// Counts a retry after a failure of kind `kind`.
  void retried(const char* kind) { add(retries_, kind); }
  /// Counts a line given up for `reason`.
  void gave_up(const char* reason) { add(stops_, reason); }
  /// Returns "kind N, kind N" of the retries, or "none".
  std::string retries() const { return list(retries_); }
  /// Returns "reason N, ..." of the lines given up, or "none".
  std::string stops() const { return list(stops_); }

 private:
  void add(std::map<std::string, std::int64_t>& counts, const char* name) {
    const std::lock_guard<std::mutex> lock(mutex_);
    ++counts[name];
  }
  std::string list(const std::map<std::string, std::int64_t>& counts) const {
    const std::lock_guard<std::mutex> lock(mutex_);
    std::string text;
    for (const auto& [name, count] : counts) text += (text.empty() ? "" : ", ") + name + " " + std::to_string(count);
    return text.empty() ? "none" : text;
  }

  mutable std::mutex mutex_;
  std::map<std::string, std::int64_t> retries_;
  std::map<std::string, std::int64_t> stops_;
};

/// Returns `count` divided by `seconds` (0 before any time passed).
inline double per_second(std::int64_t count, double seconds) {
  return seconds > 0 ? static_cast<double>(count) / seconds : 0.0;
}

/// Returns the progress line: lines done of `total`, requests and tokens per second, 429s and the time
/// left at the pace so far (`done_before`: lines done before this run, answered or in the errors file, not part
/// of the pace).
inline std::string progress_line(const Stats& stats, std::int64_t total, std::int64_t done_before, double seconds) {
  const std::int64_t done_now = stats.answered + stats.failed;
  const std::int64_t left = total - done_before - done_now;
  char eta[32] = "?";
  if (done_now > 0) std::snprintf(eta, sizeof eta, "%.0f s", static_cast<double>(left) / per_second(done_now, seconds));
  char line[200];
  std::snprintf(line, sizeof line, "%lld / %lld done, %.0f requests/s, %.0f tokens/s, %lld 429s, ETA %s",
                static_cast<long long>(done_before + done_now), static_cast<long long>(total),
                per_second(stats.requests, seconds), per_second(stats.tokens_reserved, seconds),
                static_cast<long long>(stats.rate_limited.load()), eta);
  return line;
}

/// Returns the least time `deployment`'s limits (configured or learned) allow for `count` units of
/// `dimension` (what goes beyond the burst, at the refill rate); nullopt when it has no such limit.
inline std::optional<double> bound_seconds(const llmretry::Deployment& deployment, llmretry::Dimension dimension,
                                           std::int64_t count) {
  const auto limit = deployment.limiter().limit(dimension);
  if (!limit) return std::nullopt;
  const double rate = static_cast<double>(limit->limit) / std::chrono::duration<double>(limit->period).count();
  return static_cast<double>(std::max<std::int64_t>(0, count - limit->burst_or_limit())) / rate;
}

/// Prints the summary of a run to stderr (stdout may be the output file): lines, requests, 429s, retries by reason,
/// tokens reserved and used, and the wall time beside the least time the limits allow.
inline void print_summary(const Stats& stats, const llmretry::Deployment& deployment, std::int64_t total,
                          std::int64_t done_before, double seconds) {
  using llmretry::Dimension;
  const std::int64_t requests = stats.requests;
  std::fprintf(stderr, "lines: %lld, %lld done before this run, %lld answered now, %lld to the errors file (%s)\n",
               static_cast<long long>(total), static_cast<long long>(done_before),
               static_cast<long long>(stats.answered.load()), static_cast<long long>(stats.failed.load()),
               stats.stops().c_str());
  std::fprintf(
      stderr,
      "requests: %lld sent, %lld answered 429 (%.2f %%), %lld left in flight by an earlier run (%lld of its jobs "
      "reclaimed)\n",
      static_cast<long long>(requests), static_cast<long long>(stats.rate_limited.load()),
      requests > 0 ? 100.0 * static_cast<double>(stats.rate_limited) / static_cast<double>(requests) : 0.0,
      static_cast<long long>(stats.resumed_in_flight.load()), static_cast<long long>(stats.reclaimed.load()));
  std::fprintf(stderr, "retries: %s\n", stats.retries().c_str());
  std::fprintf(stderr, "tokens: %lld reserved, %lld used\n", static_cast<long long>(stats.tokens_reserved.load()),
               static_cast<long long>(stats.tokens_used.load()));
  const auto by_requests = bound_seconds(deployment, Dimension::requests_per_minute, requests);
  const auto by_tokens = bound_seconds(deployment, Dimension::tokens_per_minute, stats.tokens_reserved);
  std::fprintf(stderr, "wall time: %.2f s", seconds);
  if (by_requests || by_tokens) {
    std::fprintf(stderr, "; the limits (");
    if (const auto rpm = deployment.limiter().limit(Dimension::requests_per_minute))
      std::fprintf(stderr, "%lld RPM%s", static_cast<long long>(rpm->limit), by_tokens ? ", " : "");
    if (const auto tpm = deployment.limiter().limit(Dimension::tokens_per_minute))
      std::fprintf(stderr, "%lld TPM", static_cast<long long>(tpm->limit));
    std::fprintf(stderr, ") allow %.2f s", std::max(by_requests.value_or(0.0), by_tokens.value_or(0.0)));
  }
  std::fprintf(stderr, "\n");
}

}  // namespace batch

#endif  // LLMRETRY_BATCH_REPORT_HPP
