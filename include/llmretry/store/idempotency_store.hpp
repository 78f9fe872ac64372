#ifndef LLMRETRY_STORE_IDEMPOTENCY_STORE_HPP
#define LLMRETRY_STORE_IDEMPOTENCY_STORE_HPP

#include <chrono>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../version.hpp"
#include "clock.hpp"

/// Idempotency keys shared by workers: the first to claim a key runs the operation, the others are told it is
/// in flight, or get its stored response, or learn that the key was used for another request. One interface,
/// an in-memory implementation here and a Redis one in <llmretry/redis/idempotency_store.hpp>.

LLMRETRY_BEGIN_NAMESPACE
namespace store {

/// The response stored under a completed key, given back to every later claim of it.
struct StoredResponse {
  StoredResponse() = default;
  /// A response of `status_in`, `body_in` and `headers_in`.
  StoredResponse(int status_in, std::string body_in, std::vector<std::pair<std::string, std::string>> headers_in = {})
      : status(status_in), body(std::move(body_in)), headers(std::move(headers_in)) {}

  int status = 0;    ///< the HTTP status (or any code of the caller's)
  std::string body;  ///< the whole body: a cut stream is never stored, it is released
  /// Headers given back with it, in order: names without ':', names and values without CR or LF (a store
  /// may refuse others with std::invalid_argument).
  std::vector<std::pair<std::string, std::string>> headers;
  friend bool operator==(const StoredResponse& a, const StoredResponse& b) {
    return a.status == b.status && a.body == b.body && a.headers == b.headers;
  }
  friend bool operator!=(const StoredResponse& a, const StoredResponse& b) { return !(a == b); }
};

/// What a claim found.
enum class ClaimStatus {
  claimed,    ///< the key was free (or already held by this token): run the operation, then complete or release
  in_flight,  ///< another holder runs it now: answer 409, or ask again after ClaimResult::lease_left
  completed,  ///< it ran: ClaimResult::response is its stored response
  mismatch,   ///< the key was used with another fingerprint: answer 422, never the other request's response
};

/// Returns the snake_case name of a claim status, such as "in_flight".
[[nodiscard]] constexpr const char* to_string(ClaimStatus status) noexcept {
  switch (status) {
    case ClaimStatus::claimed: return "claimed";
    case ClaimStatus::in_flight: return "in_flight";
    case ClaimStatus::completed: return "completed";
    case ClaimStatus::mismatch: return "mismatch";
  }
  return "unknown";
}

/// Returns the HTTP status a server answers a duplicate request with: 409 Conflict while the first is in
/// flight, 422 Unprocessable Content for the same key with another payload, 0 for claimed and completed.
[[nodiscard]] constexpr int conflict_status(ClaimStatus status) noexcept {
  return status == ClaimStatus::in_flight ? 409 : status == ClaimStatus::mismatch ? 422 : 0;
}

/// The answer to a claim.
struct ClaimResult {
  ClaimStatus status = ClaimStatus::claimed;
  std::optional<StoredResponse> response;   ///< set when completed
  std::chrono::milliseconds lease_left{0};  ///< in_flight: time until the holder's lease ends unless renewed
};

/// How long claims and stored responses last.
struct IdempotencyOptions {
  /// A claim is a lease: a holder that neither completes, releases nor renews it within this time (it died)
  /// loses it, and the next claim gets the key. Longer than the longest operation, or renewed.
  std::chrono::milliseconds lease = std::chrono::minutes(5);
  /// How long a completed key keeps its response; after that the key is forgotten and a reuse starts anew.
  std::chrono::milliseconds retention = std::chrono::hours(24);
  /// MemoryIdempotencyStore: the most bytes its stored responses (bodies and headers) hold together; past
  /// it, the keys completed first are forgotten first (a reuse of one starts anew; a response larger than
  /// the bound is not kept). Unset: no bound but the retention. (A Redis server bounds its memory itself:
  /// maxmemory.)
  std::optional<std::size_t> max_stored_bytes;
};

/// The longest key accepted, in bytes.
inline constexpr std::size_t max_idempotency_key_length = 255;

/// Throws std::invalid_argument unless `key` has 1 to max_idempotency_key_length bytes and `token` is not
/// empty.
inline void check_idempotency_key(std::string_view key, std::string_view token) {
  if (key.empty() || key.size() > max_idempotency_key_length)
    throw std::invalid_argument("idempotency key of " + std::to_string(key.size()) + " bytes: it must have 1 to " +
                                std::to_string(max_idempotency_key_length));
  if (token.empty()) throw std::invalid_argument("empty idempotency claim token");
}

/// Idempotency keys shared by workers. Every operation is atomic: of any number of concurrent claims of a
/// free key, exactly one gets ClaimStatus::claimed. Implementations are safe to use from several threads.
/// `token` names the holder of one claim (new_idempotency_key() makes one): a claim repeated with the same
/// token (its answer was lost) gets the key again, and only the holder's token can complete, release or
/// renew it.
class IdempotencyStore {
 public:
  virtual ~IdempotencyStore() = default;
  IdempotencyStore() = default;
  IdempotencyStore(const IdempotencyStore&) = delete;
  IdempotencyStore& operator=(const IdempotencyStore&) = delete;
  IdempotencyStore(IdempotencyStore&&) = delete;
  IdempotencyStore& operator=(IdempotencyStore&&) = delete;

  /// Claims `key` for a request whose fingerprint is `fingerprint` (store::fingerprint of its canonical
  /// form). Returns mismatch when the key is held or completed with another fingerprint; else completed
  /// with the stored response, in_flight when another token holds it, or claimed (for the lease).
  /// Throws std::invalid_argument for a key that check_idempotency_key refuses, and the implementation's
  /// errors (such as redis::RedisError).
  [[nodiscard]] virtual ClaimResult claim(std::string_view key, std::string_view fingerprint,
                                          std::string_view token) = 0;
  /// Stores `response` under `key`, kept for the retention time. Returns true when `token` held the key
  /// (or had already completed it); false when the lease was lost, and nothing is stored.
  [[nodiscard]] virtual bool complete(std::string_view key, std::string_view token, const StoredResponse& response) = 0;
  /// Frees `key` after a failed operation (a cut stream too), so that a retry runs it again. Returns true
  /// when `token` held it, false when the lease was already lost.
  [[nodiscard]] virtual bool release(std::string_view key, std::string_view token) = 0;
  /// Starts the lease of `token` on `key` again, for an operation longer than one lease. Returns true when
  /// `token` still held it, false when the lease was lost.
  [[nodiscard]] virtual bool renew(std::string_view key, std::string_view token) = 0;
};

/// The embedded IdempotencyStore: one process, nothing to start. Time comes from `clock`.
class MemoryIdempotencyStore final : public IdempotencyStore {
 public:
  /// A store with `options`, reading time from `clock` (the system clock when empty).
  explicit MemoryIdempotencyStore(IdempotencyOptions options = {}, StoreClock clock = {})
      : options_(options), clock_(std::move(clock)) {}

  [[nodiscard]] ClaimResult claim(std::string_view key, std::string_view fingerprint, std::string_view token) override {
    check_idempotency_key(key, token);
    const auto now = now_on(clock_);
    const std::lock_guard<std::mutex> lock(mutex_);
    sweep(now);
    auto found = live(key, now);
    if (found == records_.end()) {
      records_.insert_or_assign(
          std::string(key), Record{std::string(fingerprint), std::string(token), std::nullopt, now + options_.lease});
      return {};
    }
    const Record& record = found->second;
    if (record.fingerprint != fingerprint) return {ClaimStatus::mismatch, std::nullopt, {}};
    if (record.response) return {ClaimStatus::completed, record.response, {}};
    if (record.token == token) {
      found->second.expires = now + options_.lease;
      return {};
    }
    return {ClaimStatus::in_flight, std::nullopt,
            std::chrono::duration_cast<std::chrono::milliseconds>(record.expires - now)};
  }

  [[nodiscard]] bool complete(std::string_view key, std::string_view token, const StoredResponse& response) override {
    const auto now = now_on(clock_);
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto found = held(key, token, now);
    if (found == records_.end()) return false;
    if (found->second.response) return true;
    if (options_.max_stored_bytes && size_of(response) > *options_.max_stored_bytes) {
      records_.erase(found);  // not kept, and nothing else forgotten for it: a reuse starts anew
      return true;
    }
    found->second.response = response;
    found->second.expires = now + options_.retention;
    stored_bytes_ += size_of(response);
    completed_.emplace_back(std::string(key), found->second.expires);
    forget_oldest(now);
    return true;
  }

  [[nodiscard]] bool release(std::string_view key, std::string_view token) override {
    const auto now = now_on(clock_);
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto found = held(key, token, now);
    if (found == records_.end() || found->second.response) return false;
    erase(found);
    return true;
  }

  [[nodiscard]] bool renew(std::string_view key, std::string_view token) override {
    const auto now = now_on(clock_);
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto found = held(key, token, now);
    if (found == records_.end() || found->second.response) return false;
    found->second.expires = now + options_.lease;
    return true;
  }

 private:
  struct Record {
    std::string fingerprint;
    std::string token;
    std::optional<StoredResponse> response;  ///< set once completed
    std::chrono::system_clock::time_point expires;
  };
  using Records = std::unordered_map<std::string, Record>;

  /// Returns the bytes `response` counts for against IdempotencyOptions::max_stored_bytes.
  static std::size_t size_of(const StoredResponse& response) noexcept {
    std::size_t bytes = response.body.size();
    for (const auto& [name, value] : response.headers) bytes += name.size() + value.size();
    return bytes;
  }

  /// Erases `at`, counting out its stored response.
  Records::iterator erase(Records::iterator at) {
    if (at->second.response) stored_bytes_ -= size_of(*at->second.response);
    return records_.erase(at);
  }

  /// Forgets the responses completed first while they hold more than max_stored_bytes, and the entries of
  /// completed_ whose record is gone.
  void forget_oldest(std::chrono::system_clock::time_point now) {
    while (!completed_.empty()) {
      const auto& [key, expires] = completed_.front();
      const auto found = records_.find(key);
      const bool current = found != records_.end() && found->second.response && found->second.expires == expires;
      if (current && expires > now && (!options_.max_stored_bytes || stored_bytes_ <= *options_.max_stored_bytes))
        return;
      if (current) erase(found);
      completed_.pop_front();
    }
  }

  /// The record of `key` unless it expired (then erased).
  Records::iterator live(std::string_view key, std::chrono::system_clock::time_point now) {
    const auto found = records_.find(std::string(key));
    if (found == records_.end() || found->second.expires > now) return found;
    erase(found);
    return records_.end();
  }
  /// The live record of `key` when `token` claimed it.
  Records::iterator held(std::string_view key, std::string_view token, std::chrono::system_clock::time_point now) {
    const auto found = live(key, now);
    return found != records_.end() && found->second.token == token ? found : records_.end();
  }
  /// Erases the expired records once the map has doubled since the last sweep: memory stays bounded.
  void sweep(std::chrono::system_clock::time_point now) {
    if (records_.size() < 2 * swept_size_ + 64) return;
    for (auto it = records_.begin(); it != records_.end();) it = it->second.expires <= now ? erase(it) : ++it;
    forget_oldest(now);
    swept_size_ = records_.size();
  }

  IdempotencyOptions options_;
  StoreClock clock_;
  std::mutex mutex_;
  Records records_;
  std::size_t swept_size_ = 0;
  std::size_t stored_bytes_ = 0;  ///< the bytes of the stored responses (size_of)
  /// The completed keys with the expiry their response was stored with, completed first at the front.
  std::deque<std::pair<std::string, std::chrono::system_clock::time_point>> completed_;
};

}  // namespace store
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_STORE_IDEMPOTENCY_STORE_HPP
