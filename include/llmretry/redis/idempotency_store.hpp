#ifndef LLMRETRY_REDIS_IDEMPOTENCY_STORE_HPP
#define LLMRETRY_REDIS_IDEMPOTENCY_STORE_HPP

/// The Redis IdempotencyStore: claims shared by every process that reaches the server. Each operation is
/// one Lua script, so a claim is atomic; leases and retention are Redis key expiries, timed by the server.

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../detail/config.hpp"
#include "../store/idempotency_store.hpp"
#include "../version.hpp"
#include "connection.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace redis {

namespace detail {

inline constexpr std::string_view claim_script = R"lua(
local r = redis.call('HMGET', KEYS[1], 'fp', 'token', 'state', 'status', 'body', 'headers')
if not r[1] then
  redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'token', ARGV[2], 'state', 'in_flight')
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {'claimed'}
end
if r[1] ~= ARGV[1] then return {'mismatch'} end
if r[3] == 'completed' then return {'completed', tonumber(r[4]), r[5], r[6] or ''} end
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
redis.call('HSET', KEYS[1], 'state', 'completed', 'status', ARGV[2], 'body', ARGV[3], 'headers', ARGV[5])
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

/// Returns `headers` as stored: one "name:value\n" line each. Throws std::invalid_argument for a name with
/// ':' or a name or value with CR or LF.
inline std::string stored_headers(const std::vector<std::pair<std::string, std::string>>& headers) {
  std::string text;
  for (const auto& [name, value] : headers) {
    if (name.find_first_of(":\r\n") != std::string::npos || value.find_first_of("\r\n") != std::string::npos)
      ::llmretry::detail::throw_invalid_argument(
          "StoredResponse::headers: a name holds ':', CR or LF, or a value CR or LF");
    text.append(name).append(":").append(value).append("\n");
  }
  return text;
}

/// Returns the headers of `text` written by stored_headers (a line without ':' is skipped).
inline std::vector<std::pair<std::string, std::string>> read_headers(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> headers;
  while (!text.empty()) {
    const auto end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    if (const auto colon = line.find(':'); colon != std::string_view::npos)
      headers.emplace_back(std::string(line.substr(0, colon)), std::string(line.substr(colon + 1)));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return headers;
}

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
              store::StoredResponse{static_cast<int>(reply[1].integer()), reply[2].text(),
                                    detail::read_headers(reply[3].text())},
              {}};
    return {store::ClaimStatus::in_flight, std::nullopt, std::chrono::milliseconds(reply[1].integer())};
  }

  [[nodiscard]] bool complete(std::string_view key, std::string_view token,
                              const store::StoredResponse& response) override {
    const std::string status = std::to_string(response.status);
    const std::string retention = std::to_string(options_.retention.count());
    const std::string headers = detail::stored_headers(response.headers);
    return connection_
               .eval("idempotency complete", {detail::complete_script}, {redis_key(key)},
                     {token, status, response.body, retention, headers})
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
