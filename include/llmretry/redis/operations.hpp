#ifndef LLMRETRY_REDIS_OPERATIONS_HPP
#define LLMRETRY_REDIS_OPERATIONS_HPP

/// The Redis OperationsTable: one hash per operation, written by Lua scripts (atomic), timestamped with the
/// server's clock so that workers on machines with skewed clocks agree.

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "../store/operations.hpp"
#include "../version.hpp"
#include "connection.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace redis {

namespace detail {

inline constexpr std::string_view begin_script = R"lua(
local t = redis.call('TIME')
local now = string.format('%d', t[1] * 1000 + math.floor(t[2] / 1000))
local status = redis.call('HGET', KEYS[1], 'status')
local started = 0
if not status or status == 'failed' then
  if not status then
    redis.call('HSET', KEYS[1], 'created_at', now, 'provider_request_id', '', 'requests', 0, 'input_tokens', 0,
               'output_tokens', 0)
  end
  redis.call('HSET', KEYS[1], 'status', 'in_flight', 'provider', ARGV[1], 'model', ARGV[2], 'updated_at', now)
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  started = 1
end
return {started, redis.call('HMGET', KEYS[1], 'status', 'provider', 'model', 'provider_request_id', 'requests',
                            'input_tokens', 'output_tokens', 'created_at', 'updated_at')}
)lua";

inline constexpr std::string_view complete_operation_script = R"lua(
local r = redis.call('HMGET', KEYS[1], 'status', 'provider_request_id')
if r[1] == 'completed' then return r[2] == ARGV[1] and 1 or 0 end
if r[1] ~= 'in_flight' then return 0 end
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'status', 'completed', 'provider_request_id', ARGV[1], 'requests', ARGV[2],
           'input_tokens', ARGV[3], 'output_tokens', ARGV[4],
           'updated_at', string.format('%d', t[1] * 1000 + math.floor(t[2] / 1000)))
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
)lua";

inline constexpr std::string_view fail_operation_script = R"lua(
local status = redis.call('HGET', KEYS[1], 'status')
if status == 'failed' then return 1 end
if status ~= 'in_flight' then return 0 end
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'status', 'failed', 'updated_at', string.format('%d', t[1] * 1000 + math.floor(t[2] / 1000)))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
)lua";

}  // namespace detail

/// Operations in Redis, under `<prefix>op:<id>`, each forgotten `retention` after its last write. Throws
/// redis::RedisError from every operation when the server cannot be reached or answers with an error.
class OperationsTable final : public store::OperationsTable {
 public:
  /// A table on `connection` (which must outlive it) with `options`.
  explicit OperationsTable(Connection& connection, store::OperationsOptions options = {})
      : connection_(connection), options_(options) {}

  [[nodiscard]] store::BeginResult begin(std::string_view id, std::string_view provider,
                                         std::string_view model) override {
    const std::string retention = std::to_string(options_.retention.count());
    const Reply reply =
        connection_.eval("operations begin", {detail::begin_script}, {redis_key(id)}, {provider, model, retention});
    return {reply[0].integer() == 1, read(id, reply[1])};
  }

  [[nodiscard]] bool complete(std::string_view id, std::string_view provider_request_id, const Cost& usage) override {
    const std::string requests = std::to_string(usage.requests);
    const std::string input = std::to_string(usage.input_tokens);
    const std::string output = std::to_string(usage.output_tokens);
    const std::string retention = std::to_string(options_.retention.count());
    return connection_
               .eval("operations complete", {detail::complete_operation_script}, {redis_key(id)},
                     {provider_request_id, requests, input, output, retention})
               .integer() == 1;
  }

  [[nodiscard]] bool fail(std::string_view id) override {
    const std::string retention = std::to_string(options_.retention.count());
    return connection_.eval("operations fail", {detail::fail_operation_script}, {redis_key(id)}, {retention})
               .integer() == 1;
  }

  [[nodiscard]] std::optional<store::Operation> find(std::string_view id) override {
    const Reply fields = connection_.command(
        "operations find", {"HMGET", redis_key(id), "status", "provider", "model", "provider_request_id", "requests",
                            "input_tokens", "output_tokens", "created_at", "updated_at"});
    if (fields[0].is_nil()) return std::nullopt;
    return read(id, fields);
  }

 private:
  [[nodiscard]] std::string redis_key(std::string_view id) const {
    return connection_.options().prefix + "op:" + std::string(id);
  }

  /// The operation `id` from the fields status, provider, model, provider_request_id, requests,
  /// input_tokens, output_tokens, created_at, updated_at (milliseconds since the epoch).
  static store::Operation read(std::string_view id, const Reply& fields) {
    const auto time = [](long long ms) { return std::chrono::system_clock::time_point(std::chrono::milliseconds(ms)); };
    store::Operation operation;
    operation.id = std::string(id);
    const std::string status = fields[0].text();
    operation.status = status == "completed" ? store::OperationStatus::completed
                       : status == "failed"  ? store::OperationStatus::failed
                                             : store::OperationStatus::in_flight;
    operation.provider = fields[1].text();
    operation.model = fields[2].text();
    operation.provider_request_id = fields[3].text();
    // A record written before `requests` was stored has none: it was one request.
    operation.usage = {fields[4].is_nil() ? 1 : fields[4].number(), fields[5].number(), fields[6].number()};
    operation.created_at = time(fields[7].number());
    operation.updated_at = time(fields[8].number());
    return operation;
  }

  Connection& connection_;
  store::OperationsOptions options_;
};

}  // namespace redis
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_REDIS_OPERATIONS_HPP
