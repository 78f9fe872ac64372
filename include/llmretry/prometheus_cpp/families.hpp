#ifndef LLMRETRY_PROMETHEUS_CPP_FAMILIES_HPP
#define LLMRETRY_PROMETHEUS_CPP_FAMILIES_HPP

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/labels.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../detail/metric_families.hpp"
#include "../failure.hpp"
#include "../metrics/observer.hpp"
#include "../metrics/prometheus.hpp"
#include "../metrics/registry.hpp"
#include "../version.hpp"
#include "../vocabulary.hpp"

/// llmretry's metric families in an application's own prometheus::Registry (prometheus-cpp 1.0 or later,
/// target llmretry::prometheus_cpp). Namespace llmretry::prometheus_cpp.

LLMRETRY_BEGIN_NAMESPACE
namespace prometheus_cpp {

namespace detail {

/// The families' names, help texts and label names: metrics::Registry's.
namespace families = llmretry::detail::metric_families;

/// The prometheus-cpp family of one of llmretry's families, and its series by label values: each series is
/// created in the family (so owned by its registry) the first time its label values are seen, then found
/// again without allocating. Thread-safe: one mutex, held while a series is found (or created) and updated.
template <class Metric, std::size_t N>
class Series {
 public:
  using Values = std::array<std::string_view, N>;

  /// Registers `family` in `registry` (or finds it there, as prometheus-cpp merges families of one name).
  /// Throws std::invalid_argument when the registry refuses the name.
  Series(::prometheus::Registry& registry, const llmretry::detail::MetricFamily<N>& family)
      : family_(&builder().Name(std::string(family.name)).Help(std::string(family.help)).Register(registry)),
        names_(family.labels) {}

  /// Calls `update(metric)` on the series of `values`, created with the arguments `args` (a histogram's
  /// bucket bounds) the first time. Label values that are not UTF-8 are written with U+FFFD instead.
  template <class Update, class... Args>
  void update(const Values& values, Update&& update, const Args&... args) {
    series_.update(values, [&](Metric*& metric) {
      if (metric == nullptr) {
        ::prometheus::Labels labels;
        for (std::size_t i = 0; i < N; ++i)
          labels.emplace(std::string(names_[i]), metrics::detail::valid_utf8(values[i]));
        metric = &family_->Add(labels, args...);
      }
      update(*metric);
    });
  }

 private:
  static auto builder() {
    if constexpr (std::is_same_v<Metric, ::prometheus::Counter>) return ::prometheus::BuildCounter();
    else if constexpr (std::is_same_v<Metric, ::prometheus::Gauge>) return ::prometheus::BuildGauge();
    else return ::prometheus::BuildHistogram();
  }

  ::prometheus::Family<Metric>* family_;
  std::array<std::string_view, N> names_;
  metrics::detail::Family<N, Metric*> series_{nullptr};
};

/// Adds `amount` to `counter`, stopping at the largest count metrics::Registry writes (2^64 - 1, read
/// /// back as the double 2^64) instead of going past it. Requires that nothing else adds to `counter` meanwhile
/// (Series::update holds the series).
inline void add_saturating(::prometheus::Counter& counter, std::uint64_t amount) {
  constexpr auto most = static_cast<double>(std::numeric_limits<std::uint64_t>::max());
  counter.Increment(std::min(static_cast<double>(amount), most - counter.Value()));
}

}  // namespace detail

/// An Observer that counts every event in llmretry's metric families registered in an application's own
/// prometheus::Registry: the families, label names, help texts and queue-wait buckets of metrics::Registry
/// (see its table), so that dashboards and alerts read the same series whichever one serves them. The
/// application serves its registry as it already does (prometheus::Exposer, or TextSerializer on Collect()).
///
/// What differs from metrics::Registry is prometheus-cpp's: values are doubles (counts exact up to 2^53); a
/// family is written only once it has a series (no # HELP line before the first event); series and labels
/// come in prometheus-cpp's order. Counters stop at 2^64 - 1 as metrics::Registry's do.
///
/// Thread-safe: each family has its own mutex, held while one series is found (or created) and updated;
/// collecting the registry meanwhile is safe (prometheus-cpp's own locks). Every distinct set of label
/// values is kept for the object's lifetime, in the registry too: pass label values from a bounded set (map
/// an unknown model sent by a client to a fixed word such as "other").
///
/// Requires: the registry outlives this object, and neither the families nor their series are removed from
/// it (Registry::Remove, Family::Remove) while this object exists; at most one Families per registry (a
/// second one would count into the same series).
class Families : public metrics::Observer {
 public:
  /// Registers the families in `registry`, with the queue-wait buckets Registry::default_queue_wait_buckets().
  /// Throws std::invalid_argument when the registry refuses one of the names: it holds a family of that name
  /// of another type, or it was made with InsertBehavior::Throw and holds one of that name (the families
  /// registered before that one stay in the registry, without series).
  explicit Families(::prometheus::Registry& registry)
      : Families(registry, llmretry::detail::default_queue_wait_buckets()) {}
  /// Registers the families in `registry`, with the upper bounds `queue_wait_buckets` (seconds) for
  /// llm_queue_wait_seconds; the bucket +Inf is always added. Throws std::invalid_argument naming the bound
  /// that is not finite, is negative, or is not above the one before (then nothing is registered), or when
  /// the registry refuses a name (as above).
  Families(::prometheus::Registry& registry, std::vector<double> queue_wait_buckets)
      : queue_wait_buckets_(llmretry::detail::checked_queue_wait_buckets(std::move(queue_wait_buckets), "Families")),
        requests_(registry, detail::families::requests),
        tokens_reserved_(registry, detail::families::tokens_reserved),
        tokens_used_(registry, detail::families::tokens_used),
        retries_(registry, detail::families::retries),
        hedges_(registry, detail::families::hedges),
        hedge_wins_(registry, detail::families::hedge_wins),
        queue_depth_(registry, detail::families::queue_depth),
        queue_waits_(registry, detail::families::queue_wait),
        rate_limit_hits_(registry, detail::families::rate_limit_hits),
        fallbacks_(registry, detail::families::fallbacks),
        duplicates_(registry, detail::families::duplicates) {}

  /// Returns the upper bounds of the queue-wait buckets, in seconds, without +Inf.
  [[nodiscard]] const std::vector<double>& queue_wait_buckets() const noexcept { return queue_wait_buckets_; }

  /// Counts one llm_requests_total{provider,model,status}.
  void request_finished(const metrics::Target& target, std::string_view status) override {
    requests_.update({target.provider, target.model, status}, increment);
  }
  /// Counts one llm_retries_total{provider,model,error_type}, error_type = to_string(failure.kind).
  void retried(const metrics::Target& target, const Failure& failure, int /*resend_count*/) override {
    retries_.update({target.provider, target.model, to_string(failure.kind)}, increment);
  }
  /// Counts one llm_hedges_total{provider,model}.
  void hedged(const metrics::Target& target, int /*resend_count*/) override {
    hedges_.update({target.provider, target.model}, increment);
  }
  /// Counts one llm_hedge_wins_total{provider,model}.
  void hedge_won(const metrics::Target& target) override {
    hedge_wins_.update({target.provider, target.model}, increment);
  }
  /// Counts one llm_rate_limit_hits_total{provider,model,limit_type}.
  void rate_limited(const metrics::Target& target, LimitType limit_type) override {
    rate_limit_hits_.update({target.provider, target.model, to_string(limit_type)}, increment);
  }
  /// Adds `tokens` to llm_tokens_reserved_total{provider,model}.
  void tokens_reserved(const metrics::Target& target, std::uint64_t tokens) override {
    tokens_reserved_.update({target.provider, target.model},
                            [&](::prometheus::Counter& counter) { detail::add_saturating(counter, tokens); });
  }
  /// Adds `tokens` to llm_tokens_used_total{provider,model}.
  void tokens_used(const metrics::Target& target, std::uint64_t tokens) override {
    tokens_used_.update({target.provider, target.model},
                        [&](::prometheus::Counter& counter) { detail::add_saturating(counter, tokens); });
  }
  /// Adds one to llm_queue_depth{priority,task_type}.
  void queue_entered(const metrics::Queue& queue) override {
    queue_depth_.update({queue.priority, queue.task_type}, [](::prometheus::Gauge& depth) { depth.Increment(); });
  }
  /// Takes one from llm_queue_depth{priority,task_type} and observes `waited` in llm_queue_wait_seconds
  /// (a negative or NaN wait counts as 0).
  void queue_left(const metrics::Queue& queue, std::chrono::duration<double> waited) override {
    queue_depth_.update({queue.priority, queue.task_type}, [](::prometheus::Gauge& depth) { depth.Decrement(); });
    const double seconds = llmretry::detail::observed_wait(waited);
    queue_waits_.update(
        {queue.priority, queue.task_type}, [&](::prometheus::Histogram& waits) { waits.Observe(seconds); },
        queue_wait_buckets_);
  }
  /// Counts one llm_fallbacks_total{from_provider,to_provider,reason}, reason = to_string(reason).
  void fell_back(const metrics::Target& from, const metrics::Target& to, FallbackReason reason) override {
    fallbacks_.update({from.provider, to.provider, to_string(reason)}, increment);
  }
  /// Counts one llm_duplicate_suppressed_total{task_type}.
  void duplicate_suppressed(std::string_view task_type) override { duplicates_.update({task_type}, increment); }

 private:
  template <std::size_t N>
  using Counter = detail::Series<::prometheus::Counter, N>;
  static void increment(::prometheus::Counter& counter) { counter.Increment(); }

  std::vector<double> queue_wait_buckets_;
  Counter<3> requests_;
  Counter<2> tokens_reserved_;
  Counter<2> tokens_used_;
  Counter<3> retries_;
  Counter<2> hedges_;
  Counter<2> hedge_wins_;
  detail::Series<::prometheus::Gauge, 2> queue_depth_;
  detail::Series<::prometheus::Histogram, 2> queue_waits_;
  Counter<3> rate_limit_hits_;
  Counter<3> fallbacks_;
  Counter<1> duplicates_;
};

}  // namespace prometheus_cpp
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_PROMETHEUS_CPP_FAMILIES_HPP
