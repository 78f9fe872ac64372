#ifndef LLMRETRY_STORE_OPERATIONS_HPP
#define LLMRETRY_STORE_OPERATIONS_HPP

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "../version.hpp"
#include "../vocabulary.hpp"
#include "clock.hpp"

/// The operations table: one record per logical operation, written before it is sent and when it ends, so
/// that a fallback to another provider or a resumed batch can tell whether it already ran (and was billed).
/// One interface, an in-memory implementation here and a Redis one in <llmretry/redis/operations.hpp>.

LLMRETRY_BEGIN_NAMESPACE
namespace store {

/// Where an operation stands.
enum class OperationStatus {
  in_flight,  ///< sent, or about to be: it may have run (and been billed) even if its worker died
  completed,  ///< it ran: provider_request_id and usage say where and for how much
  failed,     ///< it ended without running (not sent, refused): it may begin again
};

/// Returns the snake_case name of a status, such as "in_flight".
[[nodiscard]] constexpr const char* to_string(OperationStatus status) noexcept {
  switch (status) {
    case OperationStatus::in_flight: return "in_flight";
    case OperationStatus::completed: return "completed";
    case OperationStatus::failed: return "failed";
  }
  return "unknown";
}

/// One logical operation.
struct Operation {
  std::string id;
  OperationStatus status = OperationStatus::in_flight;
  std::string provider;  ///< where it was (last) sent
  std::string model;
  std::string provider_request_id;  ///< the provider's id of the request that completed it
  /// What the request that completed it used, as the provider reported it; all zero until completed.
  Cost usage{0, 0, 0};
  std::chrono::system_clock::time_point created_at;  ///< first begin()
  std::chrono::system_clock::time_point updated_at;  ///< last write
};

/// The answer to OperationsTable::begin.
struct BeginResult {
  bool started = false;  ///< true: the record is now in_flight at this provider, send it; false: it exists
  Operation operation;   ///< the record as it stands after the call
};

/// How long records last.
struct OperationsOptions {
  /// Records are forgotten this long after their last write.
  std::chrono::milliseconds retention = std::chrono::hours(24);
};

/// The operations table. Every call is atomic; implementations are safe to use from several threads.
class OperationsTable {
 public:
  virtual ~OperationsTable() = default;
  OperationsTable() = default;
  OperationsTable(const OperationsTable&) = delete;
  OperationsTable& operator=(const OperationsTable&) = delete;
  OperationsTable(OperationsTable&&) = delete;
  OperationsTable& operator=(OperationsTable&&) = delete;

  /// Records, before sending, that operation `id` goes to `provider` / `model`. Returns started with the
  /// new in_flight record when there was none or it had failed; else not started, with the existing record
  /// (in_flight: it may have run, do not send it elsewhere; completed: it ran). Throws the implementation's
  /// errors (such as redis::RedisError).
  [[nodiscard]] virtual BeginResult begin(std::string_view id, std::string_view provider, std::string_view model) = 0;
  /// Records that `id` completed as `provider_request_id` with `usage`. Returns true when it was in_flight,
  /// or already completed with that provider_request_id (a repeated call); false otherwise (unknown,
  /// failed, or completed by another request), and nothing changes.
  [[nodiscard]] virtual bool complete(std::string_view id, std::string_view provider_request_id, const Cost& usage) = 0;
  /// Records that `id`, in flight, ended without running (not sent, or refused without any work), so that
  /// it may begin again. Returns true when it was in_flight or already failed; false otherwise.
  [[nodiscard]] virtual bool fail(std::string_view id) = 0;
  /// Returns the record of `id`, or nullopt when there is none (never written, or forgotten).
  [[nodiscard]] virtual std::optional<Operation> find(std::string_view id) = 0;
};

/// The embedded OperationsTable: one process, nothing to start. Time comes from `clock`.
class MemoryOperationsTable final : public OperationsTable {
 public:
  /// A table with `options`, reading time from `clock` (the system clock when empty).
  explicit MemoryOperationsTable(OperationsOptions options = {}, StoreClock clock = {})
      : options_(options), clock_(std::move(clock)) {}

  [[nodiscard]] BeginResult begin(std::string_view id, std::string_view provider, std::string_view model) override {
    const auto now = now_on(clock_);
    const std::lock_guard<std::mutex> lock(mutex_);
    Operation* record = live(id, now);
    if (record != nullptr && record->status != OperationStatus::failed) return {false, *record};
    if (record == nullptr) {
      record = &records_[std::string(id)];
      record->id = std::string(id);
      record->created_at = now;
    }
    record->status = OperationStatus::in_flight;
    record->provider = std::string(provider);
    record->model = std::string(model);
    record->updated_at = now;
    return {true, *record};
  }

  [[nodiscard]] bool complete(std::string_view id, std::string_view provider_request_id, const Cost& usage) override {
    const auto now = now_on(clock_);
    const std::lock_guard<std::mutex> lock(mutex_);
    Operation* record = live(id, now);
    if (record == nullptr) return false;
    if (record->status == OperationStatus::completed) return record->provider_request_id == provider_request_id;
    if (record->status != OperationStatus::in_flight) return false;
    record->status = OperationStatus::completed;
    record->provider_request_id = std::string(provider_request_id);
    record->usage = usage;
    record->updated_at = now;
    return true;
  }

  [[nodiscard]] bool fail(std::string_view id) override {
    const auto now = now_on(clock_);
    const std::lock_guard<std::mutex> lock(mutex_);
    Operation* record = live(id, now);
    if (record == nullptr || record->status == OperationStatus::completed) return false;
    if (record->status == OperationStatus::in_flight) {
      record->status = OperationStatus::failed;
      record->updated_at = now;
    }
    return true;
  }

  [[nodiscard]] std::optional<Operation> find(std::string_view id) override {
    const auto now = now_on(clock_);
    const std::lock_guard<std::mutex> lock(mutex_);
    const Operation* record = live(id, now);
    if (record == nullptr) return std::nullopt;
    return *record;
  }

 private:
  /// The record of `id` unless it is older than the retention (then erased); null when there is none.
  Operation* live(std::string_view id, std::chrono::system_clock::time_point now) {
    const auto found = records_.find(std::string(id));
    if (found == records_.end()) return nullptr;
    if (found->second.updated_at + options_.retention > now) return &found->second;
    records_.erase(found);
    return nullptr;
  }

  OperationsOptions options_;
  StoreClock clock_;
  std::mutex mutex_;
  std::unordered_map<std::string, Operation> records_;
};

}  // namespace store
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_STORE_OPERATIONS_HPP
