// The HTTP side of llmretry-relay on cpp-httplib: the routes, the client key, the checks of each request,
// the Idempotency-Key deduplication, /healthz and /metrics.
#ifndef LLMRETRY_RELAY_SERVER_HPP
#define LLMRETRY_RELAY_SERVER_HPP

#include <llmretry/http/idempotency.hpp>
#include <llmretry/json/canonical.hpp>
#include <llmretry/json/estimate.hpp>
#include <llmretry/metrics/observer.hpp>
#include <llmretry/store/fingerprint.hpp>
#include <llmretry/store/idempotency_store.hpp>

#include <httplib.h>
#include <sys/socket.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "common/lease_renewer.hpp"
#include "errors.hpp"
#include "forward.hpp"
#include "model_labels.hpp"
#include "routes.hpp"
#include "security.hpp"
#include "stream.hpp"

namespace relay {

/// How the server treats its clients.
struct ServerSettings {
  std::size_t max_request_body = std::size_t{1} << 20;  ///< larger request bodies are answered 413
  std::string client_key;  ///< required as "Authorization: Bearer ..." on every route but /healthz; empty: none
  std::chrono::seconds io_timeout{10};  ///< the most a client may take to send a request or read an answer
  std::size_t threads = 512;            ///< requests served at once (each waits for its upstream)
  /// The lease of the idempotency store's claims: a claimed key is renewed every third of it while its
  /// request is in flight.
  std::chrono::milliseconds idempotency_lease = llmretry::store::IdempotencyOptions{}.lease;
  /// The largest answer kept under its Idempotency-Key; a larger one frees the key instead.
  std::size_t max_stored_answer = std::size_t{1} << 20;
};

/// The text of /metrics and its content type.
struct MetricsPage {
  std::function<std::string()> text;
  std::string content_type;
};

/// Serves the relay's routes on an httplib::Server. Every reference must outlive the server.
class Server {
 public:
  Server(const Routes& routes, const Forwarder& forwarder, llmretry::store::IdempotencyStore& idempotency,
         llmretry::metrics::Observer& observer, MetricsPage metrics, ServerSettings settings)
      : routes_(routes),
        forwarder_(forwarder),
        idempotency_(idempotency),
        observer_(observer),
        metrics_(std::move(metrics)),
        settings_(std::move(settings)) {}

  /// Makes the listen queue of the server set up by install, once bound, as long as the system allows
  /// (cpp-httplib asks for 5): hundreds of clients connecting at once are not made to wait a SYN retry.
  void deepen_listen_queue() const {
    if (listening_ != INVALID_SOCKET) ::listen(listening_, SOMAXCONN);
  }

  /// Sets up `server`: its thread pool, timeouts, body limit, and handlers.
  void install(httplib::Server& server) {
    const std::size_t threads = settings_.threads;
    server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    server.set_read_timeout(settings_.io_timeout);
    server.set_write_timeout(settings_.io_timeout);
    server.set_keep_alive_max_count(100'000);
    server.set_keep_alive_timeout(5);
    server.set_payload_max_length(settings_.max_request_body);
    server.set_tcp_nodelay(true);  // each answer goes out at once, never held back to wait for an ACK
    server.set_socket_options([this](socket_t socket) {
      httplib::default_socket_options(socket);
      listening_ = socket;
    });
    server.set_pre_routing_handler([this](const httplib::Request& request, httplib::Response& response) {
      if (settings_.client_key.empty() || request.path == "/healthz")
        return httplib::Server::HandlerResponse::Unhandled;
      if (authorized(request.get_header_value("Authorization"), settings_.client_key))
        return httplib::Server::HandlerResponse::Unhandled;
      reply(response, {401, "missing or wrong client key: send Authorization: Bearer <LLMRETRY_RELAY_CLIENT_KEY>",
                       "invalid_request_error", "invalid_api_key"});
      return httplib::Server::HandlerResponse::Handled;
    });
    server.set_error_handler(
        httplib::Server::HandlerWithResponse([this](const httplib::Request&, httplib::Response& response) {
          if (!response.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          if (response.status == 413)
            reply(response,
                  {413, "the body is larger than " + std::to_string(settings_.max_request_body) + " bytes (--max-body)",
                   "invalid_request_error", "body_too_large"});
          else if (response.status == 404)
            reply(response, {404, "unknown route", "invalid_request_error", "unknown_url"});
          else reply(response, {response.status, "malformed HTTP request", "invalid_request_error", "bad_request"});
          return httplib::Server::HandlerResponse::Handled;
        }));
    server.set_exception_handler([](const httplib::Request&, httplib::Response& response, std::exception_ptr) {
      // What the exception says stays in the relay: it may quote the request.
      response.headers.clear();
      reply(response, {500, "the relay failed to answer this request", "server_error", "internal_error"});
    });
    const auto handler = [this](const httplib::Request& request, httplib::Response& response) {
      handle(request, response);
    };
    server.Get(".*", handler);
    server.Post(".*", handler);
    server.Put(".*", handler);
    server.Patch(".*", handler);
    server.Delete(".*", handler);
    server.Options(".*", handler);
  }

 private:
  static void reply(httplib::Response& response, const ErrorReply& error) {
    response.status = error.status;
    response.set_content(error_body(error), json_content_type);
  }

  static void wrong_method(httplib::Response& response, const char* allowed) {
    response.set_header("Allow", allowed);
    reply(response,
          {405, std::string("method not allowed: use ") + allowed, "invalid_request_error", "method_not_allowed"});
  }

  void handle(const httplib::Request& request, httplib::Response& response) {
    const std::string& path = request.path;
    if (path == "/healthz") {
      if (request.method != "GET" && request.method != "HEAD") return wrong_method(response, "GET");
      response.set_content("ok\n", "text/plain");
      return;
    }
    if (path == "/metrics") {
      if (request.method != "GET") return wrong_method(response, "GET");
      response.set_content(metrics_.text(), metrics_.content_type.c_str());
      return;
    }
    if (path == "/v1/chat/completions" || path == "/v1/responses" || path == "/v1/embeddings") {
      if (request.method != "POST") return wrong_method(response, "POST");
      return serve_api_request(request, response);
    }
    reply(response, {404,
                     "unknown route " + path +
                         " (the relay serves POST /v1/chat/completions, /v1/responses, "
                         "/v1/embeddings, GET /healthz, /metrics)",
                     "invalid_request_error", "unknown_url"});
  }

  /// Returns how many requests may wait for their upstream at once: all the threads but a few kept to
  /// refuse the others at once, and to answer /healthz and /metrics.
  [[nodiscard]] std::size_t max_forwarding() const noexcept {
    const std::size_t threads = settings_.threads;
    return threads > 64 ? threads - 32 : std::max<std::size_t>(1, threads / 2);
  }

  /// Counts down `count` when it goes out of scope.
  class Leaving {
   public:
    explicit Leaving(std::atomic<std::size_t>& count) noexcept : count_(count) {}
    Leaving(const Leaving&) = delete;
    Leaving& operator=(const Leaving&) = delete;
    Leaving(Leaving&&) = delete;
    Leaving& operator=(Leaving&&) = delete;
    ~Leaving() { --count_; }

   private:
    std::atomic<std::size_t>& count_;
  };

  /// Answers as check_and_send, or 503 with Retry-After at once while max_forwarding() requests are
  /// already in the relay's hands (a streamed one until its first event).
  void serve_api_request(const httplib::Request& request, httplib::Response& response) {
    if (forwarding_.fetch_add(1) >= max_forwarding()) {
      --forwarding_;
      Incoming in;
      in.path = request.path;
      response.set_header("Retry-After", "1");
      return refuse(response, in,
                    {503, "the relay is serving as many requests as it can; retry after 1 s", "service_unavailable",
                     "relay_busy"});
    }
    const Leaving leaving(forwarding_);
    check_and_send(request, response);
  }

  /// Checks the request, then answers it from the idempotency store or sends it upstream.
  void check_and_send(const httplib::Request& request, httplib::Response& response) {
    Incoming in;
    in.path = request.path;
    if (llmretry::json::nested_deeper_than(request.body, max_json_depth))
      return refuse(
          response, in,
          bad_request("the body nests arrays and objects deeper than " + std::to_string(max_json_depth) + " levels",
                      "invalid_body"));
    try {
      in.json = nlohmann::json::parse(request.body);
    } catch (const nlohmann::json::exception& error) {  // a syntax error, or a number out of range (1e400)
      return refuse(response, in,
                    bad_request(std::string("the body is not valid JSON: ") + error.what(), "invalid_json"));
    }
    if (!in.json.is_object())
      return refuse(response, in, bad_request("the body must be a JSON object", "invalid_body"));
    const auto model = in.json.find("model");
    if (model == in.json.end()) return refuse(response, in, bad_request("model: missing", "missing_model"));
    if (!model->is_string() || model->get_ref<const std::string&>().empty())
      return refuse(response, in, bad_request("model: must be a non-empty string", "invalid_model"));
    in.model = model->get<std::string>();
    const Chain* chain = routes_.chain_for(in.model);
    in.model_label = !routes_.has_model_table() ? model_labels_.of(in.model) : chain != nullptr ? in.model : "unknown";
    const auto stream = in.json.find("stream");
    if (stream != in.json.end() && !stream->is_boolean() && !stream->is_null())
      return refuse(response, in, bad_request("stream: must be true or false", "invalid_stream"));
    const bool streamed = stream != in.json.end() && *stream == true;
    if (request.has_header("Idempotency-Key")) {
      in.idempotency_key = request.get_header_value("Idempotency-Key");
      if (!is_header_token(in.idempotency_key))
        return refuse(
            response, in,
            bad_request("Idempotency-Key: must be 1 to 255 visible ASCII characters", "invalid_idempotency_key"));
    }
    if (chain == nullptr)
      return refuse(response, in,
                    {404, "model \"" + in.model + "\" is not in the relay's model table", "invalid_request_error",
                     "model_not_found"});
    in.body = request.body;
    in.estimate = llmretry::json::estimate_of(in.json, in.body);
    if (in.idempotency_key.empty()) {
      if (streamed)
        return send_streamed(response, [this, chain, in = std::move(in)](const StreamPipe::OnEvent* on_event,
                                                                         const std::atomic<bool>* cancel) {
          return forwarder_.forward(*chain, in, on_event, cancel);
        });
      return send(response, forwarder_.forward(*chain, in));
    }
    deduplicated(response, *chain, std::move(in), streamed);
  }

  /// Answers a streamed request: its events as they arrive, or the whole answer when the call ended
  /// before any (an error, or an upstream that did not stream). A stream that breaks after it began ends
  /// with an in-band error event, `data: {"error": {...}}` (code stream_interrupted), which the OpenAI SDKs
  /// raise as an error, instead of a silent close. `call` runs on the pipe's thread.
  static void send_streamed(httplib::Response& response, StreamPipe::Call call) {
    auto pipe = std::make_shared<StreamPipe>(std::move(call));
    if (auto answer = pipe->first()) return send(response, std::move(*answer));
    response.status = 200;
    response.set_header("Cache-Control", "no-cache");
    response.set_chunked_content_provider("text/event-stream", [pipe](std::size_t /*offset*/, httplib::DataSink& sink) {
      std::optional<Answer> failed;
      while (auto text = pipe->next(failed)) {
        if (!sink.write(text->data(), text->size())) {
          pipe->cancel();
          return false;
        }
      }
      if (failed) {
        const std::string event = "data: " + failed->body + "\n\n";
        if (!sink.write(event.data(), event.size())) return false;
      }
      sink.done();
      return true;
    });
  }

  /// Answers a request with an Idempotency-Key: the stored answer of a completed one, 409 while the
  /// first is in flight, 422 when the key was used with another payload; else forwards it, its lease
  /// renewed until the call returns, then stores a final answer or frees the key (a streamed answer is
  /// never stored: the key is freed once the upstream call has ended, the client gone or not).
  void deduplicated(httplib::Response& response, const Chain& chain, Incoming in, bool streamed) {
    const std::string fingerprint = llmretry::store::fingerprint(in.path + '\n' + llmretry::json::canonical(in.body));
    const std::string token = llmretry::new_idempotency_key();
    const std::string key = store_key(in.idempotency_key);
    llmretry::store::ClaimResult claim;
    try {
      claim = idempotency_.claim(key, fingerprint, token);
    } catch (const std::exception& error) {
      return refuse(response, in,
                    {503, std::string("the idempotency store failed: ") + error.what(), "service_unavailable",
                     "idempotency_store_unavailable"});
    }
    const char* task = task_type(in.path);
    switch (claim.status) {
      case llmretry::store::ClaimStatus::completed:
        observer_.duplicate_suppressed(task);
        observer_.request_finished({"relay", in.model_label}, "replayed");
        response.status = claim.response->status;
        response.set_header("Idempotent-Replayed", "true");
        response.set_content(claim.response->body, json_content_type);
        return;
      case llmretry::store::ClaimStatus::in_flight:
        observer_.duplicate_suppressed(task);
        response.set_header("Retry-After", "1");
        return refuse(response, in,
                      {409, "a request with this Idempotency-Key is in flight; retry after it ends",
                       "invalid_request_error", "idempotency_key_in_flight"});
      case llmretry::store::ClaimStatus::mismatch:
        return refuse(response, in,
                      {422, "this Idempotency-Key was used with another request body or route", "invalid_request_error",
                       "idempotency_key_reused"});
      case llmretry::store::ClaimStatus::claimed: break;
    }
    auto call = [this, &chain, in = std::move(in), key, token, streamed](const StreamPipe::OnEvent* on_event,
                                                                         const std::atomic<bool>* cancel) {
      Answer answer;
      {
        const llmretry_tools::LeaseRenewer renewer(idempotency_, key, token, settings_.idempotency_lease / 3);
        answer = forwarder_.forward(chain, in, on_event, cancel);
      }
      try {
        if (!streamed && answer.storable && answer.body.size() <= settings_.max_stored_answer)
          (void)idempotency_.complete(key, token, {answer.status, answer.body});
        else (void)idempotency_.release(key, token);
      } catch (const std::exception&) {
        // The answer goes to the client anyway; the key stays claimed until its lease ends.
      }
      return answer;
    };
    if (streamed) return send_streamed(response, std::move(call));
    send(response, call(nullptr, nullptr));
  }

  /// Returns the key under which the client's Idempotency-Key `key` is stored: a hash of it with the
  /// relay's upstreams and client key, so that relays sharing one store but not their upstreams or their
  /// clients never answer each other's requests.
  std::string store_key(std::string_view key) const {
    std::string scope = "llmretry-relay\n" + settings_.client_key + '\n';
    for (const auto& upstream : routes_.upstreams()) scope.append(upstream->base_url).append("\n");
    return llmretry::store::fingerprint(scope.append(key));
  }

  /// Answers `error`, told to the observer as a request that ended with its code.
  void refuse(httplib::Response& response, const Incoming& in, const ErrorReply& error) {
    observer_.request_finished({"relay", in.model_label},
                               error.status == 409 || error.status == 422 ? error.code : "rejected");
    reply(response, error);
  }

  static void send(httplib::Response& response, Answer answer) {
    response.status = answer.status;
    std::string content_type = json_content_type;
    for (auto& [name, value] : answer.headers) {
      if (!llmretry::detail::iequals(name, "content-type")) response.set_header(name, value);
      else if (value != "application/json") content_type = std::move(value);
    }
    response.set_content(answer.body, content_type);
  }

  const Routes& routes_;
  const Forwarder& forwarder_;
  llmretry::store::IdempotencyStore& idempotency_;
  llmretry::metrics::Observer& observer_;
  MetricsPage metrics_;
  ServerSettings settings_;
  ModelLabels model_labels_;
  std::atomic<std::size_t> forwarding_{0};  ///< requests in serve_api_request() now
  socket_t listening_ = INVALID_SOCKET;     ///< the listening socket, once bound
};

}  // namespace relay

#endif  // LLMRETRY_RELAY_SERVER_HPP
