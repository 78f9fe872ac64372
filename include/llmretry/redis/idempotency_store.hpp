#ifndef LLMRETRY_REDIS_IDEMPOTENCY_STORE_HPP
#define LLMRETRY_REDIS_IDEMPOTENCY_STORE_HPP

/// The Redis IdempotencyStore: claims shared by every process that reaches the server. Each operation is
/// one Lua script, so a claim is atomic; leases and retention are Redis key expiries, timed by the server.

#include <chrono>
#include <string>
#include <string_view>

#include "../store/idempotency_store.hpp"
#include "../version.hpp"
#include "connection.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace redis {

namespace detail {

inline constexpr std::string_view claim_script = R"lua(
local r = redis.call('HMGET', KEYS[1], 'fp', 'token', 'state', 'status', 'body')
if not r[1] then
  redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'token', ARGV[2], 'state', 'in_flight')
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {'claimed'}
end
if r[1] ~= ARGV[1] then return {'mismatch'} end
if r[3] == 'completed' then return {'completed', tonumber(r[4]), r[5]} end
if r[2] == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {'claimed'}
end
return {'in_flight', redis.call('PTTL', KEYS[1])}
)lua";

inline constexpr std::string_view complete_script = R"lua(
local r = redis.call('HMGET', KEYS[1], 'token', 'state')
if r[1] ~= ARGV[1] then return 0 end
if r[2] == 'completed' then return 1 end
redis.call('HSET', KEYS[1], 'state', 'completed', 'status', ARGV[2], 'body', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
)lua";

inline constexpr std::string_view release_script = R"lua(
local r = redis.call('HMGET', KEYS[1], 'token', 'state')
if r[1] ~= ARGV[1] or r[2] ~= 'in_flight' then return 0 end
redis.call('DEL', KEYS[1])
return 1
)lua";

inline constexpr std::string_view renew_script = R"lua(
local r = redis.call('HMGET', KEYS[1], 'token', 'state')
if r[1] ~= ARGV[1] or r[2] ~= 'in_flight' then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
)lua";

}  // namespace detail

/// Idempotency keys in Redis, under `<prefix>idem:<key>`. Leases and retention run on the server's clock.
/// Throws redis::RedisError from every operation when the server cannot be reached or answers with an error.
class IdempotencyStore final : public store::IdempotencyStore {
 public:
  /// A store on `connection` (which must outlive it) with `options`.
  explicit IdempotencyStore(Connection& connection, store::IdempotencyOptions options = {})
      : connection_(connection), options_(options) {}

  [[nodiscard]] store::ClaimResult claim(std::string_view key, std::string_view fingerprint,
                                         std::string_view token) override {
    store::check_idempotency_key(key, token);
    const std::string lease = std::to_string(options_.lease.count());
    const Reply reply =
        connection_.eval("idempotency claim", {detail::claim_script}, {redis_key(key)}, {fingerprint, token, lease});
    const std::string status = reply[0].text();
    if (status == "claimed") return {};
    if (status == "mismatch") return {store::ClaimStatus::mismatch, std::nullopt, {}};
    if (status == "completed")
      return {store::ClaimStatus::completed,
              store::StoredResponse{static_cast<int>(reply[1].integer()), reply[2].text()},
              {}};
    return {store::ClaimStatus::in_flight, std::nullopt, std::chrono::milliseconds(reply[1].integer())};
  }

  [[nodiscard]] bool complete(std::string_view key, std::string_view token,
                              const store::StoredResponse& response) override {
    const std::string status = std::to_string(response.status);
    const std::string retention = std::to_string(options_.retention.count());
    return connection_
               .eval("idempotency complete", {detail::complete_script}, {redis_key(key)},
                     {token, status, response.body, retention})
               .integer() == 1;
  }

  [[nodiscard]] bool release(std::string_view key, std::string_view token) override {
    return connection_.eval("idempotency release", {detail::release_script}, {redis_key(key)}, {token}).integer() == 1;
  }

  [[nodiscard]] bool renew(std::string_view key, std::string_view token) override {
    const std::string lease = std::to_string(options_.lease.count());
    return connection_.eval("idempotency renew", {detail::renew_script}, {redis_key(key)}, {token, lease}).integer() ==
           1;
  }

 private:
  [[nodiscard]] std::string redis_key(std::string_view key) const {
    return connection_.options().prefix + "idem:" + std::string(key);
  }

  Connection& connection_;
  store::IdempotencyOptions options_;
};

}  // namespace redis
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_REDIS_IDEMPOTENCY_STORE_HPP
