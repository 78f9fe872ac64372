#ifndef LLMRETRY_METRICS_REGISTRY_HPP
#define LLMRETRY_METRICS_REGISTRY_HPP

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../detail/config.hpp"
#include "../detail/metric_families.hpp"
#include "../failure.hpp"
#include "../version.hpp"
#include "../vocabulary.hpp"
#include "observer.hpp"
#include "prometheus.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace metrics {

namespace detail {

/// Orders label sets by their values, label by label, byte by byte; compares stored sets (strings) with
/// looked-up ones (string views) without copying.
struct LabelOrder {
  using is_transparent = void;
  template <class A, class B>
  bool operator()(const A& a, const B& b) const noexcept {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(),
                                        [](std::string_view x, std::string_view y) { return x < y; });
  }
};

/// The series of one metric family: a value per set of N label values, behind the family's own mutex.
template <std::size_t N, class Value>
class Family {
 public:
  using Labels = std::array<std::string_view, N>;

  /// A family whose new series start as a copy of `initial`.
  explicit Family(Value initial = Value{}) : initial_(std::move(initial)) {}

  /// Calls `update(value)` on the series of `labels`, created as a copy of the initial value the first
  /// time (whole before it is updated: a creation that throws leaves no series).
  template <class Update>
  void update(const Labels& labels, Update&& update) {
    const std::lock_guard<std::mutex> lock(mutex_);
    auto found = series_.find(labels);
    if (found == series_.end()) {
      std::array<std::string, N> stored;
      std::copy(labels.begin(), labels.end(), stored.begin());
      found = series_.emplace(std::move(stored), initial_).first;
    }
    update(found->second);
  }

  /// Calls `visit(labels, value)` for every series, ordered by label values.
  template <class Visit>
  void each(Visit&& visit) const {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [stored, value] : series_) {
      Labels labels;
      std::copy(stored.begin(), stored.end(), labels.begin());
      visit(labels, value);
    }
  }

 private:
  Value initial_;
  mutable std::mutex mutex_;
  std::map<std::array<std::string, N>, Value, LabelOrder> series_;
};

/// Adds `amount` to `counter`, stopping at the largest value instead of wrapping (a counter that went
/// back to 0 would read as a restart).
inline void add_saturating(std::uint64_t& counter, std::uint64_t amount) noexcept {
  counter = amount > std::numeric_limits<std::uint64_t>::max() - counter ? std::numeric_limits<std::uint64_t>::max()
                                                                         : counter + amount;
}

/// The observations of one histogram series: how many fell in each bucket (the last one: above every
/// bound; one count per bound plus one, from the start), their sum and their count.
struct Observations {
  std::vector<std::uint64_t> in_bucket;
  double sum = 0;
  std::uint64_t count = 0;
};

}  // namespace detail

/// An Observer that counts every event it hears, in memory, and writes the counts in the Prometheus text
/// exposition format 0.0.4. Thread-safe: each metric family has its own mutex, held while one series is
/// found (or created) and updated, or while the family is written. Every distinct set of label values is
/// kept for the registry's lifetime: pass label values from a bounded set (map an unknown model sent by a
/// client to a fixed word such as "other").
///
/// The families, with their labels in the order written:
///   llm_requests_total{provider,model,status}              counter    request_finished
///   llm_tokens_reserved_total{provider,model}              counter    tokens_reserved
///   llm_tokens_used_total{provider,model}                  counter    tokens_used
///   llm_retries_total{provider,model,error_type}           counter    retried
///   llm_hedges_total{provider,model}                       counter    hedged
///   llm_hedge_wins_total{provider,model}                   counter    hedge_won
///   llm_queue_depth{priority,task_type}                    gauge      queue_entered - queue_left
///   llm_queue_wait_seconds{priority,task_type}             histogram  queue_left
///   llm_rate_limit_hits_total{provider,model,limit_type}   counter    rate_limited
///   llm_fallbacks_total{from_provider,to_provider,reason}  counter    fell_back
///   llm_duplicate_suppressed_total{task_type}              counter    duplicate_suppressed
class Registry : public Observer {
 public:
  /// Returns the default bounds of the queue-wait buckets, in seconds: 0.01 to 120, for waits from a
  /// free slot to minutes of waiting for a per-minute limit.
  [[nodiscard]] static std::vector<double> default_queue_wait_buckets() {
    return llmretry::detail::default_queue_wait_buckets();
  }

  /// Counts with the default queue-wait buckets.
  Registry() : Registry(default_queue_wait_buckets()) {}
  /// Counts with the upper bounds `queue_wait_buckets` (seconds) for llm_queue_wait_seconds; the bucket
  /// +Inf is always added. Throws std::invalid_argument naming the bound that is not finite, is negative,
  /// or is not above the one before.
  explicit Registry(std::vector<double> queue_wait_buckets)
      : queue_wait_buckets_(llmretry::detail::checked_queue_wait_buckets(std::move(queue_wait_buckets), "Registry")),
        queue_waits_(detail::Observations{std::vector<std::uint64_t>(queue_wait_buckets_.size() + 1), 0, 0}) {}

  /// Returns the upper bounds of the queue-wait buckets, in seconds, without +Inf.
  [[nodiscard]] const std::vector<double>& queue_wait_buckets() const noexcept { return queue_wait_buckets_; }

  /// Counts one llm_requests_total{provider,model,status}.
  void request_finished(const Target& target, std::string_view status) override {
    requests_.update({target.provider, target.model, status}, [](std::uint64_t& n) { ++n; });
  }
  /// Counts one llm_retries_total{provider,model,error_type}, error_type = to_string(failure.kind).
  void retried(const Target& target, const Failure& failure, int /*resend_count*/) override {
    retries_.update({target.provider, target.model, to_string(failure.kind)}, [](std::uint64_t& n) { ++n; });
  }
  /// Counts one llm_hedges_total{provider,model}.
  void hedged(const Target& target, int /*resend_count*/) override {
    hedges_.update({target.provider, target.model}, [](std::uint64_t& n) { ++n; });
  }
  /// Counts one llm_hedge_wins_total{provider,model}.
  void hedge_won(const Target& target) override {
    hedge_wins_.update({target.provider, target.model}, [](std::uint64_t& n) { ++n; });
  }
  /// Counts one llm_rate_limit_hits_total{provider,model,limit_type}.
  void rate_limited(const Target& target, LimitType limit_type) override {
    rate_limit_hits_.update({target.provider, target.model, to_string(limit_type)}, [](std::uint64_t& n) { ++n; });
  }
  /// Adds `tokens` to llm_tokens_reserved_total{provider,model}.
  void tokens_reserved(const Target& target, std::uint64_t tokens) override {
    tokens_reserved_.update({target.provider, target.model},
                            [&](std::uint64_t& n) { detail::add_saturating(n, tokens); });
  }
  /// Adds `tokens` to llm_tokens_used_total{provider,model}.
  void tokens_used(const Target& target, std::uint64_t tokens) override {
    tokens_used_.update({target.provider, target.model}, [&](std::uint64_t& n) { detail::add_saturating(n, tokens); });
  }
  /// Adds one to llm_queue_depth{priority,task_type}.
  void queue_entered(const Queue& queue) override {
    queue_depth_.update({queue.priority, queue.task_type}, [](std::int64_t& depth) { ++depth; });
  }
  /// Takes one from llm_queue_depth{priority,task_type} and observes `waited` in llm_queue_wait_seconds
  /// (a negative or NaN wait counts as 0).
  void queue_left(const Queue& queue, std::chrono::duration<double> waited) override {
    queue_depth_.update({queue.priority, queue.task_type}, [](std::int64_t& depth) { --depth; });
    const double seconds = llmretry::detail::observed_wait(waited);
    queue_waits_.update({queue.priority, queue.task_type}, [&](detail::Observations& observations) {
      const auto bucket = std::lower_bound(queue_wait_buckets_.begin(), queue_wait_buckets_.end(), seconds) -
                          queue_wait_buckets_.begin();
      ++observations.in_bucket[static_cast<std::size_t>(bucket)];
      observations.sum += seconds;
      ++observations.count;
    });
  }
  /// Counts one llm_fallbacks_total{from_provider,to_provider,reason}, reason = to_string(reason).
  void fell_back(const Target& from, const Target& to, FallbackReason reason) override {
    fallbacks_.update({from.provider, to.provider, to_string(reason)}, [](std::uint64_t& n) { ++n; });
  }
  /// Counts one llm_duplicate_suppressed_total{task_type}.
  void duplicate_suppressed(std::string_view task_type) override {
    duplicates_.update({task_type}, [](std::uint64_t& n) { ++n; });
  }

  /// Returns every family in the Prometheus text exposition format 0.0.4 (serve it with
  /// prometheus_content_type): in the order of the table above, each with its # HELP and # TYPE lines even
  /// before it has a series (so that dashboards and alerts find it), its series ordered by their label
  /// values (byte order). Histogram buckets are cumulative, up to le="+Inf", then _sum and _count. Each
  /// family is read under its own lock: the families are not one snapshot taken at a single instant.
  [[nodiscard]] std::string prometheus_text() const {
    namespace families = llmretry::detail::metric_families;
    std::string out;
    write_counter(out, families::requests, requests_);
    write_counter(out, families::tokens_reserved, tokens_reserved_);
    write_counter(out, families::tokens_used, tokens_used_);
    write_counter(out, families::retries, retries_);
    write_counter(out, families::hedges, hedges_);
    write_counter(out, families::hedge_wins, hedge_wins_);
    append_family(out, families::queue_depth.name, families::queue_depth.help, "gauge");
    queue_depth_.each([&](const auto& labels, std::int64_t depth) {
      append_sample(out, families::queue_depth.name, labelled(families::queue_depth.labels, labels),
                    std::to_string(depth));
    });
    write_queue_waits(out);
    write_counter(out, families::rate_limit_hits, rate_limit_hits_);
    write_counter(out, families::fallbacks, fallbacks_);
    write_counter(out, families::duplicates, duplicates_);
    return out;
  }

 private:
  template <std::size_t N>
  using Counter = detail::Family<N, std::uint64_t>;

  template <std::size_t N>
  static std::array<Label, N> labelled(const std::array<std::string_view, N>& names,
                                       const std::array<std::string_view, N>& values) {
    std::array<Label, N> labels;
    for (std::size_t i = 0; i < N; ++i) labels[i] = Label{names[i], values[i]};
    return labels;
  }

  template <std::size_t N>
  static void write_counter(std::string& out, const llmretry::detail::MetricFamily<N>& family,
                            const Counter<N>& series) {
    append_family(out, family.name, family.help, "counter");
    series.each([&](const auto& labels, std::uint64_t count) {
      append_sample(out, family.name, labelled(family.labels, labels), std::to_string(count));
    });
  }

  void write_queue_waits(std::string& out) const {
    const auto& family = llmretry::detail::metric_families::queue_wait;
    append_family(out, family.name, family.help, "histogram");
    const std::string bucket = std::string(family.name) + "_bucket";
    const std::string sum = std::string(family.name) + "_sum";
    const std::string count = std::string(family.name) + "_count";
    queue_waits_.each([&](const auto& labels, const detail::Observations& observations) {
      const Label priority{family.labels[0], labels[0]};
      const Label task_type{family.labels[1], labels[1]};
      std::uint64_t cumulative = 0;
      for (std::size_t i = 0; i <= queue_wait_buckets_.size(); ++i) {
        cumulative += observations.in_bucket[i];
        const std::string le =
            i < queue_wait_buckets_.size() ? format_value(queue_wait_buckets_[i]) : std::string("+Inf");
        append_sample(out, bucket, {priority, task_type, {"le", le}}, std::to_string(cumulative));
      }
      append_sample(out, sum, {priority, task_type}, format_value(observations.sum));
      append_sample(out, count, {priority, task_type}, std::to_string(observations.count));
    });
  }

  std::vector<double> queue_wait_buckets_;
  Counter<3> requests_;
  Counter<2> tokens_reserved_;
  Counter<2> tokens_used_;
  Counter<3> retries_;
  Counter<2> hedges_;
  Counter<2> hedge_wins_;
  detail::Family<2, std::int64_t> queue_depth_;
  detail::Family<2, detail::Observations> queue_waits_;
  Counter<3> rate_limit_hits_;
  Counter<3> fallbacks_;
  Counter<1> duplicates_;
};

}  // namespace metrics
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_METRICS_REGISTRY_HPP
