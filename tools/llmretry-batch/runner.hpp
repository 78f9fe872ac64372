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
#include <llmretry/guard.hpp>
#include <llmretry/json/error_fields.hpp>
#include <llmretry/json/usage.hpp>
#include <llmretry/metrics/observe.hpp>
#include <llmretry/metrics/observer.hpp>
#include <llmretry/policy.hpp>
#include <llmretry/random.hpp>
#include <llmretry/retry.hpp>
#include <llmretry/store/job_queue.hpp>
#include <llmretry/store/operations.hpp>

#include <algorithm>
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
#include "common/labels.hpp"
#include "common/periodic_thread.hpp"
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

/// Where the line of a request that is done goes: the record of what is done.
class Destination {
 public:
  virtual ~Destination() = default;
  Destination() = default;
  Destination(const Destination&) = delete;
  Destination& operator=(const Destination&) = delete;
  Destination(Destination&&) = delete;
  Destination& operator=(Destination&&) = delete;

  /// Makes `text` the durable record of the request of `job` (its answer when `answered`, else its errors
  /// line), then removes the job from `queue`. Returns false when `job.token` no longer holds the job and
  /// nothing is recorded (its new holder records it). Throws FileError or the queue's errors.
  virtual bool record(llmretry::store::JobQueue& queue, const llmretry::store::Job& job, const std::string& text,
                      bool answered) = 0;
};

/// The output and errors files: a line is appended and synced, then its job acknowledged (a job taken again
/// meanwhile finds its line done).
class FileDestination final : public Destination {
 public:
  /// Both files must outlive it.
  FileDestination(AnswerFile& output, AnswerFile& errors) : output_(output), errors_(errors) {}
  /// A failed acknowledgement is not an error: the line is durable, and the job, taken again once its
  /// visibility timeout passes, finds its line done and is acknowledged then.
  bool record(llmretry::store::JobQueue& queue, const llmretry::store::Job& job, const std::string& text,
              bool answered) override {
    (answered ? output_ : errors_).append(text);
    try {
      (void)queue.ack(job.id, job.token);
    } catch (const std::exception&) {}
    return true;
  }

 private:
  AnswerFile& output_;
  AnswerFile& errors_;
};

/// The queue itself: the line is kept as the job's result, in the step that removes the job
/// (JobQueue::finish), only while this worker holds it.
class QueueDestination final : public Destination {
 public:
  bool record(llmretry::store::JobQueue& queue, const llmretry::store::Job& job, const std::string& text,
              bool answered) override {
    return queue.finish(job.id, job.token, text, !answered);
  }
};

/// Returns the request of a job that this run did not enqueue itself (a batch submitted beforehand). Throws
/// InputError when its payload is not a request.
using ReadJob = std::function<Request(const llmretry::store::Job&)>;

/// The shared pacing state could not be reached (StopReason::pacing_unavailable): an outage when outages
/// are ridden out (Settings::is_outage).
class PacingUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// How the requests are sent.
struct Settings {
  int workers = 8;                                                ///< requests in flight at most
  llmretry::Priority priority = llmretry::Priority::interactive;  ///< every request's class in admission
  std::string tenant;  ///< whom every request is for in admission (Precedence::tenant); empty: nobody named
  llmretry::RetryPolicy policy = llmretry::RetryPolicy::batch();
  std::chrono::milliseconds attempt_timeout{60'000};
  std::string api_key;     ///< sent as "Authorization: Bearer ..."; empty: no Authorization header
  std::string provider;    ///< recorded in the operations table (the base URL)
  std::string batch_name;  ///< the prefix of this batch's records in the operations table
  /// How often the jobs a worker holds have their visibility timeout started again (JobQueue::extend), so
  /// that a live worker never loses them, and a dead one loses them once the timeout passes.
  std::chrono::milliseconds renew_every{30'000};
  /// Empty: the pending requests are the batch (the runner enqueues them, and ends once each has its line).
  /// Else the batch was submitted beforehand: the runner reads each job's request with it and ends once the
  /// queue holds no job (ready, delayed or taken by any worker).
  ReadJob read_job;
  /// With read_job: the lines submitted, to tell lost jobs (jobs and results fewer than the lines).
  std::int64_t submitted = 0;
  /// With read_job: how long a worker waits when no job is ready before it asks again.
  std::chrono::milliseconds idle_wait{10};
  /// Whether an error of a store is an outage to ride out (its server unreachable or slow to answer) rather
  /// than a reason to stop. Empty: every error stops the run.
  std::function<bool(const std::exception&)> is_outage;
  /// How long a worker rides out an outage, from the first failed operation of a run of failures, trying
  /// again after 100 ms, then twice as long each time up to 2 s, before the run stops with the last error.
  std::chrono::milliseconds outage_limit{30'000};
  /// Told what the requests do (it must outlive the runner; null: nobody): each call of a request's engine
  /// through metrics::observe (provider "openai", model the body's, the first 100 models named then
  /// "other"; tokens reserved and used, retries, 429s, how the call ended), and the queue of requests not
  /// yet sent (priority, task type of the url): a request enters it when the runner makes its line (at the
  /// start of the run, or when a worker takes a submitted batch's job) and leaves it when its first attempt
  /// is sent or its line is written without one.
  llmretry::metrics::Observer* observer = nullptr;
  /// Once set (null: never), the run stops sending: a worker takes no more jobs and leaves a wait before an
  /// attempt (for capacity) at once, its job put back in the queue ready; the attempts in flight finish, and
  /// their lines are written. Then run() returns, remaining() saying how many lines are left.
  const std::atomic<bool>* stop_requested = nullptr;
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
  /// `pending`: the requests without a line yet (none when settings.read_job is set). Every reference must
  /// outlive the runner.
  Runner(std::vector<Request> pending, Destination& destination, llmretry::Deployment& deployment,
         OpenStores open_stores, Settings settings, Stats& stats)
      : observer_(settings.observer != nullptr ? *settings.observer : nobody_),
        sleep_{settings.stop_requested},
        destination_(destination),
        deployment_(deployment),
        open_stores_(std::move(open_stores)),
        settings_(std::move(settings)),
        stats_(stats),
        remaining_(static_cast<std::int64_t>(pending.size())) {
    curl_options_.timeout = settings_.attempt_timeout;
    curl_options_.read_error = [](std::string_view body) { return llmretry::json::error_fields(body); };
    curl_options_.attempt_header.clear();  // the attempt number is the request's, sent by attempt()
    for (auto& request : pending) {
      order_.push_back(request.key);
      lines_.emplace(order_.back(), make_line(std::move(request)));
    }
  }

  /// Makes the jobs an earlier run held ready again (JobQueue::reclaim: the caller holds the output file's
  /// lock, which excludes the other runs of this host only), enqueues the pending requests and runs the
  /// workers until every one has its line, or until the run is asked to stop (Settings::stop_requested:
  /// interrupted() says whether that cut it short). Throws the first error of a store or a file (the run
  /// stops; what is written stays valid for a rerun).
  void run() {
    if (!settings_.read_job) {
      const auto stores = open_stores_();
      // This run holds the batch's run lease, so no other run uses its queue: a job taken there was taken
      // by a run that stopped, and is ready again now rather than after the visibility timeout.
      stats_.reclaimed += static_cast<std::int64_t>(stores->queue().reclaim());
      for (const std::string& key : order_) {  // in the input's order
        if (stop_requested()) break;           // the workers stop at once
        (void)stores->queue().enqueue({key, {}, 0, std::chrono::milliseconds::zero()});
      }
    }
    {
      const auto renewer_stores = open_stores_();
      const llmretry_tools::PeriodicThread renewer(settings_.renew_every, [&] { return renew(*renewer_stores); });
      std::vector<std::thread> workers;
      for (int i = 0; i < settings_.workers; ++i) workers.emplace_back([this] { work(); });
      for (auto& worker : workers) worker.join();
    }
    if (error_) std::rethrow_exception(error_);
  }

  /// Returns the requests still without a line.
  [[nodiscard]] std::int64_t remaining() const noexcept { return remaining_; }
  /// Returns true when the run ended because it was asked to stop (Settings::stop_requested) before it was done.
  [[nodiscard]] bool interrupted() const noexcept { return interrupted_; }

 private:
  using Engine =
      llmretry::CallEngine<llmretry::GuardSet<llmretry::metrics::ObservedCall&, llmretry::Deployment::Pacing>>;

  /// Thrown by a wait that a request to stop cut short.
  struct Stopping {};

  /// The sleep of the waits before an attempt: the real one, until `wait` has passed on the steady clock,
  /// looking at Settings::stop_requested every 50 ms at most; throws Stopping once it is set.
  struct StoppableSleep {
    const std::atomic<bool>* stop_requested = nullptr;

    /// Returns true once the run was asked to stop.
    [[nodiscard]] bool requested() const noexcept { return stop_requested != nullptr && *stop_requested; }

    void operator()(std::chrono::milliseconds wait) const {
      constexpr std::chrono::milliseconds slice{50};
      const auto until = std::chrono::steady_clock::now() + wait;
      for (;;) {
        if (requested()) throw Stopping{};
        const auto left = until - std::chrono::steady_clock::now();
        if (left <= std::chrono::steady_clock::duration::zero()) return;
        std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(left, slice));
      }
    }
  };

  /// A request's line not yet recorded: its text, an answer when `answered` (else an errors line).
  struct Unrecorded {
    std::string text;
    bool answered = false;
  };

  /// One request and its engine. A job is handed to one worker at a time; the mutex also covers a job
  /// handed out again after its visibility timeout while its first worker still holds it.
  struct Line {
    explicit Line(const StoppableSleep& sleep) : waits(sleep) {}
    Line(const Line&) = delete;
    Line& operator=(const Line&) = delete;
    Line(Line&&) = delete;
    Line& operator=(Line&&) = delete;
    ~Line() = default;

    Request request;
    llmretry::BlockingWaits<const StoppableSleep> waits;      ///< outlives the engine
    std::optional<llmretry::metrics::ObservedCall> observed;  ///< the engine's first guard; outlives it
    std::optional<Engine> engine;
    std::optional<llmretry::Deployment::time_point>
        queued_since;                      ///< on the pacing's clock; set until it leaves the queue
    bool started = false;                  ///< its engine has given its first step
    bool begun = false;                    ///< the operation was begun in this run
    bool may_have_run = false;             ///< an attempt (of this run, or of one before) may have been processed
    bool done = false;                     ///< its line is written
    std::optional<Unrecorded> unrecorded;  ///< its line, until recorded
    std::mutex mutex;
  };

  /// Returns the line of `request`, its engine ready, in the queue of requests not yet sent.
  std::shared_ptr<Line> make_line(Request request) {
    auto line = std::make_shared<Line>(sleep_);
    line->request = std::move(request);
    start_engine(*line);
    line->queued_since = deployment_.now();
    tell([&] { observer_.queue_entered(queue_of(*line)); });
    return line;
  }

  /// Gives `line` a new engine, its first step not taken yet, observed as a new call.
  void start_engine(Line& line) {
    line.engine.reset();  // before the guard it holds
    line.observed.emplace(observer_, llmretry::metrics::Target{"openai", model_labels_.of(line.request.model)},
                          line.request.estimate, llmretry::json::usage_of);
    line.engine.emplace(
        settings_.policy,
        llmretry::guards(*line.observed, deployment_.pace(line.request.estimate, settings_.priority, settings_.tenant)),
        call_options_);
    line.engine->wake_with(line.waits.waker());
    line.started = false;
  }

  /// Ends the observed call of `line`, which succeeded (counted with status "success").
  static void end_call(Line& line) {
    line.engine.reset();
    line.observed.reset();
  }

  /// Returns the queue `line` waits in before its first attempt: its class and its url's task type.
  llmretry::metrics::Queue queue_of(const Line& line) const {
    return {llmretry::to_string(settings_.priority), line.request.task_type};
  }

  /// Tells the observer that `line` left the queue (its first attempt is sent, or its line is written without
  /// one); nothing when it left already.
  void left_queue(Line& line) {
    if (!line.queued_since) return;
    const auto waited = deployment_.now() - *std::exchange(line.queued_since, std::nullopt);
    tell([&] { observer_.queue_left(queue_of(line), waited); });
  }

  /// Tells the observer, dropping what it throws: reporting never changes what a run does.
  template <class Tell>
  static void tell(const Tell& telling) noexcept {
    try {
      telling();
    } catch (...) {}
  }

  /// Returns the line of `job`: this run's, or (a submitted batch) one made from its payload; null when the
  /// job is not this run's (left in the queue by an earlier run, and answered since).
  std::shared_ptr<Line> line_of(const llmretry::store::Job& job) {
    const std::lock_guard<std::mutex> lock(lines_mutex_);
    const auto found = lines_.find(job.id);
    if (found != lines_.end()) return found->second;
    if (!settings_.read_job) return nullptr;
    Request request = settings_.read_job(job);
    if (request.key != job.id)
      throw InputError("job " + job.id + ": its payload is the request of Idempotency-Key " + request.key);
    return lines_.emplace(job.id, make_line(std::move(request))).first->second;
  }

  /// The jobs this process holds, renewed by renew().
  class Held {
   public:
    Held(Runner& runner, const llmretry::store::Job& job) : runner_(runner), id_(job.id) {
      const std::lock_guard<std::mutex> lock(runner_.held_mutex_);
      runner_.held_[id_] = job.token;
    }
    Held(const Held&) = delete;
    Held& operator=(const Held&) = delete;
    Held(Held&&) = delete;
    Held& operator=(Held&&) = delete;
    ~Held() {
      const std::lock_guard<std::mutex> lock(runner_.held_mutex_);
      runner_.held_.erase(id_);
    }

   private:
    Runner& runner_;
    std::string id_;
  };

  /// Starts the visibility timeout of every job held again. Returns true (a failure is tried again at the
  /// next turn: the jobs stay held until their timeout passes). A job that cannot be extended has ended
  /// meanwhile, or was lost: finish() counts a loss, when the job's own end fails.
  bool renew(Stores& stores) {
    std::unordered_map<std::string, std::string> held;
    {
      const std::lock_guard<std::mutex> lock(held_mutex_);
      held = held_;
    }
    try {
      for (const auto& [id, token] : held) (void)stores.queue().extend(id, token);
    } catch (const std::exception&) {}
    return true;
  }

  /// Returns true once this worker has nothing left to do: every line written, or (a submitted batch) the
  /// queue holds no job. Throws when jobs were lost.
  bool finished(Stores& stores) {
    if (!settings_.read_job) {
      if (remaining_ <= 0) return true;
      check_jobs(stores);
      return false;
    }
    const llmretry::store::QueueCounts counts = stores.queue().counts();
    const auto jobs = static_cast<std::int64_t>(counts.ready + counts.delayed + counts.taken);
    const auto accounted = jobs + static_cast<std::int64_t>(counts.done + counts.failed + counts.dead);
    if (accounted >= settings_.submitted && jobs == 0) return true;
    if (accounted < settings_.submitted)
      throw std::runtime_error("the batch's queue holds " + std::to_string(accounted) + " jobs and results for " +
                               std::to_string(settings_.submitted) +
                               " lines submitted: jobs were lost (was Redis flushed, or restarted without its "
                               "data?); submit the batch again");
    return false;
  }

  /// Returns true once the run was asked to stop (Settings::stop_requested).
  bool stop_requested() const noexcept { return sleep_.requested(); }

  /// A line whose recording threw (its answer came, its store did not take it), and its job.
  struct Kept {
    std::shared_ptr<Line> line;
    llmretry::store::Job job;
  };
  /// A Kept line the worker records first at its next turns, its job held (renewed) meanwhile. Made once the
  /// turn that kept it has unwound (its own hold of the job released).
  struct Unfinished {
    Unfinished(Runner& runner, Kept kept_line) : kept(std::move(kept_line)), held(runner, kept.job) {}
    Kept kept;
    Held held;
  };

  void work() {
    try {
      std::unique_ptr<Stores> stores;
      llmretry::ThreadRng rng;
      Outage outage(settings_);
      // Asked to stop, a worker still records the line it holds unrecorded: its answer was paid for.
      std::optional<Unfinished> unfinished;
      while (!stopped_) {
        if (!unfinished && stop_requested()) {
          interrupted_ = true;
          break;
        }
        std::optional<Kept> kept;
        try {
          if (!stores) stores = open_stores_();
          if (unfinished) {
            record_again(unfinished->kept, *stores);
            unfinished.reset();
          } else if (!turn(*stores, rng, kept)) {
            break;
          }
          outage.over();
        } catch (const std::exception& error) {
          if (kept) unfinished.emplace(*this, std::move(*kept));
          if (!outage.ride_out(error, stopped_)) throw;
        }
      }
    } catch (const Stopping&) {
      interrupted_ = true;  // a wait before an attempt was cut short: its job is back in the queue
    } catch (...) {
      const std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
      stopped_ = true;
    }
  }

  /// A worker's run of failed store operations.
  class Outage {
   public:
    explicit Outage(const Settings& settings) : settings_(settings) {}

    /// The operation that just ended succeeded.
    void over() noexcept { since_.reset(); }

    /// Returns false when `error` stops the run: it is no outage, or the outage has lasted outage_limit.
    /// Else waits before the next try (less once `stopped` is set) and returns true.
    bool ride_out(const std::exception& error, const std::atomic<bool>& stopped) {
      if (!settings_.is_outage) return false;
      if (dynamic_cast<const PacingUnavailable*>(&error) == nullptr && !settings_.is_outage(error)) return false;
      const auto now = std::chrono::steady_clock::now();
      if (!since_) {
        since_ = now;
        pause_ = std::chrono::milliseconds{100};
      }
      const auto left = settings_.outage_limit - std::chrono::duration_cast<std::chrono::milliseconds>(now - *since_);
      if (left <= std::chrono::milliseconds::zero()) return false;
      const auto pause = std::min(pause_, left);  // the last try comes when the outage has lasted its limit
      for (auto slept = std::chrono::milliseconds::zero(); slept < pause && !stopped; slept += step)
        std::this_thread::sleep_for(step);
      pause_ = std::min(2 * pause_, std::chrono::milliseconds{2'000});
      return true;
    }

   private:
    static constexpr std::chrono::milliseconds step{50};
    const Settings& settings_;
    std::optional<std::chrono::steady_clock::time_point> since_;
    std::chrono::milliseconds pause_{100};
  };

  /// Records the line of `kept` again (record()). Throws as record() does.
  void record_again(const Kept& kept, Stores& stores) {
    Line& line = *kept.line;
    const std::lock_guard<std::mutex> lock(line.mutex);
    if (line.unrecorded) (void)record(line, kept.job, stores);
    forget_if_done(line, kept.job);
  }

  /// Forgets `line`, the line of `job`, once it is written, in a submitted batch: its lines need not outlive
  /// their job.
  void forget_if_done(const Line& line, const llmretry::store::Job& job) {
    if (!line.done || !settings_.read_job) return;
    const std::lock_guard<std::mutex> lines_lock(lines_mutex_);
    lines_.erase(job.id);
  }

  /// Takes one job and carries out its next step. Returns false once this worker has nothing left to do, or
  /// (its job left untouched) the run is asked to stop. Throws what the stores throw; what a job's line holds
  /// stays true for the next turn (finish()); a line whose recording threw is set in `kept`.
  bool turn(Stores& stores, llmretry::ThreadRng& rng, std::optional<Kept>& kept) {
    if (!settings_.read_job && remaining_ <= 0) return false;
    auto job = stores.queue().take();
    if (!job) {
      if (finished(stores)) return false;
      std::this_thread::sleep_for(settings_.idle_wait);
      return true;
    }
    const Held held(*this, *job);
    const std::shared_ptr<Line> found = line_of(*job);
    if (found == nullptr) {  // left in the queue by an earlier run, and answered since
      (void)stores.queue().ack(job->id, job->token);
      return true;
    }
    Line& line = *found;
    const std::lock_guard<std::mutex> lock(line.mutex);
    if (line.done) {
      (void)stores.queue().ack(job->id, job->token);
      return true;
    }
    if (!line.unrecorded && stop_requested()) {  // taken as the run stops: nothing is sent
      hand_back(*job, stores);
      interrupted_ = true;
      return false;
    }
    const bool begins = !line.begun;  // its operation is begun by this take, if at all
    try {
      if (line.unrecorded)  // its recording failed: recorded now (its operation stays in flight)
        (void)record(line, *job, stores);
      else if (begin(line, *job, stores)) step(line, *job, stores, rng);
    } catch (const Stopping&) {
      start_engine(line);  // what its engine reserved is given back now, not when the run ends
      if (begins) unbegin(line, *job, stores);
      hand_back(*job, stores);
      throw;
    } catch (const std::exception&) {
      if (line.unrecorded) kept = Kept{found, *job};
      throw;
    }
    forget_if_done(line, *job);
    return true;
  }

  /// Puts `job`, which this worker will not carry on as the run stops, back in the queue ready, so that
  /// another worker takes it at once rather than once its visibility timeout passes. A store that fails
  /// leaves it to that timeout.
  static void hand_back(const llmretry::store::Job& job, Stores& stores) noexcept {
    try {
      (void)stores.queue().retry_later(job.id, job.token, std::chrono::milliseconds::zero());
    } catch (...) {}
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
    if (finish(line, job, stores,
               error_line(request, already_completed,
                          "completed in an earlier run (provider request id \"" + result.operation.provider_request_id +
                              "\"); its answer is not in the output file",
                          already_completed, 0, nullptr),
               false))
      stats_.gave_up(already_completed);
    return false;
  }

  /// Marks the operation of `line` failed when it was begun anew by the take of `job`, still held, and
  /// nothing was sent since (its first wait for capacity was cut short by the stop), so that whoever sends
  /// it next begins it anew instead of resuming a request that may have run. Requires that the operation
  /// was not begun before that take: an earlier take (here or in another worker) may have sent it. Any other
  /// operation stays in flight, as one whose job another worker holds now, or whose store fails.
  void unbegin(Line& line, const llmretry::store::Job& job, Stores& stores) noexcept {
    if (!line.begun || line.may_have_run) return;  // not begun, or found in flight: it may have run
    try {
      if (stores.queue().extend(job.id, job.token) &&  // still held: no one else can take it meanwhile
          stores.operations().fail(settings_.batch_name + line.request.key))
        line.begun = false;
    } catch (...) {}
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
    left_queue(line);
    ++stats_.requests;
    stats_.tokens_reserved += line.request.estimate.tokens();
    std::optional<llmretry::curl::Response> response;
    std::optional<llmretry::curl::Response> error_response;
    llmretry::Failure failure;
    std::string failed_with;  // what the attempt's exception said (secrets redacted)
    try {
      response = send(line.request, engine.attempt().number);
    } catch (const std::exception& error) {
      failure = llmretry::failure_of(error).value_or(llmretry::Failure{});
      if (const auto* answer = llmretry::curl::response_of(error)) error_response = *answer;
      failed_with = error.what();
    }
    if (response) {
      (void)engine.succeeded(*response);
      end_call(line);
      return succeed(line, job, stores, *response);
    }
    if (failure.kind == llmretry::FailureKind::rate_limited) ++stats_.rate_limited;
    if (failure.sent == llmretry::Sent::maybe_processed) line.may_have_run = true;
    const llmretry::Step after = engine.failed(failure, rng);
    if (after.kind == llmretry::Step::Kind::done)
      return give_up(line, job, stores, error_response ? &*error_response : nullptr, failed_with);
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

  /// Records the answer and removes the job, then marks the operation completed (unless the job was lost
  /// meanwhile: its new holder completes it).
  void succeed(Line& line, const llmretry::store::Job& job, Stores& stores, const llmretry::curl::Response& response) {
    const auto usage = llmretry::json::usage_of(response.body).value_or(llmretry::Cost{1, 0, 0});
    if (!finish(line, job, stores, answer_line(line.request, response), true)) return;
    stats_.tokens_used += usage.tokens();
    (void)stores.operations().complete(settings_.batch_name + line.request.key,
                                       std::string(response.header("x-request-id").value_or("")), usage);
  }

  /// Writes the errors line of a request whose engine gave up (`response` and `failed_with`: the error answer
  /// of the attempt whose failure ended the call and what its exception said; null and empty when the call
  /// ended without an attempt's failure, such as refused before one); an operation that certainly did not run
  /// is marked failed, one of which any attempt may have run (not only the last) stays in flight.
  /// A call given up because the shared pacing was out of reach while outages are ridden out
  /// (Settings::is_outage) is not the request's failure: its engine starts again, its job goes back to the
  /// queue for a second, and PacingUnavailable is thrown, an outage the worker rides out as any other.
  void give_up(Line& line, const llmretry::store::Job& job, Stores& stores,
               const llmretry::curl::Response* response = nullptr, const std::string& failed_with = {}) {
    const llmretry::GiveUp& gave_up = *line.engine->gave_up();
    line.observed->gave_up(gave_up);
    if (gave_up.reason == llmretry::StopReason::pacing_unavailable && settings_.is_outage) {
      start_engine(line);
      (void)stores.queue().retry_later(job.id, job.token, std::chrono::seconds{1});
      throw PacingUnavailable("the shared pacing in Redis was out of reach");
    }
    if (!finish(line, job, stores,
                failure_line(line.request, gave_up.failure, gave_up.reason, gave_up.attempts, response, failed_with),
                false))
      return;
    if (!line.may_have_run && gave_up.failure.sent != llmretry::Sent::maybe_processed)
      (void)stores.operations().fail(settings_.batch_name + line.request.key);
    stats_.gave_up(llmretry::to_string(gave_up.reason));
  }

  /// Records `text`, the line of `line` (an answer when `answered`), removes its job and marks it done.
  /// Returns false when the job was lost meanwhile (its visibility timeout passed and another take holds
  /// it): nothing is recorded, and the line stays kept for a worker of this process that takes the job (the
  /// holder records it; a holder in another process records its own).
  bool finish(Line& line, const llmretry::store::Job& job, Stores& stores, std::string text, bool answered) {
    line.unrecorded = Unrecorded{std::move(text), answered};
    return record(line, job, stores);
  }

  /// Records the line kept in `line.unrecorded` as finish() does. When recording throws, the line stays
  /// kept (whether the destination has it is unknown): the next turn that takes its job records it then.
  bool record(Line& line, const llmretry::store::Job& job, Stores& stores) {
    left_queue(line);
    line.done = true;
    --remaining_;  // before the job leaves the queue: check_jobs never counts fewer jobs than lines remain
    bool recorded = false;
    try {
      recorded = destination_.record(stores.queue(), job, line.unrecorded->text, line.unrecorded->answered);
    } catch (...) {
      line.done = false;
      ++remaining_;
      throw;
    }
    if (!recorded) {
      line.done = false;
      ++remaining_;
      ++stats_.leases_lost;
      return false;
    }
    ++(line.unrecorded->answered ? stats_.answered : stats_.failed);
    line.unrecorded.reset();
    return true;
  }

  inline static llmretry::metrics::Observer nobody_;  ///< the observer when Settings::observer is null
  llmretry::metrics::Observer& observer_;
  const StoppableSleep sleep_;                       ///< every line's; outlives them
  llmretry_tools::BoundedLabels model_labels_{100};  ///< the first 100 models named, then "other"
  std::vector<std::string> order_;                   ///< the pending requests' keys, in the input's order
  std::mutex lines_mutex_;
  std::unordered_map<std::string, std::shared_ptr<Line>> lines_;  ///< Idempotency-Key (the job id) -> line
  std::mutex held_mutex_;
  std::unordered_map<std::string, std::string> held_;  ///< the jobs this process holds: id -> token
  Destination& destination_;
  llmretry::Deployment& deployment_;
  OpenStores open_stores_;
  Settings settings_;
  const llmretry::CallOptions call_options_;  ///< every request's: no deadline, safe to repeat (an Idempotency-Key)
  Stats& stats_;
  llmretry::curl::Options curl_options_;
  std::atomic<std::int64_t> remaining_;
  std::atomic<bool> stopped_{false};
  std::atomic<bool> interrupted_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

}  // namespace batch

#endif  // LLMRETRY_BATCH_RUNNER_HPP
