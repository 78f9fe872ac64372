// The model table of llmretry-relay (--config FILE): per model, its upstream, key, limits and fallback,
// checked whole at start-up.
#ifndef LLMRETRY_RELAY_CONFIG_HPP
#define LLMRETRY_RELAY_CONFIG_HPP

#include <llmretry/admission/pressure.hpp>
#include <llmretry/detail/number.hpp>
#include <llmretry/detail/text.hpp>
#include <llmretry/json/routing_policy.hpp>

#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "common/program.hpp"
#include "errors.hpp"

namespace relay {

/// A problem with the config file: what() names the file, the model and the field.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Returns the port number `text` (digits only, at most 65535), or nullopt.
[[nodiscard]] inline std::optional<int> port_number(std::string_view text) noexcept {
  const auto value = llmretry::detail::parse_digits(text);
  if (!value || *value > 65535) return std::nullopt;
  return static_cast<int>(*value);
}

/// Returns an empty string when `url` can be an upstream's base URL: http:// or https:// (any case), then a
/// host (after any userinfo; an IPv6 address in brackets), an optional port in [1, 65535], and no space or
/// control character anywhere; otherwise what
/// is wrong with it, the URL quoted with its control characters escaped and any userinfo shown as "***".
[[nodiscard]] inline std::string base_url_problem(std::string_view url) {
  std::string shown(url);
  if (const std::size_t from = url.find("://"); from != std::string_view::npos) {
    const std::string_view authority = url.substr(from + 3, url.find_first_of("/?#", from + 3) - (from + 3));
    if (const std::size_t at = authority.rfind('@'); at != std::string_view::npos) shown.replace(from + 3, at, "***");
  }
  const auto control_or_space = [](char c) { return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f; };
  std::string quoted = "\"";
  for (const char c : shown) {
    const auto byte = static_cast<unsigned char>(c);
    if (!control_or_space(c)) {
      quoted += c;
      continue;
    }
    constexpr char hex[] = "0123456789abcdef";
    if (c == ' ') quoted += ' ';
    else if (c == '\r') quoted += "\\r";
    else if (c == '\n') quoted += "\\n";
    else if (c == '\t') quoted += "\\t";
    else quoted.append("\\x").append(1, hex[byte >> 4]).append(1, hex[byte & 0xf]);
  }
  quoted += '"';
  if (std::any_of(url.begin(), url.end(), control_or_space)) return quoted + " holds a space or a control character";
  const std::size_t scheme_end = url.find("://");
  const std::string_view scheme = url.substr(0, scheme_end);
  if (scheme_end == std::string_view::npos ||
      !(llmretry::detail::iequals(scheme, "http") || llmretry::detail::iequals(scheme, "https")))
    return quoted + " is not an http:// or https:// URL";
  std::string_view authority = url.substr(scheme_end + 3);
  authority = authority.substr(0, authority.find_first_of("/?#"));
  if (const std::size_t at = authority.rfind('@'); at != std::string_view::npos) authority.remove_prefix(at + 1);
  if (authority.empty() || authority.front() == ':') return quoted + " names no host";
  std::optional<std::string_view> port;  // after the host: a bracketed IPv6 address, or a name without ':'
  if (authority.front() == '[') {
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos || close == 1) return quoted + " has an IPv6 address without its ']'";
    std::string_view address = authority.substr(1, close - 1);
    address = address.substr(0, address.find("%25"));  // a zone, as in [fe80::1%25eth0]
    in6_addr parsed{};
    if (::inet_pton(AF_INET6, std::string(address).c_str(), &parsed) != 1)
      return quoted + " has a bracketed host that is no IPv6 address";
    const std::string_view rest = authority.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return quoted + " has something after its IPv6 address's ']'";
    if (!rest.empty()) port = rest.substr(1);
  } else if (authority.find_first_of("[]") != std::string_view::npos) {
    return quoted + " has a '[' or ']' outside an IPv6 address";
  } else if (const std::size_t colon = authority.find(':'); colon != std::string_view::npos) {
    port = authority.substr(colon + 1);
  }
  if (port && port_number(*port).value_or(0) < 1) return quoted + " has a port that is not a number in [1, 65535]";
  return {};
}

/// One row of the model table.
struct ModelRow {
  Format format = Format::openai;  ///< the API the upstream speaks, and the routes that reach the model
  std::string upstream;            ///< the base URL; empty: the relay's --upstream (or --anthropic-upstream)
  std::string api_key_env;  ///< the environment variable holding the key; empty: OPENAI_API_KEY (ANTHROPIC_API_KEY)
  std::optional<std::int64_t> rpm;
  std::optional<std::int64_t> tpm;
  std::optional<int> concurrency;
  std::string fallback;  ///< the model of the table to move to; empty: none
  /// What pressure on its first upstream does to its requests, each change recorded in the answer's
  /// x-llmretry-degraded header and in llm_relay_degraded_total.
  llmretry::PressureRules under_pressure;
};

/// The model table, by model name.
using ModelTable = std::map<std::string, ModelRow>;

/// One client of the relay, known by its key: whom its requests are for and the classes it may ask.
struct ClientRow {
  std::string key_env;                                            ///< the environment variable holding the key it sends
  llmretry::Priority priority = llmretry::Priority::interactive;  ///< its class, and the highest it may ask
  double weight = 1.0;  ///< its weight among tenants (Precedence::weight), in [0.001, 1000]
};

/// The clients, by name: the tenant their requests are for.
using ClientTable = std::map<std::string, ClientRow>;

/// The most clients a config names: as many as admission keeps tenant accounts (TenantShares::max_tenants).
inline constexpr std::size_t max_clients = 64;

/// The config file: the models served (empty: every model, to --upstream) and the clients known by key
/// (empty: LLMRETRY_RELAY_CLIENT_KEY alone, or no key).
struct Config {
  ModelTable models;
  ClientTable clients;
  nlohmann::json models_source;  ///< "models" as written (null when absent): a reload that changes only clients
                                 ///< keeps the running routes
};

namespace detail {

/// Returns the whole number `row[field]` in [low, high], or nullopt when absent. Throws ConfigError.
inline std::optional<std::int64_t> bounded_number(const nlohmann::json& row, const char* field, std::int64_t low,
                                                  std::int64_t high, const std::string& at) {
  const auto found = row.find(field);
  if (found == row.end()) return std::nullopt;
  const bool whole = found->is_number_integer();
  if (!whole || found->get<std::int64_t>() < low || found->get<std::int64_t>() > high)
    throw ConfigError(at + field + ": must be a whole number in [" + std::to_string(low) + ", " + std::to_string(high) +
                      "]");
  return found->get<std::int64_t>();
}

/// Returns the non-empty string `row[field]`, or "" when absent. Throws ConfigError.
inline std::string optional_string(const nlohmann::json& row, const char* field, const std::string& at) {
  const auto found = row.find(field);
  if (found == row.end()) return {};
  if (!found->is_string() || found->get_ref<const std::string&>().empty())
    throw ConfigError(at + field + ": must be a non-empty string");
  return found->get<std::string>();
}

/// Returns the model table of `models` (the config file's "models", read from `file`). Throws ConfigError.
inline ModelTable model_table(const nlohmann::json& models, const std::string& file) {
  if (!models.is_object() || models.empty()) throw ConfigError(file + ": models: must be a non-empty object of models");
  ModelTable table;
  for (const auto& [name, row] : models.items()) {
    const std::string at = file + ": models." + name + ".";
    if (!row.is_object()) throw ConfigError(file + ": models." + name + ": must be an object");
    for (const auto& field : row.items()) {
      static const std::set<std::string> known{"format", "upstream",    "api_key_env", "rpm",
                                               "tpm",    "concurrency", "fallback",    "under_pressure"};
      if (known.count(field.key()) == 0)
        throw ConfigError(at + field.key() +
                          ": unknown field (expected format, upstream, api_key_env, rpm, tpm, concurrency, fallback, "
                          "under_pressure)");
    }
    ModelRow parsed;
    const std::string format = detail::optional_string(row, "format", at);
    if (format == "anthropic") parsed.format = Format::anthropic;
    else if (!format.empty() && format != "openai")
      throw ConfigError(at + "format: must be \"openai\" or \"anthropic\"");
    parsed.upstream = detail::optional_string(row, "upstream", at);
    if (const std::string problem = parsed.upstream.empty() ? std::string() : base_url_problem(parsed.upstream);
        !problem.empty())
      throw ConfigError(at + "upstream: " + problem);
    parsed.api_key_env = detail::optional_string(row, "api_key_env", at);
    parsed.rpm = detail::bounded_number(row, "rpm", 1, 1'000'000'000, at);
    parsed.tpm = detail::bounded_number(row, "tpm", 1, 1'000'000'000'000, at);
    if (const auto concurrency = detail::bounded_number(row, "concurrency", 1, 100'000, at))
      parsed.concurrency = static_cast<int>(*concurrency);
    parsed.fallback = detail::optional_string(row, "fallback", at);
    if (const auto rules = row.find("under_pressure"); rules != row.end()) {
      try {
        parsed.under_pressure = llmretry::json::pressure_rules(*rules, "models." + name + ".under_pressure");
      } catch (const std::invalid_argument& error) {
        throw ConfigError(file + ": " + error.what());
      }
    }
    table.emplace(name, std::move(parsed));
  }
  for (const auto& [name, row] : table) {
    if (!row.fallback.empty() && table.count(row.fallback) == 0)
      throw ConfigError(file + ": models." + name + ".fallback: \"" + row.fallback + "\" is not a model of the table");
    if (!row.fallback.empty() && table.at(row.fallback).format != row.format)
      throw ConfigError(file + ": models." + name + ".fallback: \"" + row.fallback + "\" speaks " +
                        to_string(table.at(row.fallback).format) + ", \"" + name + "\" " + to_string(row.format));
  }
  for (const auto& [name, row] : table) {
    for (std::size_t level = 0; level < row.under_pressure.levels.size(); ++level) {
      const auto& rule = row.under_pressure.levels[level];
      const std::string here = file + ": models." + name + ".under_pressure." +
                               llmretry::to_string(static_cast<llmretry::Pressure>(level + 1));
      if (rule && rule->fallback && row.fallback.empty())
        throw ConfigError(here + ".fallback: the model has no fallback to answer from");
      if (!rule || rule->model.empty()) continue;
      const std::string& to = rule->model;
      const std::string at = here + ".model: \"" + to + "\" ";
      if (table.count(to) == 0) throw ConfigError(at + "is not a model of the table");
      if (to == name) throw ConfigError(at + "is the model itself");
      if (table.at(to).format != row.format) throw ConfigError(at + "speaks " + to_string(table.at(to).format));
    }
  }
  for (const auto& [name, row] : table) {
    std::set<std::string> seen{name};
    for (std::string next = row.fallback; !next.empty(); next = table.at(next).fallback) {
      if (!seen.insert(next).second)
        throw ConfigError(file + ": models." + name + ".fallback: the fallbacks make a cycle through \"" + next + "\"");
    }
  }
  return table;
}

/// Returns the client table of `clients` (the config file's "clients", read from `file`). Throws ConfigError.
inline ClientTable client_table(const nlohmann::json& clients, const std::string& file) {
  if (!clients.is_object() || clients.empty())
    throw ConfigError(file + ": clients: must be a non-empty object of clients");
  if (clients.size() > max_clients)
    throw ConfigError(file + ": clients: at most " + std::to_string(max_clients) +
                      " (each a tenant with an account of its own in admission)");
  ClientTable table;
  for (const auto& [name, row] : clients.items()) {
    const std::string at = file + ": clients." + name + ".";
    if (!llmretry_tools::is_plain_name(name, 64))
      throw ConfigError(file + ": clients.\"" + name +
                        "\": a client's name (its tenant) must be 1 to 64 letters, digits, '.', '_' or '-'");
    if (name == "other")
      throw ConfigError(file + ": clients.other: the name of the account the tenants past the first 64 share");
    if (!row.is_object()) throw ConfigError(file + ": clients." + name + ": must be an object");
    for (const auto& field : row.items())
      if (field.key() != "key_env" && field.key() != "priority" && field.key() != "weight")
        throw ConfigError(at + field.key() + ": unknown field (expected key_env, priority, weight)");
    ClientRow parsed;
    parsed.key_env = optional_string(row, "key_env", at);
    if (parsed.key_env.empty()) throw ConfigError(at + "key_env: missing (the variable holding the client's key)");
    if (const std::string priority = optional_string(row, "priority", at); !priority.empty()) {
      const auto named = llmretry::priority_from_string(priority);
      if (!named) throw ConfigError(at + "priority: must be interactive, standard or batch");
      parsed.priority = *named;
    }
    if (const auto weight = row.find("weight"); weight != row.end()) {
      if (!weight->is_number() || !(weight->get<double>() >= 0.001) || !(weight->get<double>() <= 1000.0))
        throw ConfigError(at + "weight: must be a number in [0.001, 1000]");
      parsed.weight = weight->get<double>();
    }
    table.emplace(name, std::move(parsed));
  }
  return table;
}

/// Returns the JSON `text` of `file` parsed. Throws ConfigError when it is no JSON, or when a name is given
/// twice in one object (JSON would keep the last): naming it with the objects around it ("models.chat.rpm").
inline nlohmann::json parse_once_named(const std::string& text, const std::string& file) {
  struct Open {
    std::set<std::string> names;
    std::string last;  ///< the name read last, whose value may be the next object
  };
  std::vector<Open> open;
  std::optional<std::string> twice;
  const auto check = [&](int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start) open.emplace_back();
    if (event == Event::object_end && !open.empty()) open.pop_back();
    if (event != Event::key || twice || open.empty()) return true;
    auto name = parsed.get<std::string>();
    if (!open.back().names.insert(name).second) {
      twice.emplace();
      for (std::size_t i = 0; i + 1 < open.size(); ++i) twice->append(open[i].last).append(".");
      twice->append(name);
    }
    open.back().last = std::move(name);
    return true;
  };
  auto document = nlohmann::json::parse(text, check, /*allow_exceptions=*/false);
  if (document.is_discarded()) throw ConfigError(file + ": not JSON");
  if (twice) throw ConfigError(file + ": " + *twice + ": given twice (JSON keeps only the last)");
  return document;
}

}  // namespace detail

/// Returns the config of the JSON `text` read from `file`, such as
/// {"models": {"deepseek-chat": {"upstream": "https://...", "api_key_env": "DEEPSEEK_KEY", "rpm": 600,
/// "fallback": "gemini-flash"}, "claude-sonnet-4-5": {"format": "anthropic"}},
///  "clients": {"support": {"key_env": "SUPPORT_KEY"}, "nightly": {"key_env": "NIGHTLY_KEY", "priority": "batch"}}}.
/// Throws ConfigError naming the file, the model or client and the field: not JSON, a name given twice in one
/// object, neither models nor clients, an unknown field, a field of the wrong type or out of range, a fallback naming
/// no model or one of another format, a cycle, a client name that is no tenant name.
inline Config parse_config(const std::string& text, const std::string& file) {
  const auto document = detail::parse_once_named(text, file);
  if (!document.is_object()) throw ConfigError(file + ": must be a JSON object");
  for (const auto& item : document.items())
    if (item.key() != "models" && item.key() != "clients")
      throw ConfigError(file + ": " + item.key() + ": unknown field (expected models, clients)");
  const auto models = document.find("models");
  const auto clients = document.find("clients");
  if (models == document.end() && clients == document.end())
    throw ConfigError(file + ": models: missing (or clients: a config names its models, its clients or both)");
  Config config;
  if (models != document.end()) {
    config.models = detail::model_table(*models, file);
    config.models_source = *models;
  }
  if (clients != document.end()) config.clients = detail::client_table(*clients, file);
  return config;
}

/// Returns the config of the file `path`. Throws ConfigError when it cannot be read or is invalid.
inline Config read_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  return parse_config(text.str(), path);
}

}  // namespace relay

#endif  // LLMRETRY_RELAY_CONFIG_HPP
