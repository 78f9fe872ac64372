// A few Redis connections handed out in turn, so that the many threads of a tool do not all wait for one
// connection (each redis::Connection runs one command at a time); an idempotency store and a shared rate
// limiter over them.
#ifndef LLMRETRY_TOOLS_COMMON_REDIS_POOL_HPP
#define LLMRETRY_TOOLS_COMMON_REDIS_POOL_HPP

#include <llmretry/redis/connection.hpp>
#include <llmretry/redis/idempotency_store.hpp>
#include <llmretry/redis/rate_limiter.hpp>
#include <llmretry/store/fingerprint.hpp>
#include <llmretry/store/idempotency_store.hpp>

#include <atomic>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace llmretry_tools {

/// `size` connections to one Redis server, and the index of the next one to use. Thread-safe.
class RedisPool {
 public:
  /// Connects `size` times (at least once) with `options`. Throws redis::RedisError when a connection fails.
  RedisPool(const llmretry::redis::Options& options, std::size_t size) {
    for (std::size_t i = 0; i < (size > 0 ? size : 1); ++i)
      connections_.push_back(std::make_unique<llmretry::redis::Connection>(options));
  }

  /// Returns how many connections it holds.
  [[nodiscard]] std::size_t size() const noexcept { return connections_.size(); }
  /// Returns connection `i` (< size()).
  [[nodiscard]] llmretry::redis::Connection& at(std::size_t i) const { return *connections_.at(i); }
  /// Returns the index of the connection to use next: each in turn.
  [[nodiscard]] std::size_t next() noexcept { return next_.fetch_add(1, std::memory_order_relaxed) % size(); }

 private:
  std::vector<std::unique_ptr<llmretry::redis::Connection>> connections_;
  std::atomic<std::size_t> next_{0};
};

/// A redis::IdempotencyStore on each connection of a RedisPool (which must outlive it), each operation
/// made on the next one: what a key holds lives in Redis, so any connection serves any key.
class PooledIdempotencyStore final : public llmretry::store::IdempotencyStore {
 public:
  /// The stores of `pool`'s connections, their claims with `options`.
  PooledIdempotencyStore(RedisPool& pool, const llmretry::store::IdempotencyOptions& options) : pool_(pool) {
    for (std::size_t i = 0; i < pool.size(); ++i)
      stores_.push_back(std::make_unique<llmretry::redis::IdempotencyStore>(pool.at(i), options));
  }

  [[nodiscard]] llmretry::store::ClaimResult claim(std::string_view key, std::string_view fingerprint,
                                                   std::string_view token) override {
    return next().claim(key, fingerprint, token);
  }
  [[nodiscard]] bool complete(std::string_view key, std::string_view token,
                              const llmretry::store::StoredResponse& response) override {
    return next().complete(key, token, response);
  }
  [[nodiscard]] bool release(std::string_view key, std::string_view token) override {
    return next().release(key, token);
  }
  [[nodiscard]] bool renew(std::string_view key, std::string_view token) override { return next().renew(key, token); }

 private:
  llmretry::store::IdempotencyStore& next() { return *stores_[pool_.next()]; }

  RedisPool& pool_;
  std::vector<std::unique_ptr<llmretry::redis::IdempotencyStore>> stores_;
};

/// Returns the name under which every process paces the deployment `label` (a model of a relay's table;
/// empty: any model) that sends to `base_url` with `api_key`: providers set limits per key, so relays and
/// llmretry-batch workers sending with one key share one quota. The key itself never reaches Redis.
/// The URL counts without trailing slashes and a last "/v1" ("http://x", "http://x/" and "http://x/v1" are
/// one provider to both programs).
inline std::string shared_pacing_name(const std::string& label, const std::string& base_url,
                                      const std::string& api_key) {
  std::string_view url = base_url;
  while (!url.empty() && url.back() == '/') url.remove_suffix(1);
  if (url.size() >= 3 && url.substr(url.size() - 3) == "/v1") url.remove_suffix(3);
  while (!url.empty() && url.back() == '/') url.remove_suffix(1);
  return label + "@" + llmretry::store::fingerprint(std::string(url) + "\n" + api_key);
}

/// A redis::RateLimiter on each connection of a RedisPool (which must outlive it), each operation made on
/// the next one: the state lives in Redis, so any connection serves any reservation.
class PooledRateLimiter final : public llmretry::SharedPacing {
 public:
  /// The limiters named `name` with `limits` on `pool`'s connections. Throws std::invalid_argument as
  /// redis::RateLimiter does.
  PooledRateLimiter(RedisPool& pool, const std::string& name, const llmretry::Limits& limits) : pool_(pool) {
    for (std::size_t i = 0; i < pool.size(); ++i)
      limiters_.push_back(std::make_unique<llmretry::redis::RateLimiter>(pool.at(i), name, limits));
  }

  [[nodiscard]] llmretry::Reservation reserve(const llmretry::Cost& cost, time_point now,
                                              std::optional<std::chrono::milliseconds> max_wait,
                                              const llmretry::Precedence& precedence) override {
    return next().reserve(cost, now, max_wait, precedence);
  }
  void finish(llmretry::Reservation& reservation, const llmretry::AttemptEnd& end, time_point now) override {
    next().finish(reservation, end, now);
  }
  [[nodiscard]] llmretry::RateLimiterStats stats() override { return next().stats(); }
  /// Returns the latest snapshot among the connections' limiters.
  [[nodiscard]] std::optional<llmretry::SharedSnapshot> snapshot() const noexcept override {
    std::optional<llmretry::SharedSnapshot> latest;
    for (const auto& limiter : limiters_) {
      const auto seen = limiter->snapshot();
      if (seen && (!latest || seen->as_of > latest->as_of)) latest = seen;
    }
    return latest;
  }

 private:
  llmretry::redis::RateLimiter& next() { return *limiters_[pool_.next()]; }

  RedisPool& pool_;
  std::vector<std::unique_ptr<llmretry::redis::RateLimiter>> limiters_;
};

}  // namespace llmretry_tools

#endif  // LLMRETRY_TOOLS_COMMON_REDIS_POOL_HPP
