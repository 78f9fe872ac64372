// Keeps an Idempotency-Key claimed while its request is in flight, however long the request takes.
#ifndef LLMRETRY_RELAY_LEASE_RENEWER_HPP
#define LLMRETRY_RELAY_LEASE_RENEWER_HPP

#include <llmretry/store/idempotency_store.hpp>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace relay {

/// Renews the lease of `token` on `key` every `every` on a thread of its own, from construction until
/// destruction, so that a request longer than one lease keeps its key. Stops early once the lease is
/// lost; a failed renewal (the store is down) is tried again at the next turn. `store` must outlive it.
class LeaseRenewer {
 public:
  /// Starts renewing. Requires `every` > 0 (a third of the lease leaves room for two missed renewals).
  LeaseRenewer(llmretry::store::IdempotencyStore& store, std::string key, std::string token,
               std::chrono::milliseconds every)
      : store_(store), key_(std::move(key)), token_(std::move(token)), every_(every), thread_([this] { run(); }) {}
  LeaseRenewer(const LeaseRenewer&) = delete;
  LeaseRenewer& operator=(const LeaseRenewer&) = delete;
  LeaseRenewer(LeaseRenewer&&) = delete;
  LeaseRenewer& operator=(LeaseRenewer&&) = delete;
  /// Stops renewing and waits for the thread.
  ~LeaseRenewer() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stopped_ = true;
    }
    stop_.notify_all();
    thread_.join();
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_.wait_for(lock, every_, [this] { return stopped_; })) {
      lock.unlock();
      bool held = true;
      try {
        held = store_.renew(key_, token_);
      } catch (const std::exception&) {
        // The store is unreachable now: try again at the next turn, while the lease still runs.
      }
      lock.lock();
      if (!held) return;
    }
  }

  llmretry::store::IdempotencyStore& store_;
  const std::string key_;
  const std::string token_;
  const std::chrono::milliseconds every_;
  std::mutex mutex_;
  std::condition_variable stop_;
  bool stopped_ = false;
  std::thread thread_;  ///< last: it starts once the rest is ready
};

}  // namespace relay

#endif  // LLMRETRY_RELAY_LEASE_RENEWER_HPP
