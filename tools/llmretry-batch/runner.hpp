// The workers of llmretry-batch: each job taken from the queue is one attempt of its request's CallEngine,
// paced by one Deployment; the wait after a failure puts the job back in the queue with the wait as its
// not_before.
#ifndef LLMRETRY_BATCH_RUNNER_HPP
#define LLMRETRY_BATCH_RUNNER_HPP

#include <llmretry/admission/deployment.hpp>
#include <llmretry/attempt.hpp>
#include <llmretry/curl/curl.hpp>
#include <llmretry/decision.hpp>
#include <llmretry/engine.hpp>
#include <llmretry/errors.hpp>
#include <llmretry/json/error_fields.hpp>
#include <llmretry/json/usage.hpp>
#include <llmretry/policy.hpp>
#include <llmretry/random.hpp>
#include <llmretry/retry.hpp>
#include <llmretry/store/job_queue.hpp>
#include <llmretry/store/operations.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "answers.hpp"
#include "input.hpp"
#include "lines.hpp"
#include "report.hpp"

namespace batch {

/// The job queue and operations table one worker uses (its own Redis connection, or the shared
/// in-memory stores).
class Stores {
 public:
  virtual ~Stores() = default;
  Stores() = default;
  Stores(const Stores&) = delete;
  Stores& operator=(const Stores&) = delete;
  Stores(Stores&&) = delete;
  Stores& operator=(Stores&&) = delete;

  virtual llmretry::store::JobQueue& queue() = 0;
  virtual llmretry::store::OperationsTable& operations() = 0;
};

/// Opens the stores of one worker. Throws what the stores throw (such as redis::RedisError).
using OpenStores = std::function<std::unique_ptr<Stores>()>;

/// How the requests are sent.
struct Settings {
  int workers = 8;  ///< requests in flight at most
  llmretry::RetryPolicy policy = llmretry::RetryPolicy::batch();
  std::chrono::milliseconds attempt_timeout{60'000};
  std::string api_key;     ///< sent as "Authorization: Bearer ..."; empty: no Authorization header
  std::string provider;    ///< recorded in the operations table (the base URL)
  std::string batch_name;  ///< the prefix of this batch's records in the operations table
};

/// The code and stop reason of an errors-file line whose request completed in an earlier run (the operations
/// table says so) without its answer in the output file.
inline constexpr const char* already_completed = "already_completed";

/// Sends every pending request until each has a line in the output or errors file. Each request has its
/// CallEngine, admitted by the Deployment; each job taken from the queue carries out the engine's next
/// steps: the wait for capacity (slept by the worker, and counted toward the policy's max_total_wait), then
/// the attempt, sent with the request's Idempotency-Key; a wait after a failure puts the job back in the
/// queue delayed by it, never slept by the worker.
/// The order of writes keeps "no completed request is sent again" true across a crash: the line is durable
/// before the operation is marked completed and the job acknowledged.
class Runner {
 public:
  /// `pending`: the requests without a line yet. Every reference must outlive the runner.
  Runner(std::vector<Request> pending, AnswerFile& output, AnswerFile& errors, llmretry::Deployment& deployment,
         OpenStores open_stores, Settings settings, Stats& stats)
      : lines_(pending.size()),
        output_(output),
        errors_(errors),
        deployment_(deployment),
        open_stores_(std::move(open_stores)),
        settings_(std::move(settings)),
        stats_(stats),
        remaining_(static_cast<std::int64_t>(pending.size())) {
    curl_options_.timeout = settings_.attempt_timeout;
    curl_options_.read_error = [](std::string_view body) { return llmretry::json::error_fields(body); };
    curl_options_.attempt_header.clear();  // the attempt number is the request's, sent by attempt()
    for (std::size_t i = 0; i < pending.size(); ++i) {
      index_.emplace(pending[i].key, i);
      lines_[i].request = std::move(pending[i]);
      lines_[i].engine.emplace(settings_.policy, deployment_.pace(lines_[i].request.estimate), call_options_);
      lines_[i].engine->wake_with(lines_[i].waits.waker());
    }
  }

  /// Makes the jobs an earlier run held ready again (JobQueue::reclaim: the caller holds the output file's
  /// lock, which excludes the other runs of this host only), enqueues the pending requests and runs the
  /// workers until every one has its line. Throws the first error of a store or a file (the run stops; what
  /// is written stays valid for a rerun).
  void run() {
    {
      const auto stores = open_stores_();
      // This run holds the output file's lock, so no other run on this host uses its queue (flock does not
      // reach other hosts: a batch runs from one host): a job taken there was taken by a run that stopped,
      // and is ready again now rather than after the visibility timeout.
      stats_.reclaimed += static_cast<std::int64_t>(stores->queue().reclaim());
      for (const Line& line : lines_)
        (void)stores->queue().enqueue({line.request.key, {}, 0, std::chrono::milliseconds::zero()});
    }
    std::vector<std::thread> workers;
    for (int i = 0; i < settings_.workers; ++i) workers.emplace_back([this] { work(); });
    for (auto& worker : workers) worker.join();
    if (error_) std::rethrow_exception(error_);
  }

  /// Returns the requests still without a line.
  [[nodiscard]] std::int64_t remaining() const noexcept { return remaining_; }

 private:
  using Engine = llmretry::CallEngine<llmretry::Deployment::Pacing>;
  static constexpr llmretry::RealSleep real_sleep{};

  /// One request and its engine. A job is handed to one worker at a time; the mutex also covers a job
  /// handed out again after its visibility timeout while its first worker still holds it.
  struct Line {
    Request request;
    llmretry::BlockingWaits<const llmretry::RealSleep> waits{real_sleep};  ///< outlives the engine
    std::optional<Engine> engine;
    bool started = false;       ///< its engine has given its first step
    bool begun = false;         ///< the operation was begun in this run
    bool may_have_run = false;  ///< an attempt (of this run, or of one before) may have been processed
    bool done = false;          ///< its line is written
    std::mutex mutex;
  };

  void work() {
    try {
      const auto stores = open_stores_();
      llmretry::ThreadRng rng;
      while (remaining_ > 0 && !stopped_) {
        auto job = stores->queue().take();
        if (!job) {
          check_jobs(*stores);
          std::this_thread::sleep_for(std::chrono::milliseconds{10});
          continue;
        }
        const auto found = index_.find(job->id);
        if (found == index_.end()) {  // left in the queue by an earlier run, and answered since
          (void)stores->queue().ack(job->id, job->token);
          continue;
        }
        Line& line = lines_[found->second];
        const std::lock_guard<std::mutex> lock(line.mutex);
        if (line.done) {
          (void)stores->queue().ack(job->id, job->token);
          continue;
        }
        if (begin(line, *job, *stores)) step(line, *job, *stores, rng);
      }
    } catch (...) {
      const std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
      stopped_ = true;
    }
  }

  /// Throws when the queue holds fewer jobs (ready, delayed or taken) than lines remain: every line without
  /// its line written has a job until then, so jobs were lost and no worker would ever take them.
  void check_jobs(Stores& stores) const {
    const llmretry::store::QueueCounts counts = stores.queue().counts();  // before remaining_, which only falls
    const auto jobs = static_cast<std::int64_t>(counts.ready + counts.delayed + counts.taken);
    const std::int64_t remaining = remaining_;
    if (jobs < remaining)
      throw std::runtime_error("the job queue holds " + std::to_string(jobs) + " jobs for " +
                               std::to_string(remaining) +
                               " lines without an answer: jobs were lost (was Redis flushed, or restarted without "
                               "its data?)");
  }

  /// Records the operation before its first attempt of this run. Returns false when it completed in an
  /// earlier run whose answer is not in the output file: that is reported in the errors file, not sent.
  bool begin(Line& line, const llmretry::store::Job& job, Stores& stores) {
    if (line.begun) return true;
    const Request& request = line.request;
    const auto result =
        stores.operations().begin(settings_.batch_name + request.key, settings_.provider, request.model);
    line.begun = true;
    if (result.started) return true;
    if (result.operation.status == llmretry::store::OperationStatus::in_flight) {
      ++stats_.resumed_in_flight;  // an earlier run may have sent it: the same Idempotency-Key goes again
      line.may_have_run = true;
      return true;
    }
    errors_.append(error_line(request, already_completed,
                              "completed in an earlier run (provider request id \"" +
                                  result.operation.provider_request_id + "\"); its answer is not in the output file",
                              already_completed, 0, nullptr));
    finish(line, job, stores, false);
    stats_.gave_up(already_completed);
    return false;
  }

  /// Carries out the next step of `line`'s engine: the attempt (and what follows it; a wait after a
  /// failure puts the job back in the queue). A wait for capacity or a slot is waited here, holding the
  /// job: the reservation is for that instant, and the workers bound how many are held at once. Writes the
  /// line once the call is done.
  void step(Line& line, const llmretry::store::Job& job, Stores& stores, llmretry::ThreadRng& rng) {
    Engine& engine = *line.engine;
    const llmretry::Step next =
        line.waits.wait_out(engine, std::exchange(line.started, true) ? engine.resume() : engine.start());
    if (next.kind == llmretry::Step::Kind::done) return give_up(line, job, stores);
    ++stats_.requests;
    stats_.tokens_reserved += line.request.estimate.tokens();
    std::optional<llmretry::curl::Response> response;
    std::optional<llmretry::curl::Response> error_response;
    llmretry::Failure failure;
    try {
      response = send(line.request, engine.attempt().number);
    } catch (const std::exception& error) {
      failure = llmretry::failure_of(error).value_or(llmretry::Failure{});
      if (const auto* answer = llmretry::curl::response_of(error)) error_response = *answer;
    }
    if (response) {
      (void)engine.succeeded(*response);
      return succeed(line, job, stores, *response);
    }
    if (failure.kind == llmretry::FailureKind::rate_limited) ++stats_.rate_limited;
    if (failure.sent == llmretry::Sent::maybe_processed) line.may_have_run = true;
    const llmretry::Step after = engine.failed(failure, rng);
    if (after.kind == llmretry::Step::Kind::done)
      return give_up(line, job, stores, error_response ? &*error_response : nullptr);
    stats_.retried(llmretry::to_string(failure.kind));
    (void)stores.queue().retry_later(job.id, job.token, after.wait);
  }

  /// Sends `request` once, as attempt `number` of it.
  llmretry::curl::Response send(const Request& request, int number) const {
    llmretry::curl::Request http{"POST", request.url, {{"Content-Type", "application/json"}}, request.body};
    if (!settings_.api_key.empty()) http.headers.emplace_back("Authorization", "Bearer " + settings_.api_key);
    http.headers.emplace_back("X-Attempt", std::to_string(number));
    llmretry::curl::Call call(std::move(http), curl_options_, request.key);
    return call();
  }

  /// Writes the answer, then marks the operation completed and the job done.
  void succeed(Line& line, const llmretry::store::Job& job, Stores& stores, const llmretry::curl::Response& response) {
    output_.append(answer_line(line.request, response));
    const auto usage = llmretry::json::usage_of(response.body).value_or(llmretry::Cost{1, 0, 0});
    stats_.tokens_used += usage.tokens();
    (void)stores.operations().complete(settings_.batch_name + line.request.key,
                                       std::string(response.header("x-request-id").value_or("")), usage);
    finish(line, job, stores, true);
  }

  /// Writes the errors line of a request whose engine gave up (`response`: the last attempt's error
  /// answer, if any); an operation that certainly did not run is marked failed, one of which any attempt
  /// may have run (not only the last) stays in flight.
  void give_up(Line& line, const llmretry::store::Job& job, Stores& stores,
               const llmretry::curl::Response* response = nullptr) {
    const llmretry::GiveUp& gave_up = *line.engine->gave_up();
    errors_.append(failure_line(line.request, gave_up.failure, gave_up.reason, gave_up.attempts, response));
    if (!line.may_have_run && gave_up.failure.sent != llmretry::Sent::maybe_processed)
      (void)stores.operations().fail(settings_.batch_name + line.request.key);
    stats_.gave_up(llmretry::to_string(gave_up.reason));
    finish(line, job, stores, false);
  }

  /// Marks `line` done (its line is written) and removes its job.
  void finish(Line& line, const llmretry::store::Job& job, Stores& stores, bool answered) {
    line.done = true;
    ++(answered ? stats_.answered : stats_.failed);
    --remaining_;
    (void)stores.queue().ack(job.id, job.token);
  }

  std::vector<Line> lines_;
  std::unordered_map<std::string, std::size_t> index_;  ///< Idempotency-Key (the job id) -> line
  AnswerFile& output_;
  AnswerFile& errors_;
  llmretry::Deployment& deployment_;
  OpenStores open_stores_;
  Settings settings_;
  const llmretry::CallOptions call_options_;  ///< every request's: no deadline, safe to repeat (an Idempotency-Key)
  Stats& stats_;
  llmretry::curl::Options curl_options_;
  std::atomic<std::int64_t> remaining_;
  std::atomic<bool> stopped_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

}  // namespace batch

#endif  // LLMRETRY_BATCH_RUNNER_HPP
