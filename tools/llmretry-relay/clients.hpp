// Who may call llmretry-relay: the one key of LLMRETRY_RELAY_CLIENT_KEY and the clients of --config, each
// known by its key, with the tenant its requests are for and the classes it may ask.
#ifndef LLMRETRY_RELAY_CLIENTS_HPP
#define LLMRETRY_RELAY_CLIENTS_HPP

#include <llmretry/admission/priority.hpp>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config.hpp"
#include "routes.hpp"
#include "security.hpp"

namespace relay {

/// A client of the config, known by its key.
struct Client {
  std::string name;  ///< the tenant its requests are for
  std::string key;
  llmretry::Priority priority = llmretry::Priority::interactive;  ///< its class, and the highest it may ask
  double weight = 1.0;                                            ///< its weight among tenants
};

/// Who sent a request.
struct Caller {
  bool admitted = false;           ///< false: a key is required and it sent none that is known
  const Client* client = nullptr;  ///< the client of the config whose key it sent; null: the one key, or none
  std::string_view key;            ///< the key it sent, when one is required (valid as long as the Clients)
};

/// The keys the relay accepts. Immutable once built; thread-safe.
class Clients {
 public:
  /// Accepts `shared_key` (LLMRETRY_RELAY_CLIENT_KEY; empty: none) and the key of each client of `table`, read
  /// from `environment`; no key at all is required when both are empty. `metrics_key`
  /// (LLMRETRY_RELAY_METRICS_KEY; empty: none) is then the only key that reads /metrics.
  /// Throws SetupError naming the client when its key variable is not set, or when two clients (or a
  /// client and LLMRETRY_RELAY_CLIENT_KEY or LLMRETRY_RELAY_METRICS_KEY) have the same key.
  Clients(std::string shared_key, const ClientTable& table, const Environment& environment,
          std::string metrics_key = {})
      : shared_key_(std::move(shared_key)), metrics_key_(std::move(metrics_key)) {
    if (!metrics_key_.empty() && metrics_key_ == shared_key_)
      throw SetupError("LLMRETRY_RELAY_METRICS_KEY: the same key as LLMRETRY_RELAY_CLIENT_KEY");
    for (const auto& [name, row] : table) {
      Client client{name, environment(row.key_env), row.priority, row.weight};
      const std::string at = "clients." + name + ".key_env: ";
      if (client.key.empty()) throw SetupError(at + "the variable " + row.key_env + " is not set");
      if (client.key == shared_key_) throw SetupError(at + "the same key as LLMRETRY_RELAY_CLIENT_KEY");
      if (client.key == metrics_key_) throw SetupError(at + "the same key as LLMRETRY_RELAY_METRICS_KEY");
      for (const Client& other : clients_)
        if (other.key == client.key) throw SetupError(at + "the same key as clients." + other.name);
      clients_.push_back(std::move(client));
    }
  }

  /// Returns true when `name` is the tenant of a client of the config: no other caller may name it.
  [[nodiscard]] bool has_client(std::string_view name) const noexcept {
    for (const Client& client : clients_)
      if (client.name == name) return true;
    return false;
  }

  /// Returns true when a request must carry a key.
  [[nodiscard]] bool required() const noexcept { return !shared_key_.empty() || !clients_.empty(); }

  /// Returns true when a request whose headers are `authorization` and `api_key` may read /metrics: it sends
  /// LLMRETRY_RELAY_METRICS_KEY (compared in constant time), or, without one, it is admitted (see caller).
  [[nodiscard]] bool reads_metrics(std::string_view authorization, std::string_view api_key) const noexcept {
    if (metrics_key_.empty()) return caller(authorization, api_key).admitted;
    const std::string_view bearer = bearer_of(authorization);
    if (!bearer.empty() && !api_key.empty() && bearer != api_key) return false;
    return equal_in_constant_time(bearer.empty() ? api_key : bearer, metrics_key_);
  }

  /// Returns who sent a request whose Authorization header is `authorization` and x-api-key header is
  /// `api_key` (a key goes in either: "Bearer KEY", or KEY as Anthropic's SDK sends it). Every key is
  /// compared, each in constant time, so the time taken does not tell which key nearly matched.
  /// A caller that sends two different keys (one in each header) is not admitted.
  [[nodiscard]] Caller caller(std::string_view authorization, std::string_view api_key) const noexcept {
    if (!required()) return {true, nullptr, {}};
    const std::string_view bearer = bearer_of(authorization);
    if (!bearer.empty() && !api_key.empty() && bearer != api_key) return {};
    const auto sent = [&](const std::string& key) {
      const bool in_bearer = equal_in_constant_time(bearer, key) && !bearer.empty();
      const bool in_header = equal_in_constant_time(api_key, key);
      return in_bearer || in_header;
    };
    Caller found;
    if (!shared_key_.empty() && sent(shared_key_)) found = {true, nullptr, shared_key_};
    for (const Client& client : clients_) {
      if (sent(client.key)) found = {true, &client, client.key};
    }
    return found;
  }

 private:
  std::string shared_key_;
  std::string metrics_key_;
  std::vector<Client> clients_;
};

}  // namespace relay

#endif  // LLMRETRY_RELAY_CLIENTS_HPP
