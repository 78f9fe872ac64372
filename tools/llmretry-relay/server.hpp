// What llmretry-relay does with each request the front received: the client key, the routes, the checks of
// each request, the Idempotency-Key deduplication, /healthz and /metrics; the upstream call on the worker's
// asynchronous client.
#ifndef LLMRETRY_RELAY_SERVER_HPP
#define LLMRETRY_RELAY_SERVER_HPP

#include <llmretry/admission/pressure.hpp>
#include <llmretry/curl/async.hpp>
#include <llmretry/http/idempotency.hpp>
#include <llmretry/json/canonical.hpp>
#include <llmretry/json/estimate.hpp>
#include <llmretry/metrics/observer.hpp>
#include <llmretry/store/fingerprint.hpp>
#include <llmretry/store/idempotency_store.hpp>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "clients.hpp"
#include "common/labels.hpp"
#include "errors.hpp"
#include "forward.hpp"
#include "front.hpp"
#include "routes.hpp"
#include "security.hpp"
#include "stream.hpp"

namespace relay {

using llmretry_tools::BoundedLabels;

/// How the relay treats its clients.
struct ServerSettings {
  /// API requests in the relay's hands at once (received, not yet answered); one more is answered 503 with
  /// a Retry-After computed from how long requests have lately taken.
  std::size_t max_requests = 10'000;
  /// The lease of the idempotency store's claims: a claimed key is renewed every third of it while its
  /// request is in flight.
  std::chrono::milliseconds idempotency_lease = llmretry::store::IdempotencyOptions{}.lease;
  /// The largest answer kept under its Idempotency-Key; a larger one frees the key instead.
  std::size_t max_stored_answer = std::size_t{1} << 20;
  /// How long a duplicate of a request in flight (same Idempotency-Key, same body) waits for the first's
  /// answer before it is answered 409; zero: 409 at once. The first's stored answer is replayed to it; when
  /// the first stored none (a stream, a failure), the duplicate is sent itself.
  std::chrono::milliseconds coalesce_wait{0};
  /// The idempotency store makes network round trips (Redis): its calls run on a pool of threads, never on
  /// a worker.
  bool remote_store = false;
  /// The class of a request without X-LLMRetry-Priority.
  llmretry::Priority default_priority = llmretry::Priority::interactive;
};

/// The text of /metrics and its content type.
struct MetricsPage {
  std::function<std::string()> text;
  std::string content_type;
};

/// Serves the relay's routes behind a Front. Every reference must outlive it.
class Server final : public Service {
 public:
  /// `clients`: the keys required on every route but /healthz (as "Authorization: Bearer KEY" or
  /// "x-api-key: KEY").
  Server(std::shared_ptr<const Routes> routes, std::shared_ptr<const Clients> clients, const Forwarder& forwarder,
         llmretry::store::IdempotencyStore& idempotency, llmretry::metrics::Observer& observer, MetricsPage metrics,
         ServerSettings settings)
      : routes_(std::move(routes)),
        clients_(std::move(clients)),
        forwarder_(forwarder),
        idempotency_(idempotency),
        observer_(observer),
        metrics_(std::move(metrics)),
        settings_(std::move(settings)) {
    if (settings_.remote_store) store_pool_.emplace(8);
  }
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  Server(Server&&) = delete;
  Server& operator=(Server&&) = delete;
  ~Server() override {
    if (store_pool_) store_pool_->join();
  }

  /// Gives each worker of `front` its upstream client. `upstream_connections`: the most connections open to
  /// each upstream host for the whole relay, shared out between the workers (unset: no limit). Requires at
  /// least one a worker. Before the front runs.
  void attach(Front& front, std::optional<std::size_t> upstream_connections = std::nullopt) {
    const std::size_t workers = front.workers().size();
    std::size_t index = 0;
    for (auto& worker : front.workers()) {
      llmretry::curl::ClientOptions upstream;
      if (upstream_connections)
        upstream.max_host_connections = *upstream_connections / workers + (index < *upstream_connections % workers);
      ++index;
      auto client = std::make_shared<llmretry::curl::AsyncClient>(worker->context().get_executor(), upstream);
      upstream_clients_.push_back(client.get());
      worker->local = std::move(client);
    }
  }

  /// Serves the requests that arrive from now on with `routes` and `clients` (a reloaded config); the
  /// requests in flight finish on the routes they started with. Thread-safe.
  void reload(std::shared_ptr<const Routes> routes, std::shared_ptr<const Clients> clients) {
    std::atomic_store(&clients_, std::move(clients));
    std::atomic_store(&routes_, std::move(routes));
  }

  /// Stops the idempotency store's pool (with --redis), dropping what it has not run: call it once the
  /// front has stopped, before it is destroyed.
  void stop_store() {
    if (!store_pool_) return;
    store_pool_->stop();
    store_pool_->join();
    store_pool_.reset();
  }

  /// Returns the API requests in the relay's hands now.
  [[nodiscard]] std::size_t requests_in_flight() const noexcept { return in_flight_; }

  std::optional<Reply> check(const RequestHead& head, std::optional<std::uint64_t> /*body_bytes*/) override {
    const std::string_view path = path_of(head);
    if (path == "/healthz") {
      if (head.method() != http::verb::get && head.method() != http::verb::head) return wrong_method("GET, HEAD");
      return std::nullopt;
    }
    if (head.count(http::field::authorization) > 1 || head.count("x-api-key") > 1)
      return reply_of(bad_request("Authorization and x-api-key: send a key once", "invalid_header"), format_of(path));
    const auto clients = std::atomic_load(&clients_);
    if (path == "/metrics") {
      if (!clients->reads_metrics(head[http::field::authorization], head["x-api-key"]))
        return reply_of({401,
                         "missing or wrong key for /metrics: send Authorization: Bearer <key> (or x-api-key: <key>) "
                         "with LLMRETRY_RELAY_METRICS_KEY, or without it any client key",
                         "invalid_request_error", "invalid_api_key"});
      if (head.method() != http::verb::get) return wrong_method("GET");
      return std::nullopt;
    }
    if (!clients->caller(head[http::field::authorization], head["x-api-key"]).admitted)
      return reply_of(wrong_key(), format_of(path));
    if (is_api(path)) {
      if (head.method() != http::verb::post) return wrong_method("POST");
      return std::nullopt;
    }
    return reply_of({404,
                     "unknown route " + std::string(path) +
                         " (the relay serves POST /v1/chat/completions, /v1/responses, /v1/embeddings, /v1/messages, "
                         "GET /healthz, /metrics)",
                     "invalid_request_error", "unknown_url"});
  }

  void serve(Request request, std::shared_ptr<Exchange> exchange) override {
    const std::string_view path = path_of(request.head);
    if (path == "/healthz") return exchange->send({200, {{"Content-Type", "text/plain"}}, "ok\n"});
    if (path == "/metrics") return exchange->send({200, {{"Content-Type", metrics_.content_type}}, metrics_.text()});
    if (in_flight_.fetch_add(1) >= settings_.max_requests) {
      --in_flight_;
      Incoming in;
      in.path = std::string(path);
      in.format = format_of(path);
      Reply busy = refusal(in, {503,
                                "the relay holds as many requests as it serves (--max-requests); retry after " +
                                    std::to_string(retry_after_seconds()) + " s",
                                "service_unavailable", "relay_busy"});
      busy.headers.emplace_back("Retry-After", std::to_string(retry_after_seconds()));
      return exchange->send(std::move(busy));
    }
    auto held = std::make_shared<InFlight>(*this, std::move(exchange));  // counted in in_flight_ above
    check_and_send(std::move(request), std::move(held));
  }

 private:
  /// One API request in the relay's hands: answered once through its exchange, then counted out (its
  /// duration taught to the Retry-After of refusals).
  class InFlight {
   public:
    InFlight(Server& server, std::shared_ptr<Exchange> exchange)
        : server_(server), exchange_(std::move(exchange)), since_(std::chrono::steady_clock::now()) {}
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;
    InFlight(InFlight&&) = delete;
    InFlight& operator=(InFlight&&) = delete;
    ~InFlight() {
      server_.learn_duration(std::chrono::steady_clock::now() - since_);
      --server_.in_flight_;
    }
    Exchange& exchange() noexcept { return *exchange_; }

   private:
    Server& server_;
    std::shared_ptr<Exchange> exchange_;
    std::chrono::steady_clock::time_point since_;
  };
  using Held = std::shared_ptr<InFlight>;

  static bool is_api(std::string_view path) noexcept {
    return path == "/v1/chat/completions" || path == "/v1/responses" || path == "/v1/embeddings" ||
           path == "/v1/messages";
  }

  /// Returns the API a route speaks: Anthropic's for /v1/messages, else OpenAI's.
  static Format format_of(std::string_view path) noexcept {
    return path == "/v1/messages" ? Format::anthropic : Format::openai;
  }

  /// Returns the path of the request's target, without its query.
  static std::string_view path_of(const RequestHead& head) noexcept {
    const std::string_view target(head.target().data(), head.target().size());
    return target.substr(0, target.find('?'));
  }

  static ErrorReply wrong_key() {
    return {401,
            "missing or wrong client key: send Authorization: Bearer <your key> (or x-api-key: <your key>): "
            "LLMRETRY_RELAY_CLIENT_KEY, or a client's of the relay's config",
            "invalid_request_error", "invalid_api_key"};
  }

  static Reply wrong_method(const char* allowed) {
    Reply reply = reply_of(
        {405, std::string("method not allowed: use ") + allowed, "invalid_request_error", "method_not_allowed"});
    reply.headers.emplace_back("Allow", allowed);
    return reply;
  }

  /// Returns the Retry-After of a refusal for want of room: how long requests lately took, 1 to 60 s.
  [[nodiscard]] std::int64_t retry_after_seconds() const noexcept {
    const double seconds = std::ceil(typical_seconds_.load(std::memory_order_relaxed));
    return static_cast<std::int64_t>(std::clamp(seconds, 1.0, 60.0));
  }

  /// Folds `took` into the typical duration of a request (a moving average).
  void learn_duration(std::chrono::steady_clock::duration took) noexcept {
    const double seconds = std::chrono::duration<double>(took).count();
    double typical = typical_seconds_.load(std::memory_order_relaxed);
    while (!typical_seconds_.compare_exchange_weak(typical, typical + (seconds - typical) / 16,
                                                   std::memory_order_relaxed)) {}
  }

  /// Checks the request, then answers it from the idempotency store or sends it upstream.
  void check_and_send(Request request, Held held) {
    auto in = std::make_shared<Incoming>();
    in->path = std::string(path_of(request.head));
    in->format = format_of(in->path);
    const auto refuse = [&](const ErrorReply& error) { held->exchange().send(refusal(*in, error)); };
    if (llmretry::json::nested_deeper_than(request.body, max_json_depth))
      return refuse(
          bad_request("the body nests arrays and objects deeper than " + std::to_string(max_json_depth) + " levels",
                      "invalid_body"));
    try {
      in->json = nlohmann::json::parse(request.body);
    } catch (const nlohmann::json::exception& error) {  // a syntax error, or a number out of range (1e400)
      return refuse(bad_request(std::string("the body is not valid JSON: ") + error.what(), "invalid_json"));
    }
    if (!in->json.is_object()) return refuse(bad_request("the body must be a JSON object", "invalid_body"));
    const auto model = in->json.find("model");
    if (model == in->json.end()) return refuse(bad_request("model: missing", "missing_model"));
    if (!model->is_string() || model->get_ref<const std::string&>().empty())
      return refuse(bad_request("model: must be a non-empty string", "invalid_model"));
    in->model = model->get<std::string>();
    in->routes = std::atomic_load(&routes_);  // held until the request is answered
    const Routes& routes = *in->routes;
    const Chain* chain = routes.chain_for(in->model, in->format);
    in->model_label = !routes.has_model_table() ? model_labels_.of(in->model)
                      : chain != nullptr        ? in->model
                                                : "unknown";
    const auto stream = in->json.find("stream");
    if (stream != in->json.end() && !stream->is_boolean() && !stream->is_null())
      return refuse(bad_request("stream: must be true or false", "invalid_stream"));
    const bool streamed = stream != in->json.end() && *stream == true;
    const auto keys = request.head.equal_range("Idempotency-Key");
    if (keys.first != keys.second) {
      in->idempotency_key = std::string(keys.first->value());
      if (std::next(keys.first) != keys.second || !is_header_token(in->idempotency_key))
        return refuse(bad_request("Idempotency-Key: must be sent once, 1 to 255 visible ASCII characters",
                                  "invalid_idempotency_key"));
    }
    std::string priority_name;
    for (const auto& [field, into] :
         {std::pair{"x-llmretry-priority", &priority_name}, std::pair{"x-llmretry-tenant", &in->tenant}}) {
      const auto found = request.head.equal_range(field);
      if (found.first == found.second) continue;
      *into = std::string(found.first->value());
      if (std::next(found.first) != found.second || into->size() > 64 || !is_header_token(*into))
        return refuse(bad_request(std::string(field) + ": must be sent once, 1 to 64 visible ASCII characters",
                                  "invalid_header"));
    }
    const auto clients = std::atomic_load(&clients_);  // the config may have been reloaded since check()
    const Caller caller = clients->caller(request.head[http::field::authorization], request.head["x-api-key"]);
    if (!caller.admitted) return refuse(wrong_key());
    if (priority_name.empty()) {
      in->priority = caller.client != nullptr ? caller.client->priority : settings_.default_priority;
    } else if (const auto priority = llmretry::priority_from_string(priority_name)) {
      in->priority = *priority;
    } else {
      return refuse(bad_request("x-llmretry-priority: must be interactive, standard or batch", "invalid_header"));
    }
    if (caller.client != nullptr) {  // a client of the config: its requests are its tenant's, in its classes
      const Client& client = *caller.client;
      if (in->priority < client.priority)
        return refuse({403,
                       "x-llmretry-priority: client \"" + client.name + "\" may send " +
                           llmretry::to_string(client.priority) + " requests and below, not " +
                           llmretry::to_string(in->priority),
                       "permission_error", "priority_not_allowed"});
      if (!in->tenant.empty() && in->tenant != client.name)
        return refuse({403, "x-llmretry-tenant: client \"" + client.name + "\" sends for itself only",
                       "permission_error", "tenant_not_allowed"});
      in->tenant = client.name;
      in->tenant_weight = client.weight;
    } else if (!in->tenant.empty() && clients->has_client(in->tenant)) {
      return refuse({403, "x-llmretry-tenant: \"" + in->tenant + "\" is a client of the relay's config: send its key",
                     "permission_error", "tenant_not_allowed"});
    }
    in->caller_key = std::string(caller.key);
    if (chain == nullptr && !routes.has_model_table())
      return refuse({404, "the relay has no upstream for Anthropic's API: start it with --anthropic-upstream",
                     "invalid_request_error", "unknown_url"});
    if (chain == nullptr)
      return refuse({404, "model \"" + in->model + "\" is not in the relay's model table", "invalid_request_error",
                     "model_not_found"});
    if (chain->format != in->format)
      return refuse({404,
                     "model \"" + in->model + "\" speaks " + to_string(chain->format) + "'s API, not " +
                         to_string(in->format) + "'s: send it to " +
                         (chain->format == Format::anthropic ? "/v1/messages" : "/v1/chat/completions"),
                     "invalid_request_error", "model_not_found"});
    if (in->format == Format::anthropic) {
      for (const auto& [field, into] :
           {std::pair{"anthropic-version", &in->anthropic_version}, std::pair{"anthropic-beta", &in->anthropic_beta}}) {
        const auto found = request.head.equal_range(field);
        if (found.first == found.second) continue;
        *into = std::string(found.first->value());
        if (std::next(found.first) != found.second || into->size() > 255)
          return refuse(
              bad_request(std::string(field) + ": must be sent once, at most 255 characters", "invalid_header"));
      }
    }
    in->body = std::move(request.body);
    if (!in->tenant.empty()) {
      const std::string label = tenant_labels_.of(in->tenant);
      const std::lock_guard<std::mutex> lock(tenants_mutex_);
      ++by_tenant_[label];
    }
    // Held back or degraded under pressure (a model of the table): a request with an Idempotency-Key may be
    // held, never changed, since its retries must find its stored answer and send the body first sent.
    if (routes.has_model_table() && !chain->under_pressure.empty()) {
      const llmretry::Pressure level = pressure_on(*chain);
      if (const llmretry::PressureRule* rule = chain->under_pressure.in_force(level)) {
        if (std::optional<Reply> refused = held_back(*rule, level, in->model, *in))
          return held->exchange().send(std::move(*refused));
        const Chain* pressed = chain;
        if (in->idempotency_key.empty()) degrade(*rule, level, routes, chain, *in);
        if (chain != pressed && !chain->under_pressure.empty()) {  // moved: the model it goes to holds too
          const llmretry::Pressure there = pressure_on(*chain);
          if (const llmretry::PressureRule* its = chain->under_pressure.in_force(there)) {
            if (std::optional<Reply> refused = held_back(*its, there, chain->upstreams.front()->name, *in))
              return held->exchange().send(std::move(*refused));
          }
        }
      }
    }
    in->estimate = llmretry::json::estimate_of(in->json, in->sent_body.empty() ? in->body : in->sent_body);
    in->json = nlohmann::json();  // the parsed body costs many times its bytes: not kept while it is in flight
    llmretry::curl::AsyncClient& client = *upstream_clients_.at(request.worker);
    if (in->idempotency_key.empty()) return send(client, *chain, std::move(in), streamed, std::move(held), {});
    deduplicated(client, *chain, std::move(in), streamed, std::move(held));
  }

  /// Returns the pressure on the first upstream of `chain`.
  static llmretry::Pressure pressure_on(const Chain& chain) {
    const Upstream& primary = *chain.upstreams.front();
    return llmretry::pressure(*primary.deployment, primary.breaker.get());
  }

  /// Returns the 429 of `in` held back by `rule`, in force at `level` on `model`, counted; nullopt when the
  /// rule does not hold its class.
  std::optional<Reply> held_back(const llmretry::PressureRule& rule, llmretry::Pressure level, const std::string& model,
                                 const Incoming& in) {
    if (!rule.hold || in.priority < *rule.hold) return std::nullopt;
    count_degraded(DegradeAction::hold, level);
    Reply reply = refusal(in, {429,
                               "model \"" + model + "\" is under " + llmretry::to_string(level) +
                                   " pressure: " + llmretry::to_string(in.priority) +
                                   " requests are held; retry after " + std::to_string(retry_after_seconds()) + " s",
                               "rate_limit_error", "held_under_pressure"});
    reply.headers.emplace_back("Retry-After", std::to_string(retry_after_seconds()));
    std::string degraded = in.degraded.empty() ? std::string() : in.degraded + ", ";
    reply.headers.emplace_back("x-llmretry-degraded", degraded + "hold=" + llmretry::to_string(in.priority));
    return reply;
  }

  /// What a degradation did to a request, for llm_relay_degraded_total{action}.
  enum class DegradeAction { max_tokens, model, hold, fallback };

  /// Applies `rule` (the rule at `level` of the model of `in`) to `in`: another model's `chain` (the
  /// fallback's only when it is less pressed), output tokens cut (its body re-written into in.sent_body);
  /// each change told in in.degraded and counted.
  void degrade(const llmretry::PressureRule& rule, llmretry::Pressure level, const Routes& routes, const Chain*& chain,
               Incoming& in) {
    const auto told = [&](const std::string& change) { in.degraded += (in.degraded.empty() ? "" : ", ") + change; };
    if (!rule.model.empty()) {
      chain = routes.chain_for(rule.model, in.format);  // checked with the table: same format
      told("model=" + rule.model);
      count_degraded(DegradeAction::model, level);
    }
    if (rule.fallback && chain->upstreams.size() > 1) {  // checked with the table: the model has a fallback
      const std::string& fallback = chain->upstreams[1]->name;
      const Chain* to = routes.chain_for(fallback, in.format);  // the fallback's own chain: the rest of this one
      if (pressure_on(*to) < level) {  // only to a fallback less pressed (a broken one is extreme)
        chain = to;
        told("fallback=" + fallback);
        count_degraded(DegradeAction::fallback, level);
      }
    }
    if (rule.max_tokens) {
      bool cut = false;
      bool asked = false;
      for (const char* field : {"max_tokens", "max_completion_tokens", "max_output_tokens"}) {
        const auto found = in.json.find(field);
        if (found == in.json.end()) continue;
        asked = true;  // a bound that is no number is the upstream's to refuse: left as sent
        if (found->is_number() && found->get<double>() > static_cast<double>(*rule.max_tokens)) {
          *found = *rule.max_tokens;
          cut = true;
        }
      }
      if (!asked && in.path != "/v1/embeddings") {            // no bound asked: the cap is the bound
        const bool chat = in.path == "/v1/chat/completions";  // max_tokens is refused by reasoning models there
        in.json[in.path == "/v1/responses" ? "max_output_tokens"
                : chat                     ? "max_completion_tokens"
                                           : "max_tokens"] = *rule.max_tokens;
        cut = true;
      }
      if (cut) {
        in.sent_body = in.json.dump();
        told("max_tokens=" + std::to_string(*rule.max_tokens));
        count_degraded(DegradeAction::max_tokens, level);
      }
    }
  }

  void count_degraded(DegradeAction action, llmretry::Pressure level) {
    ++degraded_[static_cast<std::size_t>(action) * 4 + static_cast<std::size_t>(level) - 1];
  }

 public:
  /// Returns the text of the server's own families: llm_relay_degraded_total{action,pressure} and
  /// llm_relay_tenant_requests_total{tenant}.
  [[nodiscard]] std::string own_metrics() {
    std::string text =
        "# HELP llm_relay_degraded_total Requests the relay changed under pressure (a model's under_pressure rules): "
        "max_tokens cut, sent to another model or to the fallback, or held (429).\n# TYPE llm_relay_degraded_total "
        "counter\n";
    for (const auto action :
         {DegradeAction::max_tokens, DegradeAction::model, DegradeAction::hold, DegradeAction::fallback})
      for (const auto level : {llmretry::Pressure::light, llmretry::Pressure::moderate, llmretry::Pressure::high,
                               llmretry::Pressure::extreme}) {
        const char* name = action == DegradeAction::max_tokens ? "max_tokens"
                           : action == DegradeAction::model    ? "model"
                           : action == DegradeAction::hold     ? "hold"
                                                               : "fallback";
        text.append("llm_relay_degraded_total{action=\"").append(name).append("\",pressure=\"");
        text.append(llmretry::to_string(level)).append("\"} ");
        text.append(
                std::to_string(degraded_[static_cast<std::size_t>(action) * 4 + static_cast<std::size_t>(level) - 1]))
            .append("\n");
      }
    text.append(
        "# HELP llm_relay_tenant_requests_total API requests by tenant: the client of the config, or X-LLMRetry-Tenant "
        "(the first 64 tenants named, then other).\n# TYPE llm_relay_tenant_requests_total counter\n");
    const std::lock_guard<std::mutex> lock(tenants_mutex_);
    for (const auto& [tenant, count] : by_tenant_) {
      text.append("llm_relay_tenant_requests_total{tenant=\"");
      for (const char c : tenant) {
        if (c == '\\' || c == '"') text.push_back('\\');
        text.push_back(c);
      }
      text.append("\"} ").append(std::to_string(count)).append("\n");
    }
    return text;
  }

 private:
  /// What happens once the upstream call ended, before the answer goes out (the Idempotency-Key's
  /// completion); it calls its argument when done.
  using AfterCall = std::function<void(const Answer& answer, std::function<void()> then)>;

  /// Sends `in` upstream and answers: its events as they arrive, or the whole answer when the call ended
  /// before any (an error, or an upstream that did not stream). A stream that breaks after it began ends
  /// with an in-band error event (code stream_interrupted), which the SDKs raise as an error, instead of a
  /// silent close: `data: {"error": {...}}` for OpenAI's API, `event: error` for Anthropic's.
  void send(llmretry::curl::AsyncClient& client, const Chain& chain, std::shared_ptr<const Incoming> in, bool streamed,
            Held held, AfterCall after) {
    auto started = std::make_shared<bool>(false);
    const Format format = in->format;
    StreamTo stream_to;
    if (streamed) {
      stream_to.start = [held, started](llmretry::curl::HeaderList headers) {
        *started = true;
        headers.emplace_back("Content-Type", "text/event-stream");
        headers.emplace_back("Cache-Control", "no-cache");
        held->exchange().start(200, std::move(headers));
      };
      stream_to.event = [held](const llmretry::SseEvent& event) { held->exchange().write(sse_text(event)); };
    }
    forwarder_.forward(client, chain, std::move(in), std::move(stream_to), held->exchange().gone(),
                       held->exchange().left(),
                       [held, started, format, after = std::move(after)](Answer answer) mutable {
                         guarded(held, [&] {
                           auto answered = std::make_shared<Answer>(std::move(answer));
                           auto reply = [held, started, format, answered] {
                             guarded(held, [&] {
                               if (!*started) return held->exchange().send(client_reply(std::move(*answered)));
                               const bool failed = answered->status < 200 || answered->status > 299;
                               // The in-band error event each API's clients raise: OpenAI's data-only one,
                               // Anthropic's `event: error`.
                               const char* event = format == Format::anthropic ? "event: error\ndata: " : "data: ";
                               held->exchange().finish(failed ? event + answered->body + "\n\n" : std::string());
                             });
                           };
                           if (after) return after(*answered, std::move(reply));
                           reply();
                         });
                       });
  }

  /// Answers a request with an Idempotency-Key: the stored answer of a completed one, 409 while the
  /// first is in flight, 422 when the key was used with another payload; else forwards it, its lease
  /// renewed until the call ends, then stores a final answer or frees the key (a streamed answer is never
  /// stored: the key is freed once the upstream call has ended, the client gone or not).
  void deduplicated(llmretry::curl::AsyncClient& client, const Chain& chain, std::shared_ptr<Incoming> in,
                    bool streamed, Held held) {
    auto duplicate = std::make_shared<Keyed>(Keyed{&client,
                                                   &chain,
                                                   std::move(in),
                                                   streamed,
                                                   std::move(held),
                                                   std::make_shared<Claim>(),
                                                   {},
                                                   client.get_executor(),
                                                   {},
                                                   false});
    duplicate->claim->key = store_key(*duplicate->in->routes, *duplicate->in);
    duplicate->claim->token = llmretry::new_idempotency_key();
    duplicate->fingerprint =
        llmretry::store::fingerprint(duplicate->in->path + '\n' + llmretry::json::canonical(duplicate->in->body));
    duplicate->wait_until = std::chrono::steady_clock::now() + settings_.coalesce_wait;
    claim_key(std::move(duplicate));
  }

  /// A claimed Idempotency-Key, and the timer that renews its lease.
  struct Claim {
    std::string key;
    std::string token;
    std::unique_ptr<boost::asio::steady_timer> renewal;
  };

  /// A request with an Idempotency-Key, until its key is claimed (or its answer found).
  struct Keyed {
    llmretry::curl::AsyncClient* client;
    const Chain* chain;
    std::shared_ptr<Incoming> in;
    bool streamed;
    Held held;
    std::shared_ptr<Claim> claim;
    std::string fingerprint;
    boost::asio::any_io_executor executor;
    std::chrono::steady_clock::time_point wait_until;  ///< while the first is in flight, ask again until then
    bool counted;                                      ///< told the observer as a duplicate already
  };

  /// How often a duplicate that waits for the first's answer asks the store again.
  static constexpr std::chrono::milliseconds coalesce_poll{25};

  /// Claims the key of `keyed`, then answers as deduplicated says; a duplicate of a request in flight asks
  /// again every coalesce_poll until ServerSettings::coalesce_wait has passed.
  void claim_key(std::shared_ptr<Keyed> keyed) {
    if (keyed->held->exchange().left()) {  // its client left while it waited for the key: it ends, never sent
      forwarder_.count_gone(*keyed->chain, *keyed->in);
      return;
    }
    on_store(
        keyed->executor,
        [this, claim = keyed->claim, fingerprint = keyed->fingerprint] {
          return idempotency_.claim(claim->key, fingerprint, claim->token);
        },
        [this, keyed](std::exception_ptr error, llmretry::store::ClaimResult result) mutable {
          const Held answering = keyed->held;
          guarded(answering, [&] {
            auto& in = keyed->in;
            auto& held = keyed->held;
            auto& claim = keyed->claim;
            const auto& executor = keyed->executor;
            if (error) {
              std::string what = "unknown error";
              try {
                std::rethrow_exception(error);
              } catch (const std::exception& failed) {
                what = failed.what();
              } catch (...) {}
              return held->exchange().send(refusal(*in, {503, "the idempotency store failed: " + what,
                                                         "service_unavailable", "idempotency_store_unavailable"}));
            }
            const char* task = task_type(in->path);
            const auto count_duplicate = [&] {
              if (!std::exchange(keyed->counted, true)) observer_.duplicate_suppressed(task);
            };
            switch (result.status) {
              case llmretry::store::ClaimStatus::completed: {
                count_duplicate();
                observer_.request_finished({"relay", in->model_label}, "replayed");
                Answer stored;
                stored.status = result.response->status;
                stored.headers = std::move(result.response->headers);
                stored.body = std::move(result.response->body);
                Reply replayed = client_reply(std::move(stored));
                replayed.headers.emplace_back("Idempotent-Replayed", "true");
                return held->exchange().send(std::move(replayed));
              }
              case llmretry::store::ClaimStatus::in_flight: {
                count_duplicate();
                if (std::chrono::steady_clock::now() + coalesce_poll <= keyed->wait_until) {
                  auto timer = std::make_shared<boost::asio::steady_timer>(executor, coalesce_poll);
                  timer->async_wait([this, keyed, timer](boost::system::error_code) { claim_key(keyed); });
                  return;
                }
                Reply busy =
                    refusal(*in, {409,
                                  settings_.coalesce_wait.count() > 0
                                      ? "a request with this Idempotency-Key is still in flight after " +
                                            std::to_string(settings_.coalesce_wait.count()) +
                                            " ms (--coalesce-wait); retry after it ends"
                                      : "a request with this Idempotency-Key is in flight; retry after it ends",
                                  "invalid_request_error", "idempotency_key_in_flight"});
                busy.headers.emplace_back("Retry-After", "1");
                return held->exchange().send(std::move(busy));
              }
              case llmretry::store::ClaimStatus::mismatch:
                return held->exchange().send(refusal(*in, {422,
                                                           "this Idempotency-Key was used with another request body or "
                                                           "route",
                                                           "invalid_request_error", "idempotency_key_reused"}));
              case llmretry::store::ClaimStatus::claimed: break;
            }
            auto& client = *keyed->client;
            const Chain& chain = *keyed->chain;
            const bool streamed = keyed->streamed;
            renew_later(executor, claim);
            send(client, chain, std::move(in), streamed, std::move(held),
                 [this, claim, streamed, executor](const Answer& answer, std::function<void()> then) {
                   claim->renewal.reset();  // cancels the renewal's timer
                   const bool store = !streamed && answer.storable && answer.body.size() <= settings_.max_stored_answer;
                   llmretry::store::StoredResponse stored;
                   if (store) stored = {answer.status, answer.body, storable_headers(answer.headers)};
                   on_store(
                       executor,
                       [this, claim, store, stored = std::move(stored)] {
                         return store ? idempotency_.complete(claim->key, claim->token, stored)
                                      : idempotency_.release(claim->key, claim->token);
                       },
                       // Whatever the store said, the answer goes to the client; a key left claimed frees itself
                       // when its lease ends.
                       [then = std::move(then)](std::exception_ptr, bool) { then(); });
                 });
          });
        });
  }

  /// Returns `headers` but those a store cannot keep (a CR or LF in a value).
  static llmretry::curl::HeaderList storable_headers(const llmretry::curl::HeaderList& headers) {
    llmretry::curl::HeaderList kept;
    for (const auto& header : headers)
      if (header.second.find_first_of("\r\n") == std::string::npos) kept.push_back(header);
    return kept;
  }

  /// Runs `step` of the request `held` answers; what it throws answers the request 500 (or cuts an answer
  /// that began): never out of a worker's event loop.
  template <class Step>
  static void guarded(const Held& held, Step&& step) noexcept {
    try {
      step();
    } catch (...) {
      try {
        held->exchange().fail();
      } catch (...) {  // out of memory for the answer: the connection closes once the request is let go
      }
    }
  }

  /// Renews `claim`'s lease every third of it while its timer lives (a renewal that fails is tried again
  /// at the next turn; once the lease is lost, renewing stops).
  void renew_later(const boost::asio::any_io_executor& executor, const std::shared_ptr<Claim>& claim) {
    if (!claim->renewal) claim->renewal = std::make_unique<boost::asio::steady_timer>(executor);
    claim->renewal->expires_after(settings_.idempotency_lease / 3);
    claim->renewal->async_wait([this, weak = std::weak_ptr<Claim>(claim), executor](boost::system::error_code error) {
      auto held = weak.lock();
      if (error || !held || !held->renewal) return;
      on_store(
          executor, [this, held] { return idempotency_.renew(held->key, held->token); },
          [this, weak, executor](std::exception_ptr failed, bool renewed) {
            auto again = weak.lock();
            if (again && again->renewal && (failed || renewed)) renew_later(executor, again);
          });
    });
  }

  /// Calls `call` on the store (on the store's pool when it is remote), then `then(error, result)` on
  /// `executor`.
  template <class Call, class Then>
  void on_store(const boost::asio::any_io_executor& executor, Call call, Then then) {
    using Result = decltype(call());
    auto run = [call = std::move(call)]() mutable -> std::pair<std::exception_ptr, Result> {
      try {
        return {nullptr, call()};
      } catch (...) {
        return {std::current_exception(), Result{}};
      }
    };
    if (!store_pool_) {
      auto [error, result] = run();
      return then(std::move(error), std::move(result));
    }
    boost::asio::post(*store_pool_, [run = std::move(run), then = std::move(then), executor]() mutable {
      auto done = std::make_shared<std::pair<std::exception_ptr, Result>>(run());
      boost::asio::post(executor, [then = std::move(then), done]() mutable {
        then(std::move(done->first), std::move(done->second));
      });
    });
  }

  /// Returns the key under which the Idempotency-Key of `in` is stored: a hash of it with the upstreams of
  /// `routes` (their URLs and keys) and the key its client sent, so that relays sharing one store but not
  /// their upstreams or upstream keys, and clients of the config, never answer each other's requests.
  std::string store_key(const Routes& routes, const Incoming& in) const {
    std::string scope = "llmretry-relay\n" + in.caller_key + '\n';
    for (const auto& upstream : routes.upstreams())
      scope.append(upstream->base_url).append("\n").append(upstream->api_key).append("\n");
    return llmretry::store::fingerprint(scope.append(in.idempotency_key));
  }

  /// Returns `error` as a reply, told to the observer as a request that ended with its code.
  Reply refusal(const Incoming& in, const ErrorReply& error) {
    observer_.request_finished({"relay", in.model_label},
                               error.status == 409 || error.status == 422 ? error.code : "rejected");
    return reply_of(error, in.format);
  }

  /// Returns the upstream's (or the relay's) answer as the client gets it.
  static Reply client_reply(Answer answer) {
    Reply reply{answer.status, {}, std::move(answer.body)};
    std::string content_type = json_content_type;
    for (auto& [name, value] : answer.headers) {
      if (!llmretry::detail::iequals(name, "content-type")) reply.headers.emplace_back(name, std::move(value));
      else if (value != "application/json") content_type = std::move(value);
    }
    reply.headers.emplace_back("Content-Type", std::move(content_type));
    return reply;
  }

  std::shared_ptr<const Routes> routes_;    ///< read and replaced with std::atomic_load / std::atomic_store
  std::shared_ptr<const Clients> clients_;  ///< likewise
  const Forwarder& forwarder_;
  llmretry::store::IdempotencyStore& idempotency_;
  llmretry::metrics::Observer& observer_;
  MetricsPage metrics_;
  ServerSettings settings_;
  BoundedLabels model_labels_{100};  ///< the first 100 models named, then "other"
  BoundedLabels tenant_labels_{64};  ///< the first 64 tenants named, then "other"
  std::mutex tenants_mutex_;
  std::map<std::string, std::uint64_t, std::less<>> by_tenant_;  ///< label -> requests
  std::vector<llmretry::curl::AsyncClient*> upstream_clients_;   ///< per worker
  std::optional<boost::asio::thread_pool> store_pool_;
  std::atomic<std::size_t> in_flight_{0};
  std::array<std::atomic<std::uint64_t>, 16> degraded_{};  ///< by DegradeAction, then pressure level (light first)
  std::atomic<double> typical_seconds_{1.0};
};

}  // namespace relay

#endif  // LLMRETRY_RELAY_SERVER_HPP
