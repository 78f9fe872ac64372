#ifndef LLMRETRY_STORE_JOB_QUEUE_HPP
#define LLMRETRY_STORE_JOB_QUEUE_HPP

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../detail/uuid.hpp"
#include "../version.hpp"
#include "clock.hpp"

/// A job queue shared by workers: ready jobs by priority, delayed jobs until their not_before, taken jobs
/// under a visibility timeout, and a dead letter. One interface, an in-memory implementation here and a
/// Redis one in <llmretry/redis/job_queue.hpp>.

LLMRETRY_BEGIN_NAMESPACE
namespace store {

/// A job to enqueue.
struct NewJob {
  std::string id;                      ///< unique in the queue (dead letter included), 1 to 255 bytes
  std::string payload;                 ///< anything: the queue never reads it
  int priority = 0;                    ///< higher first; first in, first out within a priority
  std::chrono::milliseconds delay{0};  ///< ready after this wait (delayed until then)
};

/// A job handed out by take(), or listed in the dead letter.
struct Job {
  std::string id;
  std::string payload;
  int priority = 0;
  int attempts = 0;   ///< times it was taken, this time included
  std::string token;  ///< the holder of this take: ack, retry_later, bury and extend need it (empty if dead)
};

/// The result a finished job left (JobQueue::finish): its answer, or the record of its failure.
struct JobResult {
  std::string id;
  std::string value;
  bool failed = false;  ///< the job ended without the answer it was for
};

/// A page of results (JobQueue::results).
struct ResultPage {
  std::vector<JobResult> results;  ///< in the order they were kept
  std::string cursor;              ///< where the next page starts; empty: this page is the last
};

/// How many jobs each part of the queue holds, and how many results it keeps.
struct QueueCounts {
  std::size_t ready = 0;
  std::size_t delayed = 0;
  std::size_t taken = 0;
  std::size_t dead = 0;
  std::size_t done = 0;    ///< results kept of jobs finished with their answer
  std::size_t failed = 0;  ///< results kept of jobs finished failed
};

/// How jobs are handed out.
struct JobQueueOptions {
  /// A taken job that is neither acked, retried, buried nor extended within this time (its worker died)
  /// is ready again.
  std::chrono::milliseconds visibility_timeout = std::chrono::minutes(5);
  /// A job is taken at most this many times: one that has used them up goes to the dead letter instead of
  /// being taken again. At least 1.
  int max_attempts = 10;
  /// The results of finished jobs are forgotten together, this long after the last one was kept.
  std::chrono::milliseconds result_retention = std::chrono::hours(24 * 7);
};

/// Throws std::invalid_argument unless `id` has 1 to 255 bytes.
inline void check_job_id(std::string_view id) {
  if (id.empty() || id.size() > 255)
    throw std::invalid_argument("job id of " + std::to_string(id.size()) + " bytes: it must have 1 to 255");
}

/// Throws std::invalid_argument unless `options` are valid (max_attempts at least 1, a positive visibility
/// timeout).
inline void check_job_queue_options(const JobQueueOptions& options) {
  if (options.max_attempts < 1) throw std::invalid_argument("JobQueueOptions::max_attempts must be at least 1");
  if (options.visibility_timeout <= std::chrono::milliseconds::zero())
    throw std::invalid_argument("JobQueueOptions::visibility_timeout must be positive");
  if (options.result_retention <= std::chrono::milliseconds::zero())
    throw std::invalid_argument("JobQueueOptions::result_retention must be positive");
}

/// A job queue. Every call is atomic: a job is handed to one taker at a time, and due delayed jobs are
/// promoted to ready in the same step that takes. Implementations are safe to use from several threads.
class JobQueue {
 public:
  virtual ~JobQueue() = default;
  JobQueue() = default;
  JobQueue(const JobQueue&) = delete;
  JobQueue& operator=(const JobQueue&) = delete;
  JobQueue(JobQueue&&) = delete;
  JobQueue& operator=(JobQueue&&) = delete;

  /// Adds `job`: ready, or delayed by job.delay. Returns false when a job with that id is in the queue
  /// (dead letter included) or has left a result that is still kept (finish), and nothing changes. Throws
  /// std::invalid_argument for a bad id, and the implementation's errors (such as redis::RedisError).
  [[nodiscard]] virtual bool enqueue(const NewJob& job) = 0;
  /// Takes the ready job of highest priority (oldest first), after promoting the due delayed jobs and the
  /// taken jobs whose visibility timeout passed; a job that used up max_attempts goes to the dead letter
  /// instead. Returns nullopt when no job is ready.
  [[nodiscard]] virtual std::optional<Job> take() = 0;
  /// Removes a job that is done. Returns false when `token` no longer holds it: its visibility timeout
  /// passed and a later take() put it back.
  [[nodiscard]] virtual bool ack(std::string_view id, std::string_view token) = 0;
  /// Removes a job that is done and keeps `result` under its id (its answer; its failure when `failed`), in
  /// one step: a job is never removed without its result, and while the result is kept its id is not
  /// enqueued again. Returns false when `token` no longer holds it, and nothing is kept.
  [[nodiscard]] virtual bool finish(std::string_view id, std::string_view token, std::string_view result,
                                    bool failed) = 0;
  /// Returns the result kept for `id`, or nullopt when there is none (never finished, or forgotten).
  [[nodiscard]] virtual std::optional<JobResult> result(std::string_view id) = 0;
  /// Returns up to `count` (at least 1) results from `cursor` (empty: the first), in the order they were
  /// kept: paging until the cursor comes back empty lists every result kept before the first page
  /// exactly once, without holding them all at once.
  [[nodiscard]] virtual ResultPage results(std::string_view cursor, std::size_t count) = 0;
  /// Puts a job whose attempt failed back, delayed by `wait` (the retry decision's wait), not ready.
  /// Returns false when `token` no longer holds it.
  [[nodiscard]] virtual bool retry_later(std::string_view id, std::string_view token,
                                         std::chrono::milliseconds wait) = 0;
  /// Moves a job that must not be retried to the dead letter. Returns false when `token` no longer holds it.
  [[nodiscard]] virtual bool bury(std::string_view id, std::string_view token) = 0;
  /// Starts the visibility timeout of a taken job again. Returns false when `token` no longer holds it.
  [[nodiscard]] virtual bool extend(std::string_view id, std::string_view token) = 0;
  /// Makes every taken job ready again now, as if its visibility timeout had passed: their holders'
  /// tokens no longer hold them. For a queue's only user starting after the one before it died (it need
  /// not wait the visibility timeout); never while another worker may hold a job. Returns how many.
  virtual std::size_t reclaim() = 0;
  /// Returns how many jobs are ready, delayed, taken and dead (due jobs not yet promoted count as delayed
  /// or taken), and how many results are kept.
  [[nodiscard]] virtual QueueCounts counts() = 0;
  /// Returns up to `limit` jobs of the dead letter, oldest first.
  [[nodiscard]] virtual std::vector<Job> dead_letters(std::size_t limit) = 0;
};

/// The embedded JobQueue: one process, nothing to start. Time comes from `clock`.
class MemoryJobQueue final : public JobQueue {
 public:
  /// A queue with `options` (checked by check_job_queue_options, which throws), reading time from `clock`
  /// (the system clock when empty).
  explicit MemoryJobQueue(JobQueueOptions options = {}, StoreClock clock = {})
      : options_(options), clock_(std::move(clock)) {
    check_job_queue_options(options_);
  }

  [[nodiscard]] bool enqueue(const NewJob& job) override {
    check_job_id(job.id);
    const auto now = now_on(clock_);
    const std::lock_guard<std::mutex> lock(mutex_);
    forget_results(now);
    if (jobs_.count(job.id) != 0 || results_.count(job.id) != 0) return false;
    Record& record = jobs_[job.id];
    record.job = Job{job.id, job.payload, job.priority, 0, {}};
    if (job.delay > std::chrono::milliseconds::zero()) {
      schedule(record, State::delayed, now + job.delay);
    } else {
      make_ready(record);
    }
    return true;
  }

  [[nodiscard]] std::optional<Job> take() override {
    const auto now = now_on(clock_);
    const std::lock_guard<std::mutex> lock(mutex_);
    promote(now);
    while (!ready_.empty()) {
      Record& record = jobs_.at(ready_.begin()->second);
      ready_.erase(ready_.begin());
      if (record.job.attempts >= options_.max_attempts) {
        bury(record, now);
        continue;
      }
      ++record.job.attempts;
      record.job.token = detail::random_uuid();
      schedule(record, State::taken, now + options_.visibility_timeout);
      return record.job;
    }
    return std::nullopt;
  }

  [[nodiscard]] bool ack(std::string_view id, std::string_view token) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    Record* record = held(id, token);
    if (record == nullptr) return false;
    unschedule(*record);
    jobs_.erase(std::string(id));
    return true;
  }

  [[nodiscard]] bool finish(std::string_view id, std::string_view token, std::string_view result,
                            bool failed) override {
    const auto now = now_on(clock_);
    const std::lock_guard<std::mutex> lock(mutex_);
    Record* record = held(id, token);
    if (record == nullptr) return false;
    forget_results(now);
    unschedule(*record);
    jobs_.erase(std::string(id));
    const std::string key(id);
    result_order_.emplace(result_sequence_, key);
    results_[key] = {JobResult{key, std::string(result), failed}, result_sequence_++};
    ++(failed ? failed_ : done_);
    results_until_ = now + options_.result_retention;
    return true;
  }

  [[nodiscard]] std::optional<JobResult> result(std::string_view id) override {
    const auto now = now_on(clock_);
    const std::lock_guard<std::mutex> lock(mutex_);
    forget_results(now);
    const auto found = results_.find(std::string(id));
    if (found == results_.end()) return std::nullopt;
    return found->second.result;
  }

  [[nodiscard]] ResultPage results(std::string_view cursor, std::size_t count) override {
    const auto now = now_on(clock_);
    const std::lock_guard<std::mutex> lock(mutex_);
    forget_results(now);
    ResultPage page;
    std::uint64_t from = 0;
    if (!cursor.empty()) from = std::stoull(std::string(cursor));
    auto it = result_order_.lower_bound(from);
    for (; it != result_order_.end() && page.results.size() < std::max<std::size_t>(count, 1); ++it)
      page.results.push_back(results_.at(it->second).result);
    if (it != result_order_.end()) page.cursor = std::to_string(it->first);
    return page;
  }

  [[nodiscard]] bool retry_later(std::string_view id, std::string_view token, std::chrono::milliseconds wait) override {
    const auto now = now_on(clock_);
    const std::lock_guard<std::mutex> lock(mutex_);
    Record* record = held(id, token);
    if (record == nullptr) return false;
    unschedule(*record);
    record->job.token.clear();
    schedule(*record, State::delayed, now + wait);
    return true;
  }

  [[nodiscard]] bool bury(std::string_view id, std::string_view token) override {
    const auto now = now_on(clock_);
    const std::lock_guard<std::mutex> lock(mutex_);
    Record* record = held(id, token);
    if (record == nullptr) return false;
    unschedule(*record);
    bury(*record, now);
    return true;
  }

  [[nodiscard]] bool extend(std::string_view id, std::string_view token) override {
    const auto now = now_on(clock_);
    const std::lock_guard<std::mutex> lock(mutex_);
    Record* record = held(id, token);
    if (record == nullptr) return false;
    unschedule(*record);
    schedule(*record, State::taken, now + options_.visibility_timeout);
    return true;
  }

  std::size_t reclaim() override {
    const std::lock_guard<std::mutex> lock(mutex_);
    const std::size_t count = taken_.size();
    promote(taken_, TimePoint::max());
    return count;
  }

  [[nodiscard]] QueueCounts counts() override {
    const auto now = now_on(clock_);
    const std::lock_guard<std::mutex> lock(mutex_);
    forget_results(now);
    return {ready_.size(), delayed_.size(), taken_.size(), dead_.size(), done_, failed_};
  }

  [[nodiscard]] std::vector<Job> dead_letters(std::size_t limit) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    std::vector<Job> jobs;
    for (auto it = dead_.begin(); it != dead_.end() && jobs.size() < limit; ++it)
      jobs.push_back(jobs_.at(it->second).job);
    return jobs;
  }

 private:
  using TimePoint = std::chrono::system_clock::time_point;
  enum class State { ready, delayed, taken, dead };
  struct Record {
    Job job;
    State state = State::ready;
    std::multimap<TimePoint, std::string>::iterator when;  ///< its entry in delayed_ or taken_
  };

  /// The taken job `id` when `token` holds it and its timeout has not been promoted away; else null.
  Record* held(std::string_view id, std::string_view token) {
    const auto found = jobs_.find(std::string(id));
    if (found == jobs_.end() || found->second.state != State::taken || found->second.job.token != token) return nullptr;
    return &found->second;
  }
  void make_ready(Record& record) {
    record.state = State::ready;
    ready_.emplace(std::make_pair(-static_cast<std::int64_t>(record.job.priority), sequence_++), record.job.id);
  }
  void schedule(Record& record, State state, TimePoint when) {
    record.state = state;
    record.when = (state == State::delayed ? delayed_ : taken_).emplace(when, record.job.id);
  }
  void unschedule(Record& record) {
    if (record.state == State::delayed) delayed_.erase(record.when);
    if (record.state == State::taken) taken_.erase(record.when);
  }
  void bury(Record& record, TimePoint now) {
    record.state = State::dead;
    record.job.token.clear();
    dead_.emplace(now, record.job.id);
  }
  /// Moves the due delayed jobs and the taken jobs whose timeout passed to ready; a taken job also loses its
  /// token, so that its late worker can no longer ack it.
  void promote(TimePoint now) {
    promote(delayed_, now);
    promote(taken_, now);
  }
  /// Moves the jobs of `timed` (delayed_ or taken_) due at `now` to ready, without their tokens.
  void promote(std::multimap<TimePoint, std::string>& timed, TimePoint now) {
    while (!timed.empty() && timed.begin()->first <= now) {
      Record& record = jobs_.at(timed.begin()->second);
      timed.erase(timed.begin());
      record.job.token.clear();
      make_ready(record);
    }
  }

  /// A kept result and its place in the order of results.
  struct KeptResult {
    JobResult result;
    std::uint64_t sequence = 0;
  };

  /// Forgets every result once the retention after the last one kept has passed.
  void forget_results(TimePoint now) {
    if (results_.empty() || now < results_until_) return;
    results_.clear();
    result_order_.clear();
    done_ = failed_ = 0;
  }

  JobQueueOptions options_;
  StoreClock clock_;
  std::mutex mutex_;
  std::unordered_map<std::string, Record> jobs_;
  std::unordered_map<std::string, KeptResult> results_;
  std::map<std::uint64_t, std::string> result_order_;  ///< sequence -> id, the order results were kept in
  std::uint64_t result_sequence_ = 1;
  std::size_t done_ = 0;
  std::size_t failed_ = 0;
  TimePoint results_until_{};
  std::map<std::pair<std::int64_t, std::uint64_t>, std::string> ready_;  ///< (-priority, sequence) -> id
  std::multimap<TimePoint, std::string> delayed_;                        ///< not_before -> id
  std::multimap<TimePoint, std::string> taken_;                          ///< visibility deadline -> id
  std::multimap<TimePoint, std::string> dead_;                           ///< buried at -> id
  std::uint64_t sequence_ = 0;
};

}  // namespace store
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_STORE_JOB_QUEUE_HPP
