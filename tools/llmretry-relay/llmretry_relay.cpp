// llmretry-relay: an OpenAI-compatible relay on 127.0.0.1 that paces, retries, falls back and
// deduplicates the requests of every client of one machine, with /metrics.

#include <llmretry/metrics/registry.hpp>
#include <llmretry/store/idempotency_store.hpp>
#if LLMRETRY_RELAY_REDIS
#include <llmretry/json/usage.hpp>
#include <llmretry/redis/connection.hpp>
#include <llmretry/redis/rate_limiter.hpp>
#endif

#include <CLI/CLI.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/system/system_error.hpp>

#include <pthread.h>
#include <sys/resource.h>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/command_line.hpp"
#include "common/program.hpp"
#include "config.hpp"
#include "forward.hpp"
#include "front.hpp"
#include "routes.hpp"
#include "security.hpp"
#include "server.hpp"
#if LLMRETRY_RELAY_REDIS
#include "common/redis_pool.hpp"
#endif

namespace {

using llmretry_tools::add_duration_option;
using llmretry_tools::environment;
using llmretry_tools::UsageError;

constexpr const char* description =
    R"(Serves POST /v1/chat/completions, /v1/responses and /v1/embeddings on --listen and sends each
request to --upstream (default OPENAI_BASE_URL, else https://api.openai.com/v1) with OPENAI_API_KEY, and
POST /v1/messages to --anthropic-upstream with ANTHROPIC_API_KEY (or per model, --config): paced
under --rpm/--tpm (or the limits the upstream's headers announce), retried (RetryPolicy::interactive()),
moved to the --fallback URLs in order when the upstream fails or has no capacity, and answered 429 with
Retry-After when no capacity comes within --max-wait. A request with an Idempotency-Key is sent once: a
duplicate gets the stored answer (Idempotent-Replayed: true), 409 while the first is in flight, 422 with
another body. GET /healthz answers "ok", GET /metrics the Prometheus metrics.)";

constexpr const char* footer = R"(
Environment: OPENAI_BASE_URL, OPENAI_API_KEY, ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY (keys never printed);
LLMRETRY_RELAY_CLIENT_KEY or the clients of --config (each with its key), required to listen on an
address other than loopback: clients then send Authorization: Bearer <key> (or x-api-key: <key>);
LLMRETRY_RELAY_METRICS_KEY, when set, the only key that reads /metrics.
Durations carry their unit (h, m, s, ms, us, ns): 500ms, 8s, 1m30s; 0 alone may go without.
Exit status: 0 stopped by SIGINT or SIGTERM, 1 failed to serve, 2 bad usage or configuration.)";

struct Options {
  std::string listen = "127.0.0.1:8080";
  std::string upstream;
  std::string anthropic_upstream;
  std::vector<std::string> fallbacks;
  relay::Pace pace;
  std::size_t max_body = std::size_t{1} << 20;
  std::string redis;
  std::chrono::milliseconds redis_timeout{1000};
  std::string config;
  std::chrono::milliseconds idempotency_lease = llmretry::store::IdempotencyOptions{}.lease;
  std::size_t threads = std::max(1U, std::thread::hardware_concurrency());
  std::size_t max_connections = relay::FrontLimits{}.max_connections;
  std::size_t max_requests = relay::ServerSettings{}.max_requests;
  std::chrono::milliseconds request_timeout = relay::FrontLimits{}.request_timeout;
  std::chrono::milliseconds grace{30'000};
  std::chrono::milliseconds coalesce_wait{0};
  std::string default_priority = "interactive";
  std::size_t max_body_memory_mb = relay::FrontLimits{}.max_body_memory >> 20;
  std::size_t max_stored_mb = 256;
  std::string upstream_ca;
  std::optional<std::size_t> upstream_connections;
};

/// Throws UsageError unless `path` (--upstream-ca) is a regular file the relay can read, of at most 16 MiB,
/// holding a PEM certificate: a bad one would otherwise fail every https request.
void check_authorities(const std::string& path) {
  constexpr std::uintmax_t most = std::uintmax_t{16} << 20;
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error))
    throw UsageError("--upstream-ca " + path + ": not a regular file");
  const std::uintmax_t size = std::filesystem::file_size(path, error);
  if (error) throw UsageError("--upstream-ca " + path + ": cannot be read");
  if (size > most) throw UsageError("--upstream-ca " + path + ": larger than 16 MiB");
  std::ifstream file(path, std::ios::binary);
  std::string text(static_cast<std::size_t>(size), '\0');
  if (!file.read(text.data(), static_cast<std::streamsize>(text.size())))
    throw UsageError("--upstream-ca " + path + ": cannot be read");
  if (text.find("-----BEGIN CERTIFICATE-----") == std::string::npos)
    throw UsageError("--upstream-ca " + path + ": holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
}

/// Returns the options of the command line; exits with status 0 after --help. Throws UsageError.
Options parse(int argc, char** argv) {
  using namespace std::chrono_literals;
  Options options;
  CLI::App app{description, "llmretry-relay"};
  app.footer(footer);
  app.add_option("--listen", options.listen, "HOST:PORT to serve on (default 127.0.0.1:8080; port 0: any free one)");
  app.add_option("--upstream", options.upstream, "base URL of the provider (default OPENAI_BASE_URL)");
  app.add_option("--anthropic-upstream", options.anthropic_upstream,
                 "base URL of the provider of POST /v1/messages (default ANTHROPIC_BASE_URL, else "
                 "https://api.anthropic.com when ANTHROPIC_API_KEY is set; else /v1/messages is not served)");
  app.add_option("--fallback", options.fallbacks,
                 "base URL to try when the upstream fails (repeatable, in order); it receives OPENAI_API_KEY too");
  app.add_option("--rpm", options.pace.rpm, "requests per minute, enforced per second (default: learned)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1'000'000'000}));
  app.add_option("--tpm", options.pace.tpm, "tokens per minute, enforced per second (default: learned)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1'000'000'000'000}));
  app.add_option("--concurrency", options.pace.concurrency, "requests in flight upstream at most (default: no limit)")
      ->check(CLI::Range(1, 100'000));
  add_duration_option(app, "--max-wait", options.pace.max_wait, 0ms, 1h,
                      "longest wait for capacity before a 429 (default 8s, 0 to 1h)");
  app.add_option("--max-body", options.max_body, "largest request body in bytes (default 1048576)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30));
  app.add_option("--redis", options.redis,
                 "redis://HOST[:PORT]: share the idempotency keys and the limits with the relays on it");
  add_duration_option(app, "--redis-timeout", options.redis_timeout, 10ms, 10min,
                      "with --redis, the longest wait for Redis to connect or to answer one command (default 1s, "
                      "10ms to 10m); past it Redis counts as out of reach for that request")
      ->needs("--redis");
  app.add_option("--config", options.config,
                 "JSON config: the model table (per model its upstream, key variable, limits, fallback, under_pressure "
                 "rules) and the clients (per client its key variable, class, weight)");
  app.add_option("--upstream-ca", options.upstream_ca,
                 "a PEM file of the certificate authorities that vouch for https upstreams, in place of the "
                 "system's for every upstream (default: the system's)")
      ->check(CLI::ExistingFile);
  app.add_option("--upstream-connections", options.upstream_connections,
                 "connections the relay opens to each upstream host at once, at most, shared out between its "
                 "event-loop threads (default: no limit); requests beyond wait for one, or share one over HTTP/2 "
                 "(an https upstream that offers it), 100 streams each")
      ->check(CLI::Range(std::size_t{1}, std::size_t{100'000}));
  app.add_option("--threads", options.threads, "event-loop threads (default: one per core)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{256}));
  app.add_option("--max-connections", options.max_connections,
                 "client connections open at once; one more is answered 503 and closed (default 10000)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000}));
  app.add_option("--max-requests", options.max_requests,
                 "requests in the relay's hands at once; one more is answered 503 with Retry-After (default 10000)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{10'000'000}));
  add_duration_option(app, "--request-timeout", options.request_timeout, 10ms, 1h,
                      "the most a client may take to send a whole request; a slower one is cut (default 10s, 10ms "
                      "to 1h)");
  app.add_option("--max-body-memory", options.max_body_memory_mb,
                 "MiB of request bodies held at once; one more is answered 503 before it is read (default 256)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20));
  app.add_option("--max-stored", options.max_stored_mb,
                 "MiB of answers kept under their Idempotency-Key in memory; past it the oldest are forgotten first "
                 "(default 256; with --redis, Redis's maxmemory bounds them)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20));
  add_duration_option(app, "--coalesce-wait", options.coalesce_wait, 0ms, 10min,
                      "how long a duplicate of a request in flight (same Idempotency-Key and body) waits for the "
                      "first's answer instead of an immediate 409 (default 0: 409 at once; at most 10m)");
  app.add_option("--default-priority", options.default_priority,
                 "the class of a request without X-LLMRetry-Priority: interactive (default), standard or batch")
      ->check(CLI::IsMember({"interactive", "standard", "batch"}));
  add_duration_option(app, "--grace", options.grace, 0ms, 1h,
                      "after SIGTERM, the most the requests in flight are given to finish (default 30s, 0 to 1h)");
  add_duration_option(app, "--idempotency-lease", options.idempotency_lease, 30ms, 24h,
                      "the idempotency claims' lease (for tests)")
      ->group("");  // hidden: the default suits every deployment
  llmretry_tools::parse_command_line(app, argc, argv);
  if (options.upstream_connections && *options.upstream_connections < options.threads)
    throw UsageError("--upstream-connections " + std::to_string(*options.upstream_connections) +
                     ": fewer than the event-loop threads (" + std::to_string(options.threads) +
                     "), each of which holds connections of its own: give at least as many, or fewer --threads");
  if (options.max_body > options.max_body_memory_mb << 20)
    throw UsageError("--max-body " + std::to_string(options.max_body) + ": more than --max-body-memory (" +
                     std::to_string(options.max_body_memory_mb) +
                     " MiB), the bodies held at once: a chunked body is given room for --max-body before it is read, "
                     "so none would ever be admitted");
  if (!options.upstream_ca.empty()) check_authorities(options.upstream_ca);
  return options;
}

/// Returns the host and port of --listen "HOST:PORT". Throws UsageError.
std::pair<std::string, int> listen_address(const std::string& listen) {
  const auto colon = listen.rfind(':');
  const auto port = colon == std::string::npos ? std::nullopt : relay::port_number(listen.substr(colon + 1));
  if (colon == 0 || !port) throw UsageError("--listen: '" + listen + "' is not HOST:PORT (such as 127.0.0.1:8080)");
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, *port};
}

/// How many connections to Redis the relay opens with --redis: each runs one command at a time.
constexpr std::size_t redis_connections = 8;

/// What the relay keeps in Redis with --redis: the idempotency keys, and the limits of the upstreams that
/// have some, shared by every relay on the same server.
class RedisState {
 public:
  /// Connects `connections` times to the server of `url` ("redis://HOST[:PORT]"), waiting at most `timeout`
  /// to connect and for each reply; its idempotency claims have `idempotency`. Throws UsageError for a bad
  /// URL, redis::RedisError when it cannot connect.
  RedisState(const std::string& url, std::chrono::milliseconds timeout,
             const llmretry::store::IdempotencyOptions& idempotency, std::size_t connections) {
#if LLMRETRY_RELAY_REDIS
    llmretry::redis::Options redis;
    try {
      redis = llmretry::redis::options_from_url(url);
    } catch (const std::invalid_argument& error) {
      throw UsageError(std::string("--redis: ") + error.what());
    }
    redis.connect_timeout = redis.command_timeout = timeout;
    pool_ = std::make_unique<llmretry_tools::RedisPool>(redis, connections);
    idempotency_ = std::make_unique<llmretry_tools::PooledIdempotencyStore>(*pool_, idempotency);
#else
    static_cast<void>(timeout);
    static_cast<void>(idempotency);
    static_cast<void>(connections);
    throw UsageError("--redis " + url + ": this build has no Redis support");
#endif
  }

  llmretry::store::IdempotencyStore& idempotency() { return *idempotency_; }

  /// Returns what shares each upstream's pacing through Redis (a redis::RateLimiter on each connection, used
  /// in turn).
  relay::ShareLimits share_limits() {
#if LLMRETRY_RELAY_REDIS
    return [this](const std::string& model, const std::string& base_url, const std::string& api_key,
                  const llmretry::Limits& limits) -> std::shared_ptr<llmretry::SharedPacing> {
      return std::make_shared<llmretry_tools::PooledRateLimiter>(
          *pool_, llmretry_tools::shared_pacing_name(model, base_url, api_key), limits);
    };
#else
    return {};
#endif
  }

 private:
#if LLMRETRY_RELAY_REDIS
  std::unique_ptr<llmretry_tools::RedisPool> pool_;
#endif
  std::unique_ptr<llmretry::store::IdempotencyStore> idempotency_;
};

int run(const Options& options) {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);  // before any thread starts: they inherit it
  const auto [host, port] = listen_address(options.listen);
  relay::ServerSettings settings;
  settings.max_requests = options.max_requests;
  settings.coalesce_wait = options.coalesce_wait;
  settings.default_priority = *llmretry::priority_from_string(options.default_priority);
  relay::FrontLimits limits;
  limits.max_body = options.max_body;
  limits.max_connections = options.max_connections;
  limits.request_timeout = options.request_timeout;
  limits.max_body_memory = options.max_body_memory_mb << 20;
  const std::string shared_key = environment("LLMRETRY_RELAY_CLIENT_KEY");
  const std::string metrics_key = environment("LLMRETRY_RELAY_METRICS_KEY");
  std::string upstream = options.upstream;
  if (upstream.empty()) upstream = environment("OPENAI_BASE_URL");
  if (upstream.empty()) upstream = "https://api.openai.com/v1";
  std::string anthropic_upstream = options.anthropic_upstream;
  if (anthropic_upstream.empty()) anthropic_upstream = environment("ANTHROPIC_BASE_URL");
  if (anthropic_upstream.empty() && !environment("ANTHROPIC_API_KEY").empty())
    anthropic_upstream = "https://api.anthropic.com";
  const auto check_base_url = [](const char* where, const std::string& url) {
    if (const std::string problem = relay::base_url_problem(url); !problem.empty())
      throw UsageError(std::string(where) + ": " + problem);
  };
  check_base_url(options.upstream.empty() ? "OPENAI_BASE_URL" : "--upstream", upstream);
  if (!anthropic_upstream.empty())
    check_base_url(options.anthropic_upstream.empty() ? "ANTHROPIC_BASE_URL" : "--anthropic-upstream",
                   anthropic_upstream);
  for (const std::string& fallback : options.fallbacks) check_base_url("--fallback", fallback);
  const relay::Environment env = [](const std::string& name) { return environment(name); };
  llmretry::store::IdempotencyOptions idempotency_options;
  idempotency_options.lease = options.idempotency_lease;
  idempotency_options.max_stored_bytes = options.max_stored_mb << 20;
  settings.idempotency_lease = options.idempotency_lease;
  std::optional<RedisState> redis;
  if (!options.redis.empty())
    redis.emplace(options.redis, options.redis_timeout, idempotency_options, redis_connections);
  settings.remote_store = redis.has_value();
  const relay::ShareLimits share = redis ? redis->share_limits() : relay::ShareLimits{};
  // The routes and the clients, read at start-up and again on SIGHUP; the `running` routes are kept (their
  // pacing, learned limits and breakers with them) when the models they were made from are unchanged.
  // Throws UsageError, ConfigError, SetupError or std::invalid_argument (a route the library refuses).
  using Served = std::pair<std::shared_ptr<const relay::Routes>, std::shared_ptr<const relay::Clients>>;
  const bool loopback = relay::is_loopback(host);
  nlohmann::json routed_models;  // the "models" the running routes were made from; null: none, the options'
  const auto read_served = [&](std::shared_ptr<const relay::Routes> running) -> Served {
    const relay::Config config = options.config.empty() ? relay::Config{} : relay::read_config(options.config);
    auto clients = std::make_shared<const relay::Clients>(shared_key, config.clients, env, metrics_key);
    if (!loopback && !clients->required())
      throw UsageError("--listen " + options.listen +
                       " is not a loopback address: set LLMRETRY_RELAY_CLIENT_KEY to the key clients must send (or "
                       "name clients in --config)");
    if (!config.models.empty() && !options.fallbacks.empty())
      throw UsageError("--fallback: with a model table in --config, each model names its fallback");
    if (config.models.empty() && environment("OPENAI_API_KEY").empty() &&
        upstream.find("api.openai.com") != std::string::npos)
      throw UsageError("OPENAI_API_KEY is not set");
    if (running && config.models_source == routed_models) return {std::move(running), std::move(clients)};
    std::shared_ptr<const relay::Routes> routes;
    if (config.models.empty())
      routes = std::make_shared<const relay::Routes>(upstream, options.fallbacks, options.pace, env, share,
                                                     anthropic_upstream);
    else
      routes =
          std::make_shared<const relay::Routes>(config.models, upstream, options.pace, env, share, anthropic_upstream);
    routed_models = config.models_source;
    return {std::move(routes), std::move(clients)};
  };
  Served served;
  try {
    served = read_served(nullptr);
  } catch (const relay::ConfigError& error) {
    throw UsageError(error.what());
  } catch (const relay::SetupError& error) {
    throw UsageError(options.config + ": " + error.what());
  } catch (const std::invalid_argument& error) {
    throw UsageError(error.what());
  }
  llmretry::store::MemoryIdempotencyStore memory_idempotency(idempotency_options);
  llmretry::store::IdempotencyStore& idempotency = redis ? redis->idempotency() : memory_idempotency;

  llmretry::metrics::Registry registry;
  // With --redis, the pacing's round trips run on a pool of their own, never on an event loop.
  std::optional<boost::asio::thread_pool> pacing_pool;
  if (redis) pacing_pool.emplace(redis_connections);
  const relay::Forwarder forwarder(registry, std::chrono::minutes{10}, pacing_pool ? &*pacing_pool : nullptr,
                                   options.upstream_ca);
  const relay::Front* serving = nullptr;  // set once the front exists
  relay::Server* answering = nullptr;
  relay::Server server(served.first, served.second, forwarder, idempotency, registry,
                       {[&registry, &serving, &answering] {
                          std::string text = registry.prometheus_text();
                          if (serving != nullptr && answering != nullptr)
                            text += relay::front_metrics(serving->stats(), answering->requests_in_flight()) +
                                    answering->own_metrics();
                          return text;
                        },
                        std::string(llmretry::metrics::prometheus_content_type)},
                       settings);

  relay::Front front(server, limits, options.threads);
  serving = &front;
  answering = &server;
  server.attach(front, options.upstream_connections);
  unsigned short bound = 0;
  try {
    boost::asio::io_context resolving;
    boost::asio::ip::tcp::resolver resolver(resolving);
    const auto found = resolver.resolve(host, std::to_string(port), boost::asio::ip::resolver_base::numeric_service);
    bound = front.listen(found.begin()->endpoint());
  } catch (const boost::system::system_error& error) {
    std::cerr << "llmretry-relay: cannot listen on " << options.listen << ": " << error.code().message() << '\n';
    return 1;
  }
  front.run();
  const bool ipv6 = host.find(':') != std::string::npos;
  std::printf("listening on http://%s%s%s:%d\n", ipv6 ? "[" : "", host.c_str(), ipv6 ? "]" : "", bound);
  std::fflush(stdout);
  // SIGHUP: the model table is read again, checked whole; a bad one leaves the running table in place.
  for (int signal = 0; sigwait(&stop_signals, &signal) == 0 && signal == SIGHUP;) {
    if (options.config.empty()) {
      std::cerr << "llmretry-relay: SIGHUP: no --config to reload\n";
      continue;
    }
    try {
      const bool keys_required = served.second->required();
      served = read_served(served.first);
      server.reload(served.first, served.second);
      if (keys_required && !served.second->required())
        std::cerr << "llmretry-relay: SIGHUP: " << options.config << " names no client: no key is required now\n";
      std::cerr << "llmretry-relay: SIGHUP: " << options.config << " reloaded\n";
    } catch (const std::exception& error) {
      std::cerr << "llmretry-relay: SIGHUP: " << options.config
                << " not reloaded, the config before stays: " << error.what() << '\n';
    }
  }
  // Stops accepting; the requests in flight end first, within the grace period.
  front.drain(options.grace, [](std::chrono::milliseconds wait) { std::this_thread::sleep_for(wait); });
  server.stop_store();  // before the workers' event loops go: its calls post back to them
  if (pacing_pool) {    // what it has not run is let go now, while the workers it holds requests of exist
    pacing_pool->stop();
    pacing_pool->join();
    pacing_pool.reset();
  }
  return 0;
}

/// Raises the limit of open files to the most the system allows this process: each client connection and
/// each upstream request holds a descriptor.
void allow_open_files() {
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) != 0 || files.rlim_cur == files.rlim_max) return;
  files.rlim_cur = files.rlim_max;
  static_cast<void>(setrlimit(RLIMIT_NOFILE, &files));
}

}  // namespace

int main(int argc, char** argv) {
  // A write to a peer that went away (hiredis writes without MSG_NOSIGNAL) must fail, not kill the relay:
  // ignored before any thread starts, which all inherit it.
  std::signal(SIGPIPE, SIG_IGN);
  allow_open_files();
  return llmretry_tools::run_main("llmretry-relay", [&] { return run(parse(argc, argv)); });
}
