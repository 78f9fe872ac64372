// Keeps an Idempotency-Key claimed while its request is in flight, however long the request takes.
#ifndef LLMRETRY_TOOLS_COMMON_LEASE_RENEWER_HPP
#define LLMRETRY_TOOLS_COMMON_LEASE_RENEWER_HPP

#include <llmretry/clock.hpp>
#include <llmretry/store/idempotency_store.hpp>

#include <chrono>
#include <exception>
#include <string>
#include <utility>

#include "periodic_thread.hpp"

namespace llmretry_tools {

/// Renews the lease of `token` on `key` every `every` on a thread of its own, from construction until
/// destruction, so that a request longer than one lease keeps its key. Stops early once the lease is
/// lost; a failed renewal (the store throws: it is down) is tried again at the next turn. `store` must
/// outlive it.
class LeaseRenewer {
 public:
  /// Starts renewing, `every` measured on `clock` and waited for with `wait` (see PeriodicThread; empty:
  /// the real clock). Requires `every` > 0 (a third of the lease leaves room for two missed renewals).
  LeaseRenewer(llmretry::store::IdempotencyStore& store, std::string key, std::string token,
               std::chrono::milliseconds every, llmretry::Clock clock = {}, PeriodicWait wait = {})
      : store_(store),
        key_(std::move(key)),
        token_(std::move(token)),
        thread_(
            every, [this] { return renew(); }, std::move(clock), std::move(wait)) {}

 private:
  /// Returns false once the lease is lost.
  bool renew() {
    try {
      return store_.renew(key_, token_);
    } catch (const std::exception&) {
      return true;  // unreachable now: tried again at the next turn, while the lease still runs
    }
  }

  llmretry::store::IdempotencyStore& store_;
  const std::string key_;
  const std::string token_;
  PeriodicThread thread_;  ///< last: it starts once the rest is ready
};

}  // namespace llmretry_tools

#endif  // LLMRETRY_TOOLS_COMMON_LEASE_RENEWER_HPP
