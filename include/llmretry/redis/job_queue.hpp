#ifndef LLMRETRY_REDIS_JOB_QUEUE_HPP
#define LLMRETRY_REDIS_JOB_QUEUE_HPP

/// The Redis JobQueue: sorted sets for ready (by priority, then order), delayed (by not_before), taken (by
/// visibility deadline) and dead jobs, a hash per job, and every operation one call of one Lua script, timed
/// by the server's clock.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../detail/uuid.hpp"
#include "../store/job_queue.hpp"
#include "../version.hpp"
#include "connection.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace redis {

namespace detail {

// KEYS: ready, delayed, taken, dead, sequence, result (id -> value), results (id by the order kept), tally
// (done, failed, sequence). ARGV: operation, job key prefix, then the operation's own.
inline constexpr std::string_view queue_script = R"lua(
local ready_key, delayed_key, taken_key, dead_key, sequence_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local result_key, results_key, tally_key = KEYS[6], KEYS[7], KEYS[8]
local operation, prefix = ARGV[1], ARGV[2]
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)

local function make_ready(id)
  local member = string.format('%016d', redis.call('INCR', sequence_key)) .. id
  redis.call('ZADD', ready_key, -tonumber(redis.call('HGET', prefix .. id, 'priority')), member)
  redis.call('HSET', prefix .. id, 'state', 'ready', 'token', '')
end
local function bury(id)
  redis.call('ZADD', dead_key, now, id)
  redis.call('HSET', prefix .. id, 'state', 'dead', 'token', '')
end
local function held(id, token)
  local r = redis.call('HMGET', prefix .. id, 'state', 'token')
  return r[1] == 'taken' and r[2] == token
end
local function promote(from)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', from, '-inf', now, 'LIMIT', 0, 1000)) do
    redis.call('ZREM', from, id)
    make_ready(id)
  end
end

if operation == 'enqueue' then
  local id, delay = ARGV[3], tonumber(ARGV[6])
  if redis.call('EXISTS', prefix .. id) == 1 or redis.call('HEXISTS', result_key, id) == 1 then return 0 end
  redis.call('HSET', prefix .. id, 'payload', ARGV[4], 'priority', ARGV[5], 'attempts', 0)
  if delay > 0 then
    redis.call('ZADD', delayed_key, now + delay, id)
    redis.call('HSET', prefix .. id, 'state', 'delayed')
  else
    make_ready(id)
  end
  return 1
elseif operation == 'take' then
  local token, visibility, max_attempts = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
  promote(delayed_key)
  promote(taken_key)
  while true do
    local popped = redis.call('ZPOPMIN', ready_key)
    if #popped == 0 then return false end
    local id = string.sub(popped[1], 17)
    local attempts = tonumber(redis.call('HGET', prefix .. id, 'attempts'))
    if attempts >= max_attempts then
      bury(id)
    else
      redis.call('HSET', prefix .. id, 'attempts', attempts + 1, 'state', 'taken', 'token', token)
      redis.call('ZADD', taken_key, now + visibility, id)
      local job = redis.call('HMGET', prefix .. id, 'payload', 'priority')
      return {id, job[1], tonumber(job[2]), attempts + 1}
    end
  end
elseif operation == 'reclaim' then
  local ids = redis.call('ZRANGE', taken_key, 0, 999)
  for _, id in ipairs(ids) do
    redis.call('ZREM', taken_key, id)
    make_ready(id)
  end
  return #ids
elseif operation == 'counts' then
  local tally = redis.call('HMGET', tally_key, 'done', 'failed')
  return {redis.call('ZCARD', ready_key), redis.call('ZCARD', delayed_key), redis.call('ZCARD', taken_key),
          redis.call('ZCARD', dead_key), tonumber(tally[1] or 0), tonumber(tally[2] or 0)}
elseif operation == 'result' then
  return redis.call('HGET', result_key, ARGV[3])
elseif operation == 'results' then
  local page = redis.call('ZRANGEBYSCORE', results_key, ARGV[3], '+inf', 'WITHSCORES', 'LIMIT', 0,
                          tonumber(ARGV[4]) + 1)
  local ids, scores = {}, {}
  for i = 1, #page, 2 do
    table.insert(ids, page[i])
    table.insert(scores, page[i + 1])
  end
  local next_cursor = ''
  if #ids > tonumber(ARGV[4]) then
    next_cursor = table.remove(scores)
    table.remove(ids)
  end
  local values = {}
  if #ids > 0 then values = redis.call('HMGET', result_key, unpack(ids)) end
  return {next_cursor, ids, values}
elseif operation == 'dead' then
  local jobs = {}
  for _, id in ipairs(redis.call('ZRANGE', dead_key, 0, tonumber(ARGV[3]) - 1)) do
    local job = redis.call('HMGET', prefix .. id, 'payload', 'priority', 'attempts')
    table.insert(jobs, {id, job[1], tonumber(job[2]), tonumber(job[3])})
  end
  return jobs
end

local id, token = ARGV[3], ARGV[4]
if not held(id, token) then return 0 end
if operation == 'extend' then
  redis.call('ZADD', taken_key, now + tonumber(ARGV[5]), id)
  return 1
end
redis.call('ZREM', taken_key, id)
if operation == 'ack' then
  redis.call('DEL', prefix .. id)
elseif operation == 'finish' then
  redis.call('DEL', prefix .. id)
  local failed = ARGV[6] == '1'
  redis.call('HSET', result_key, id, (failed and '1' or '0') .. ARGV[5])
  redis.call('ZADD', results_key, redis.call('HINCRBY', tally_key, 'sequence', 1), id)
  redis.call('HINCRBY', tally_key, failed and 'failed' or 'done', 1)
  for _, key in ipairs({result_key, results_key, tally_key}) do redis.call('PEXPIRE', key, ARGV[7]) end
elseif operation == 'retry_later' then
  redis.call('ZADD', delayed_key, now + tonumber(ARGV[5]), id)
  redis.call('HSET', prefix .. id, 'state', 'delayed', 'token', '')
elseif operation == 'bury' then
  bury(id)
else
  return redis.error_reply('unknown queue operation ' .. operation)
end
return 1
)lua";

}  // namespace detail

/// A job queue in Redis named `name`, under `<prefix>queue:{<name>}:...` (one hash slot). A result kept by
/// finish() costs a hash field (its id and value, with a byte saying whether it failed) and a sorted-set
/// member (its id, by the order kept). Every process that opens the
/// same name on the same server shares it. Throws redis::RedisError from every operation when the server cannot
/// be reached or answers with an error.
class JobQueue final : public store::JobQueue {
 public:
  /// The queue `name` on `connection` (which must outlive it) with `options` (checked by
  /// store::check_job_queue_options, which throws).
  JobQueue(Connection& connection, std::string_view name, store::JobQueueOptions options = {})
      : connection_(connection), options_(options) {
    store::check_job_queue_options(options_);
    const std::string base = connection.options().prefix + "queue:{" + std::string(name) + "}:";
    keys_ = {base + "ready",    base + "delayed", base + "taken",   base + "dead",
             base + "sequence", base + "result",  base + "results", base + "tally"};
    job_prefix_ = base + "job:";
  }

  [[nodiscard]] bool enqueue(const store::NewJob& job) override {
    store::check_job_id(job.id);
    const std::string priority = std::to_string(job.priority);
    const std::string delay = std::to_string(job.delay.count());
    return run("queue enqueue", {"enqueue", job_prefix_, job.id, job.payload, priority, delay}).integer() == 1;
  }

  [[nodiscard]] std::optional<store::Job> take() override {
    const std::string token = llmretry::detail::random_uuid();
    const std::string visibility = std::to_string(options_.visibility_timeout.count());
    const std::string max_attempts = std::to_string(options_.max_attempts);
    const Reply reply = run("queue take", {"take", job_prefix_, token, visibility, max_attempts});
    if (reply.is_nil()) return std::nullopt;
    store::Job job = read(reply);
    job.token = token;
    return job;
  }

  [[nodiscard]] bool ack(std::string_view id, std::string_view token) override {
    return run("queue ack", {"ack", job_prefix_, id, token}).integer() == 1;
  }

  [[nodiscard]] bool finish(std::string_view id, std::string_view token, std::string_view result,
                            bool failed) override {
    const std::string retention = std::to_string(options_.result_retention.count());
    return run("queue finish", {"finish", job_prefix_, id, token, result, failed ? "1" : "0", retention}).integer() ==
           1;
  }

  [[nodiscard]] std::optional<store::JobResult> result(std::string_view id) override {
    const Reply reply = run("queue result", {"result", job_prefix_, id});
    if (reply.is_nil()) return std::nullopt;
    return read_result(id, reply.text());
  }

  [[nodiscard]] store::ResultPage results(std::string_view cursor, std::size_t count) override {
    const std::string from = cursor.empty() ? "-inf" : std::string(cursor);
    const std::string limit = std::to_string(count > 0 ? count : 1);
    const Reply reply = run("queue results", {"results", job_prefix_, from, limit});
    store::ResultPage page;
    page.cursor = reply[0].text();
    for (std::size_t i = 0; i < reply[1].size(); ++i)
      if (!reply[2][i].is_nil()) page.results.push_back(read_result(reply[1][i].text(), reply[2][i].text()));
    return page;
  }

  [[nodiscard]] bool retry_later(std::string_view id, std::string_view token, std::chrono::milliseconds wait) override {
    const std::string milliseconds = std::to_string(wait.count());
    return run("queue retry_later", {"retry_later", job_prefix_, id, token, milliseconds}).integer() == 1;
  }

  [[nodiscard]] bool bury(std::string_view id, std::string_view token) override {
    return run("queue bury", {"bury", job_prefix_, id, token}).integer() == 1;
  }

  [[nodiscard]] bool extend(std::string_view id, std::string_view token) override {
    const std::string visibility = std::to_string(options_.visibility_timeout.count());
    return run("queue extend", {"extend", job_prefix_, id, token, visibility}).integer() == 1;
  }

  std::size_t reclaim() override {
    // Each script reclaims at most 1,000 jobs, so that the server is never blocked long by one.
    std::size_t reclaimed = 0;
    while (const long long batch = run("queue reclaim", {"reclaim", job_prefix_}).integer())
      reclaimed += static_cast<std::size_t>(batch);
    return reclaimed;
  }

  [[nodiscard]] store::QueueCounts counts() override {
    const Reply reply = run("queue counts", {"counts", job_prefix_});
    const auto count = [&](std::size_t i) { return static_cast<std::size_t>(reply[i].integer()); };
    return {count(0), count(1), count(2), count(3), count(4), count(5)};
  }

  [[nodiscard]] std::vector<store::Job> dead_letters(std::size_t limit) override {
    std::vector<store::Job> jobs;
    if (limit == 0) return jobs;
    const std::string count = std::to_string(limit);
    const Reply reply = run("queue dead_letters", {"dead", job_prefix_, count});
    for (std::size_t i = 0; i < reply.size(); ++i) jobs.push_back(read(reply[i]));
    return jobs;
  }

 private:
  Reply run(const char* operation, const std::vector<std::string_view>& args) {
    return connection_.eval(operation, {detail::queue_script}, {keys_.begin(), keys_.end()}, args);
  }

  /// The job of a reply {id, payload, priority, attempts}.
  static store::Job read(const Reply& reply) {
    return {reply[0].text(),
            reply[1].text(),
            static_cast<int>(reply[2].integer()),
            static_cast<int>(reply[3].integer()),
            {}};
  }

  /// The result of `id` from its stored form: "1" (failed) or "0", then the value.
  static store::JobResult read_result(std::string_view id, const std::string& stored) {
    return {std::string(id), stored.substr(std::min<std::size_t>(1, stored.size())),
            !stored.empty() && stored[0] == '1'};
  }

  Connection& connection_;
  store::JobQueueOptions options_;
  std::vector<std::string> keys_;
  std::string job_prefix_;
};

}  // namespace redis
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_REDIS_JOB_QUEUE_HPP
