// The upstreams of llmretry-relay and the fallback chain of each model: one Deployment (pacing) and one
// CircuitBreaker per upstream, one RetryBudget shared by all.
#ifndef LLMRETRY_RELAY_ROUTES_HPP
#define LLMRETRY_RELAY_ROUTES_HPP

#include <llmretry/admission/circuit_breaker.hpp>
#include <llmretry/admission/deployment.hpp>
#include <llmretry/admission/retry_budget.hpp>
#include <llmretry/attempt.hpp>
#include <llmretry/curl/curl.hpp>
#include <llmretry/fallback.hpp>
#include <llmretry/guard.hpp>
#include <llmretry/json/usage.hpp>
#if LLMRETRY_RELAY_REDIS
#include <llmretry/redis/rate_limiter.hpp>
#endif

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config.hpp"

namespace relay {

/// How one upstream is paced.
struct Pace {
  std::optional<std::int64_t> rpm;           ///< requests per minute, enforced per second; empty: learned
  std::optional<std::int64_t> tpm;           ///< tokens per minute, enforced per second; empty: learned
  std::optional<int> concurrency;            ///< requests in flight at most; empty: no limit
  std::chrono::milliseconds max_wait{8000};  ///< the longest wait for capacity before a refusal
};

/// Returns the pacing state that the upstream of `model` (a model of the table; empty: any model), sending
/// to `base_url` with `api_key`, shares with other relays and llmretry-batch workers, configured with
/// `limits`.
using ShareLimits = std::function<std::shared_ptr<llmretry::SharedPacing>(
    const std::string& model, const std::string& base_url, const std::string& api_key, const llmretry::Limits& limits)>;

/// One upstream: where its requests go, with which key, and what guards them.
struct Upstream {
  std::string name;  ///< the route's name: the model of the table, or "upstream", "fallback-1", "anthropic"...
  Format format = Format::openai;  ///< the API it speaks
  std::string base_url;            ///< such as "https://api.openai.com/v1"
  std::string api_key;             ///< sent as "Authorization: Bearer ..."; empty: none. Never printed
  std::string model;               ///< the model the body is sent with; empty: the client's own
  std::unique_ptr<llmretry::Deployment> deployment;
  std::unique_ptr<llmretry::CircuitBreaker> breaker;
};

/// A fallback chain and the upstream of each of its routes (same order), all speaking one format.
struct Chain {
  llmretry::FallbackChain fallback_chain;
  std::vector<const Upstream*> upstreams;
  Format format = Format::openai;
  llmretry::PressureRules under_pressure;  ///< what pressure on the first upstream does to the chain's requests

  /// Returns the upstream of `route`, one of fallback_chain.routes().
  const Upstream& upstream_of(const llmretry::Route& route) const {
    return *upstreams[static_cast<std::size_t>(&route - fallback_chain.routes().data())];
  }
};

/// A problem with the upstreams' settings (such as a key variable that is not set): exit status 2.
class SetupError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Returns the value of an environment variable, empty when unset.
using Environment = std::function<std::string(const std::string& name)>;

/// The upstreams and the chain each model goes through. Thread-safe once built (the guards are).
class Routes {
 public:
  /// Every model of OpenAI's API goes to `upstream`, then to the `fallbacks` in order, all with the key in
  /// OPENAI_API_KEY and the same pacing; every model of Anthropic's to `anthropic_upstream` with the key in
  /// ANTHROPIC_API_KEY (empty: Anthropic's API is not served).
  /// `share`: shares each upstream's pacing (its limits, configured or learned) with other relays (empty:
  /// none).
  Routes(const std::string& upstream, const std::vector<std::string>& fallbacks, const Pace& pace,
         const Environment& environment, const ShareLimits& share = {}, const std::string& anthropic_upstream = {})
      : share_(share), table_(false) {
    const std::string key = environment("OPENAI_API_KEY");
    std::vector<llmretry::Route> routes;
    std::vector<const Upstream*> used;
    for (std::size_t i = 0; i <= fallbacks.size(); ++i) {
      const std::string name = i == 0 ? "upstream" : "fallback-" + std::to_string(i);
      const Upstream& added =
          add(upstream_named(name, Format::openai, i == 0 ? upstream : fallbacks[i - 1], key, {}, pace));
      routes.push_back(route_to(added, i == 0));
      used.push_back(&added);
    }
    any_model_.emplace(Format::openai,
                       Chain{llmretry::FallbackChain(std::move(routes)), std::move(used), Format::openai, {}});
    if (!anthropic_upstream.empty()) {
      const Upstream& added = add(upstream_named("anthropic", Format::anthropic, anthropic_upstream,
                                                 environment("ANTHROPIC_API_KEY"), {}, pace));
      any_model_.emplace(Format::anthropic,
                         Chain{llmretry::FallbackChain({route_to(added, true)}), {&added}, Format::anthropic, {}});
    }
  }

  /// Each model of `table` goes to its row's upstream (`upstream`, or `anthropic_upstream` for a model of
  /// Anthropic's API, when the row names none), then along its fallbacks; `pace` gives what a row does not.
  /// Throws SetupError when a row's key variable is not set, or an Anthropic row has no upstream.
  Routes(const ModelTable& table, const std::string& upstream, const Pace& pace, const Environment& environment,
         const ShareLimits& share = {}, const std::string& anthropic_upstream = {})
      : share_(share), table_(true) {
    std::map<std::string, const Upstream*> by_name;
    for (const auto& [name, row] : table) {
      Pace row_pace = pace;
      if (row.rpm) row_pace.rpm = row.rpm;
      if (row.tpm) row_pace.tpm = row.tpm;
      if (row.concurrency) row_pace.concurrency = row.concurrency;
      const bool anthropic = row.format == Format::anthropic;
      const std::string variable = !row.api_key_env.empty() ? row.api_key_env
                                   : anthropic              ? "ANTHROPIC_API_KEY"
                                                            : "OPENAI_API_KEY";
      const std::string key = environment(variable);
      if (!row.api_key_env.empty() && key.empty())
        throw SetupError("models." + name + ".api_key_env: the variable " + variable + " is not set");
      const std::string base_url = !row.upstream.empty() ? row.upstream : anthropic ? anthropic_upstream : upstream;
      if (base_url.empty())
        throw SetupError("models." + name +
                         ".upstream: a model of Anthropic's API needs its upstream (or --anthropic-upstream)");
      by_name[name] = &add(upstream_named(name, row.format, base_url, key, name, row_pace));
    }
    for (const auto& [name, row] : table) {
      std::vector<llmretry::Route> routes;
      std::vector<const Upstream*> used;
      for (std::string next = name; !next.empty(); next = table.at(next).fallback) {
        routes.push_back(route_to(*by_name.at(next), routes.empty()));
        used.push_back(by_name.at(next));
      }
      by_model_.emplace(
          name, Chain{llmretry::FallbackChain(std::move(routes)), std::move(used), row.format, row.under_pressure});
    }
  }

  /// Returns the chain of `model` for a request in `format`: without a model table the one chain of that
  /// format (nullptr when that API is not served); with one, the model's chain (nullptr when the table has
  /// no such model; the chain may speak another format: the caller says so).
  [[nodiscard]] const Chain* chain_for(std::string_view model, Format format) const {
    if (!table_) {
      const auto found = any_model_.find(format);
      return found != any_model_.end() ? &found->second : nullptr;
    }
    const auto found = by_model_.find(model);
    return found != by_model_.end() ? &found->second : nullptr;
  }

  /// Returns true when a model table lists the models served, false when every model is.
  [[nodiscard]] bool has_model_table() const noexcept { return table_; }

  /// Returns every upstream, in the order they were made.
  [[nodiscard]] const std::vector<std::unique_ptr<Upstream>>& upstreams() const noexcept { return upstreams_; }

 private:
  std::unique_ptr<Upstream> upstream_named(const std::string& name, Format format, const std::string& base_url,
                                           const std::string& key, const std::string& model, const Pace& pace) const {
    auto upstream = std::make_unique<Upstream>();
    upstream->name = name;
    upstream->format = format;
    upstream->base_url = base_url;
    upstream->api_key = key;
    upstream->model = model;
    llmretry::DeploymentOptions deployment;
    deployment.name = name;
    if (pace.rpm)
      deployment.limits[llmretry::Dimension::requests_per_minute] = llmretry::Limit::per_minute_paced(*pace.rpm);
    if (pace.tpm)
      deployment.limits[llmretry::Dimension::tokens_per_minute] = llmretry::Limit::per_minute_paced(*pace.tpm);
    if (share_) deployment.shared = share_(model, base_url, key, deployment.limits);
    deployment.concurrency = pace.concurrency;
    deployment.max_queue_wait = pace.max_wait;
    deployment.read_usage = [](std::string_view body) { return llmretry::json::usage_of(body); };
    upstream->deployment = std::make_unique<llmretry::Deployment>(std::move(deployment));
    llmretry::CircuitBreakerOptions breaker;
    breaker.name = name;
    upstream->breaker = std::make_unique<llmretry::CircuitBreaker>(std::move(breaker));
    return upstream;
  }

  const Upstream& add(std::unique_ptr<Upstream> upstream) {
    upstreams_.push_back(std::move(upstream));
    return *upstreams_.back();
  }

  llmretry::Route route_to(const Upstream& upstream, bool primary) {
    llmretry::Route route;
    route.name = upstream.name;
    route.provider = upstream.name;
    route.model = upstream.model;
    if (!primary) {
      route.when = {llmretry::FallbackReason::provider_5xx, llmretry::FallbackReason::rate_limit_after_retry_budget,
                    llmretry::FallbackReason::primary_unavailable};
      if (!upstream.model.empty()) route.when.push_back(llmretry::FallbackReason::context_length_needed);
    }
    route.deployment = upstream.deployment.get();
    route.breaker = upstream.breaker.get();
    route.budget = &budget_;
    return route;
  }

  ShareLimits share_;
  llmretry::RetryBudget budget_;
  std::vector<std::unique_ptr<Upstream>> upstreams_;
  bool table_;  ///< a model table lists the models served
  std::map<std::string, Chain, std::less<>> by_model_;
  std::map<Format, Chain> any_model_;  ///< without a model table: the one chain of each format served
};

}  // namespace relay

#endif  // LLMRETRY_RELAY_ROUTES_HPP
