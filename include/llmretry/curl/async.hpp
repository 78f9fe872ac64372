#ifndef LLMRETRY_CURL_ASYNC_HPP
#define LLMRETRY_CURL_ASYNC_HPP

/// The asynchronous libcurl request (target llmretry::curl_async: libcurl and Boost.Asio): a multi handle
/// driven by Asio descriptors and a timer, one per executor, its connections reused from one request to the
/// next. What a response means is curl::perform's (one Exchange for both). POSIX only (file descriptors).

#include <curl/curl.h>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/system/system_error.hpp>

#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../attempt.hpp"
#include "../detail/config.hpp"
#include "../detail/text.hpp"
#include "../version.hpp"
#include "curl.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace curl {

/// The completion signature of AsyncClient::async_perform: the failure (null on success) and the 2xx
/// response (empty on failure).
using PerformSignature = void(std::exception_ptr, Response);

namespace detail {

struct MultiDeleter {
  void operator()(CURLM* multi) const noexcept { curl_multi_cleanup(multi); }
};

/// One request in a multi handle: its easy handle's exchange and, in the derived PendingOf, the handler.
struct Pending {
  Pending(const Pending&) = delete;
  Pending& operator=(const Pending&) = delete;
  Pending(Pending&&) = delete;
  Pending& operator=(Pending&&) = delete;
  virtual ~Pending() = default;
  /// Completes the request with `error` or `response`, through the handler's executor; once.
  virtual void complete(std::exception_ptr error, Response response) = 0;

  Pending() = default;
  CURL* easy = nullptr;
  HeaderList extra_headers;          ///< the attempt's own headers (the idempotency key, the attempt number)
  std::optional<Exchange> exchange;  ///< the transfer: emplaced once the easy handle is set up
  std::optional<boost::asio::steady_timer> deadline;  ///< the attempt's timeout, when the client keeps it
  bool cancelled = false;  ///< cancelled inside libcurl's callbacks: stopped once libcurl returns
};

}  // namespace detail

/// How an AsyncClient holds its connections.
struct ClientOptions {
  /// The most connections open to one host at once (CURLMOPT_MAX_HOST_CONNECTIONS), at least 1; unset: no
  /// limit. Requests beyond it wait inside the client for a connection: over HTTP/1.1 for one to be free,
  /// over HTTP/2 (an https server that offers it) for room among a connection's streams (libcurl's default:
  /// 100 each), so that thousands of streams to one provider share a few connections instead of a socket and
  /// a TLS handshake each. A request's timeout counts its wait: one that gets no connection in time ends as a
  /// timeout, not sent.
  std::optional<std::size_t> max_host_connections;
};

/// Makes requests asynchronously on one executor: a libcurl multi handle whose sockets are Asio descriptors
/// and whose timeouts an Asio timer carries out, so that one thread serves any number of requests. The
/// multi handle keeps the connections (HTTP keep-alive, TLS sessions) from one request to the next.
///
/// Not thread-safe: start requests and destroy the client on the executor's thread (one io_context thread,
/// or a strand). Destroying it cancels what is in flight: each handler gets operation_aborted. A streaming
/// handler (which runs inside libcurl) may start and cancel requests, and destroy the client: the client
/// carries them out once libcurl has returned (a request cancelled there may still hand the events of the
/// same read to its handler).
class AsyncClient {
 public:
  /// A client on `executor` holding its connections as `options` says. An https request waits for a
  /// connection being opened that may carry it beside others (HTTP/2) rather than open one more
  /// (CURLOPT_PIPEWAIT); past the streams that connection takes, only max_host_connections bounds how many
  /// are opened. Throws std::invalid_argument for a max_host_connections of 0 or above what libcurl takes,
  /// ProviderError when libcurl cannot make a multi handle.
  explicit AsyncClient(boost::asio::any_io_executor executor, const ClientOptions& options = {})
      : impl_(std::make_shared<Impl>(std::move(executor), options)) {}

  AsyncClient(const AsyncClient&) = delete;
  AsyncClient& operator=(const AsyncClient&) = delete;
  AsyncClient(AsyncClient&&) = delete;
  AsyncClient& operator=(AsyncClient&&) = delete;
  ~AsyncClient() {
    try {
      impl_->shut_down();
    } catch (...) {  // out of memory posting the handlers of what was in flight: those are not called
    }
  }

  /// Returns the executor the client runs on.
  [[nodiscard]] const boost::asio::any_io_executor& get_executor() const noexcept { return impl_->executor; }

  /// Makes one attempt of `request` with `extra_headers` added, asynchronously, as curl::perform does (the
  /// same options, timeouts, size limits, encodings, streaming with `on_event` and `guard`, and the same
  /// meaning of every outcome). Completes with PerformSignature: `(nullptr, response)` for a 2xx answer,
  /// `(error, {})` with the exception curl::perform would throw, or with std::invalid_argument for bad
  /// options. A cancel through the handler's cancellation slot stops the transfer and completes with
  /// boost::system::system_error(operation_aborted). `on_event` runs on the executor, between reads.
  /// `request`, `options`, `on_event` and `guard` must outlive the operation. Options::idle_timeout is checked
  /// about once a second; Options::cancel is read too (prefer the cancellation slot).
  template <class Token>
  auto async_perform(const Request& request, const Options& options, HeaderList extra_headers,
                     const std::function<void(const SseEvent&)>* on_event, StreamGuard* guard,
                     std::optional<std::chrono::milliseconds> time_left, Token&& token) {
    return boost::asio::async_initiate<Token, PerformSignature>(
        [impl = impl_, &request, &options, extra = std::move(extra_headers), on_event, guard,
         time_left](auto handler) mutable {
          impl->start(std::move(handler), request, options, std::move(extra), on_event, guard, time_left);
        },
        token);
  }

  /// async_perform of `request` with no extra header, not streamed, bounded by options.timeout alone.
  template <class Token>
  auto async_perform(const Request& request, const Options& options, Token&& token) {
    return async_perform(request, options, {}, nullptr, nullptr, std::nullopt, std::forward<Token>(token));
  }

  /// Returns how many connections libcurl opened so far (each one a TCP and, for https, a TLS handshake).
  [[nodiscard]] long connections_opened() const noexcept { return impl_->opened; }

 private:
  /// One socket libcurl uses, watched by an Asio descriptor that does not own it.
  struct Socket {
    Socket(const boost::asio::any_io_executor& executor, curl_socket_t fd_in)
        : descriptor(executor, fd_in), fd(fd_in) {}
    boost::asio::posix::stream_descriptor descriptor;
    curl_socket_t fd;
    int wanted = 0;  ///< CURL_POLL_IN, CURL_POLL_OUT or both
    bool reading = false, writing = false, gone = false;
  };

  struct Impl : std::enable_shared_from_this<Impl> {
    Impl(boost::asio::any_io_executor executor_in, const ClientOptions& options)
        : executor(std::move(executor_in)), timer(executor) {
      if (options.max_host_connections &&
          (*options.max_host_connections == 0 ||
           *options.max_host_connections > static_cast<std::size_t>(std::numeric_limits<long>::max())))
        ::llmretry::detail::throw_invalid_argument(
            "curl::ClientOptions::max_host_connections must be at least 1 when set");
      limited = options.max_host_connections.has_value();
      ::llmretry::curl::detail::global_init();
      multi.reset(curl_multi_init());
      if (!multi) throw ProviderError("curl_multi_init failed", Failure{});
      curl_multi_setopt(multi.get(), CURLMOPT_SOCKETFUNCTION, &Impl::on_socket);
      curl_multi_setopt(multi.get(), CURLMOPT_SOCKETDATA, this);
      curl_multi_setopt(multi.get(), CURLMOPT_TIMERFUNCTION, &Impl::on_timer);
      curl_multi_setopt(multi.get(), CURLMOPT_TIMERDATA, this);
      if (limited)
        curl_multi_setopt(multi.get(), CURLMOPT_MAX_HOST_CONNECTIONS, static_cast<long>(*options.max_host_connections));
    }

    Impl(const Impl&) = delete;
    Impl& operator=(const Impl&) = delete;
    Impl(Impl&&) = delete;
    Impl& operator=(Impl&&) = delete;

    ~Impl() {
      for (CURL* easy : idle) curl_easy_cleanup(easy);
    }

    template <class Handler>
    void start(Handler handler, const Request& request, const Options& options, HeaderList extra,
               const std::function<void(const SseEvent&)>* on_event, StreamGuard* guard,
               std::optional<std::chrono::milliseconds> time_left) {
      auto pending = std::make_unique<PendingOf<Handler>>(std::move(handler), executor);
      detail::Pending* raw = pending.get();
      auto slot = boost::asio::get_associated_cancellation_slot(pending->handler);
      in_flight.emplace(raw, std::move(pending));
      try {
        const auto timeout = ::llmretry::curl::detail::attempt_timeout(options, time_left);
        raw->easy = take_easy();
        raw->extra_headers = std::move(extra);
        raw->exchange.emplace(raw->easy, request, options, raw->extra_headers, on_event, guard, timeout);
        curl_easy_setopt(raw->easy, CURLOPT_PRIVATE, raw);
        // Over https a request may share an HTTP/2 connection: it waits for one that may carry it rather than
        // open one more. Over plain http (HTTP/1.1) there is nothing to wait for.
        if (::llmretry::detail::iequals(std::string_view(request.url).substr(0, 8), "https://"))
          curl_easy_setopt(raw->easy, CURLOPT_PIPEWAIT, 1L);
        curl_easy_setopt(raw->easy, CURLOPT_OPENSOCKETFUNCTION, &Impl::on_open);
        curl_easy_setopt(raw->easy, CURLOPT_OPENSOCKETDATA, this);
        curl_easy_setopt(raw->easy, CURLOPT_CLOSESOCKETFUNCTION, &Impl::on_close);
        curl_easy_setopt(raw->easy, CURLOPT_CLOSESOCKETDATA, this);
        if (options.idle_timeout || options.cancel != nullptr) {
          // In a multi handle the progress callback runs only when libcurl acts on the transfer: a
          // low-speed limit makes it look every second, and the callback checks the idle time.
          curl_easy_setopt(raw->easy, CURLOPT_LOW_SPEED_LIMIT, 1L);
          curl_easy_setopt(raw->easy, CURLOPT_LOW_SPEED_TIME, 86'400L);
        }
        if (slot.is_connected()) {
          slot.assign([weak = this->weak_from_this(), raw](boost::asio::cancellation_type) {
            if (auto self = weak.lock()) self->cancel(raw);
          });
        }
        if (acting) {  // started by a streaming handler: libcurl refuses a handle from inside its callbacks
          to_add.push_back(raw);
        } else if (curl_multi_add_handle(multi.get(), raw->easy) != CURLM_OK) {
          throw ProviderError("curl_multi_add_handle failed", Failure{});
        }
        if (limited) {  // libcurl checks no timeout while a request waits for a connection: the client does
          raw->deadline.emplace(executor, timeout);
          raw->deadline->async_wait([weak = this->weak_from_this(), raw](boost::system::error_code error) {
            if (error) return;
            if (auto self = weak.lock()) self->time_out(raw);
          });
        }
      } catch (...) {
        end(raw, std::current_exception());
      }
    }

    /// Ends every request in flight with operation_aborted; the client is going away. Inside libcurl's
    /// callbacks (a streaming handler destroyed the client), only marks it, for act to carry out once libcurl
    /// has returned (the handler that called act holds the state meanwhile).
    void shut_down() {
      if (acting) {
        closing = true;
        return;
      }
      timer.cancel();
      to_add.clear();
      while (!in_flight.empty()) end(in_flight.begin()->first, aborted());
      multi.reset();  // closes the connections (on_close lets go of their descriptors)
      while (!sockets.empty()) forget(sockets.begin()->first);
    }

    /// Stops `pending` if it is still in flight and completes it with operation_aborted; inside libcurl's
    /// callbacks (a streaming handler), only marks it, for act to stop once libcurl has returned.
    void cancel(detail::Pending* pending) noexcept {
      const auto found = in_flight.find(pending);
      if (found == in_flight.end()) return;
      if (acting) {
        found->second->cancelled = true;
        cancels_waiting = true;
        return;
      }
      end(pending, aborted());
    }

    /// Ends `pending`, if it is still in flight, as libcurl ends a request at its timeout.
    void time_out(detail::Pending* pending) noexcept {
      const auto found = in_flight.find(pending);
      if (found != in_flight.end()) finish(found, CURLE_OPERATION_TIMEDOUT, true);
    }

    /// Completes the request of `found`, which ended with `code`; `by_client`: at a timeout the client kept.
    void finish(std::unordered_map<detail::Pending*, std::unique_ptr<detail::Pending>>::iterator found, CURLcode code,
                bool by_client = false) noexcept {
      std::unique_ptr<detail::Pending> owned = std::move(found->second);
      in_flight.erase(found);
      curl_multi_remove_handle(multi.get(), owned->easy);
      std::exception_ptr error;
      Response response;
      try {
        response = by_client ? owned->exchange->time_out() : owned->exchange->conclude(code);
      } catch (...) {
        error = std::current_exception();
      }
      give_back(*owned);
      owned->complete(std::move(error), std::move(response));
    }

    /// Returns the exception of a cancelled request.
    static std::exception_ptr aborted() noexcept {
      return std::make_exception_ptr(
          boost::system::system_error(boost::asio::error::operation_aborted, "curl: request cancelled"));
    }

    /// Takes `pending` (in flight) out of the client: its easy handle out of the multi handle (libcurl returns
    /// CURLM_OK for one it never added) and kept for the next request; then completes it with `error`.
    /// Not from inside libcurl's callbacks.
    void end(detail::Pending* pending, std::exception_ptr error) noexcept {
      const auto found = in_flight.find(pending);
      if (found == in_flight.end()) return;
      std::unique_ptr<detail::Pending> owned = std::move(found->second);
      in_flight.erase(found);
      if (owned->easy != nullptr) curl_multi_remove_handle(multi.get(), owned->easy);
      give_back(*owned);
      owned->complete(std::move(error), Response{});
    }

    /// Carries out what a streaming handler asked while libcurl ran it: adds the requests it started, then
    /// stops those it cancelled. Nothing is freed before both are done: no address is used twice meanwhile.
    void catch_up() noexcept {
      std::vector<detail::Pending*> added;
      added.swap(to_add);
      for (detail::Pending* pending : added) {
        if (curl_multi_add_handle(multi.get(), pending->easy) != CURLM_OK) {
          end(pending, std::make_exception_ptr(ProviderError("curl_multi_add_handle failed", Failure{})));
        }
      }
      if (!std::exchange(cancels_waiting, false)) return;
      for (auto at = in_flight.begin(); at != in_flight.end();) {
        detail::Pending* pending = at->first;
        const bool stop = at->second->cancelled;
        ++at;  // end erases `pending` alone: `at` stays valid
        if (stop) end(pending, aborted());
      }
    }

    /// Returns an easy handle: one kept from an earlier request, or a new one.
    CURL* take_easy() {
      if (!idle.empty()) {
        CURL* easy = idle.back();
        idle.pop_back();
        return easy;
      }
      CURL* easy = curl_easy_init();
      if (easy == nullptr) throw ProviderError("curl_easy_init failed", Failure{});
      return easy;
    }

    /// Resets the request's exchange (the easy handle's options) and keeps its handle for the next request.
    void give_back(detail::Pending& pending) {
      pending.exchange.reset();
      if (pending.easy != nullptr) idle.push_back(std::exchange(pending.easy, nullptr));
    }

    /// Lets libcurl act on `fd` (or its timeouts, for CURL_SOCKET_TIMEOUT), then completes what ended.
    void act(curl_socket_t fd, int events) {
      int running = 0;
      acting = true;
      curl_multi_socket_action(multi.get(), fd, events, &running);
      acting = false;
      if (closing) {
        shut_down();
        return;
      }
      catch_up();
      int left = 0;
      while (CURLMsg* message = curl_multi_info_read(multi.get(), &left)) {
        if (message->msg != CURLMSG_DONE) continue;
        void* data = nullptr;
        curl_easy_getinfo(message->easy_handle, CURLINFO_PRIVATE, &data);
        const CURLcode code = message->data.result;  // NOLINT(*-union-access): libcurl's CURLMsg
        const auto found = in_flight.find(static_cast<detail::Pending*>(data));
        if (found != in_flight.end()) finish(found, code);
      }
    }

    /// Waits for `socket` to become readable or writable as libcurl wants, once per direction.
    void watch(const std::shared_ptr<Socket>& socket) {
      if ((socket->wanted & CURL_POLL_IN) != 0 && !socket->reading) {
        socket->reading = true;
        socket->descriptor.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                                      [weak = this->weak_from_this(), socket](boost::system::error_code ended) {
                                        socket->reading = false;
                                        auto self = weak.lock();
                                        if (!self || ended || socket->gone) return;
                                        self->act(socket->fd, CURL_CSELECT_IN);
                                        if (!socket->gone) self->watch(socket);
                                      });
      }
      if ((socket->wanted & CURL_POLL_OUT) != 0 && !socket->writing) {
        socket->writing = true;
        socket->descriptor.async_wait(boost::asio::posix::stream_descriptor::wait_write,
                                      [weak = this->weak_from_this(), socket](boost::system::error_code ended) {
                                        socket->writing = false;
                                        auto self = weak.lock();
                                        if (!self || ended || socket->gone) return;
                                        self->act(socket->fd, CURL_CSELECT_OUT);
                                        if (!socket->gone) self->watch(socket);
                                      });
      }
    }

    /// Stops watching `fd` and lets go of it without closing it.
    void forget(curl_socket_t fd) {
      const auto found = sockets.find(fd);
      if (found == sockets.end()) return;
      found->second->gone = true;
      boost::system::error_code ignored;
      found->second->descriptor.cancel(ignored);
      (void)found->second->descriptor.release();
      sockets.erase(found);
    }

    static int on_socket(CURL* /*easy*/, curl_socket_t fd, int what, void* user, void* /*socket_data*/) noexcept {
      auto& impl = *static_cast<Impl*>(user);
      if (what == CURL_POLL_REMOVE) {
        impl.forget(fd);
        return 0;
      }
      try {
        auto found = impl.sockets.find(fd);
        if (found == impl.sockets.end())
          found = impl.sockets.emplace(fd, std::make_shared<Socket>(impl.executor, fd)).first;
        found->second->wanted = what;
        impl.watch(found->second);
        return 0;
      } catch (...) {
        return -1;
      }
    }

    static int on_timer(CURLM* /*multi*/, long timeout_ms, void* user) noexcept {
      auto& impl = *static_cast<Impl*>(user);
      try {
        if (timeout_ms < 0) {
          impl.timer.cancel();
          return 0;
        }
        impl.timer.expires_after(std::chrono::milliseconds{timeout_ms});
        impl.timer.async_wait([weak = impl.weak_from_this()](boost::system::error_code ended) {
          auto self = weak.lock();
          if (!self || ended) return;
          self->act(CURL_SOCKET_TIMEOUT, 0);
        });
        return 0;
      } catch (...) {
        return -1;  // libcurl then fails the transfers of this multi handle
      }
    }

    static curl_socket_t on_open(void* user, curlsocktype /*purpose*/, curl_sockaddr* address) noexcept {
      auto& impl = *static_cast<Impl*>(user);
      const curl_socket_t fd = ::socket(address->family, address->socktype, address->protocol);
      if (fd == CURL_SOCKET_BAD) return fd;
      ++impl.opened;
      impl.forget(fd);  // a descriptor left for an earlier socket of that number, closed without telling us
      return fd;
    }

    static int on_close(void* user, curl_socket_t fd) noexcept {
      static_cast<Impl*>(user)->forget(fd);
      return ::close(fd);
    }

    boost::asio::any_io_executor executor;
    boost::asio::steady_timer timer;
    std::unique_ptr<CURLM, detail::MultiDeleter> multi;
    std::unordered_map<curl_socket_t, std::shared_ptr<Socket>> sockets;
    std::unordered_map<detail::Pending*, std::unique_ptr<detail::Pending>> in_flight;
    std::vector<CURL*> idle;               ///< easy handles kept for the next requests
    std::vector<detail::Pending*> to_add;  ///< started while `acting`: added once libcurl has returned
    long opened = 0;
    bool acting = false;           ///< inside curl_multi_socket_action: libcurl refuses to add or remove a handle
    bool cancels_waiting = false;  ///< a request in flight was marked cancelled while `acting`
    bool limited = false;          ///< ClientOptions::max_host_connections is set: the client keeps each timeout
    bool closing = false;          ///< the client was destroyed while `acting`
  };

  /// A request and its handler, which it completes through the handler's executor, keeping that executor
  /// busy (a work guard) while the request is in flight.
  template <class Handler>
  struct PendingOf final : detail::Pending {
    PendingOf(Handler&& handler_in, const boost::asio::any_io_executor& fallback)
        : handler(std::move(handler_in)),
          work(boost::asio::make_work_guard(boost::asio::get_associated_executor(handler, fallback))) {}

    void complete(std::exception_ptr error, Response response) override {
      boost::asio::get_associated_cancellation_slot(handler).clear();
      // Posted before the work guard goes: an io_context whose work drops to none stops.
      boost::asio::post(work.get_executor(), [handler = std::move(handler), error = std::move(error),
                                              response = std::move(response)]() mutable {
        std::move(handler)(std::move(error), std::move(response));
      });
      work.reset();
    }

    Handler handler;
    boost::asio::executor_work_guard<boost::asio::associated_executor_t<Handler, boost::asio::any_io_executor>> work;
  };

  std::shared_ptr<Impl> impl_;
};

/// One logical call made asynchronously, as curl::Call is made blocking: every attempt sends the same
/// idempotency key and its attempt number. Pass it (or std::ref to it, to read it afterwards) as the
/// attempt of asio::async_call_with_retry<curl::Response>: each invocation starts one attempt on `client`.
/// Set on_event for a streamed call: a failure after an event reached the handler completes as
/// StreamInterrupted, never retried.
class AsyncCall {
 public:
  /// A call of `request` under `options` on `client` (which must outlive it). `idempotency_key`: your own
  /// key; empty: a new UUID v4.
  AsyncCall(AsyncClient& client, Request request, Options options = {}, std::string idempotency_key = {})
      : client_(&client),
        request_(std::move(request)),
        options_(std::move(options)),
        key_(idempotency_key.empty() ? new_idempotency_key() : std::move(idempotency_key)) {}

  /// Makes the call streamed: each server-sent event of a 2xx answer goes to `handler`, in order, on the
  /// client's executor. Returns *this.
  AsyncCall& on_event(std::function<void(const SseEvent&)> handler) {
    on_event_ = std::move(handler);
    return *this;
  }

  /// Starts the next attempt, its total timeout the shorter of options.timeout and `attempt.time_left`;
  /// completes `handler` with PerformSignature. The call must not be moved while an attempt is in flight.
  /// A streamed call that is hedged (Attempt::claims set) claims the stream before its first event reaches
  /// the handler: the request that loses ends with operation_aborted before any of its events do.
  template <class Handler>
  void operator()(const Attempt& attempt, Handler&& handler) {
    ++attempts_;
    HeaderList extra;
    if (!options_.idempotency_header.empty()) extra.emplace_back(options_.idempotency_header, key_);
    if (!options_.attempt_header.empty()) extra.emplace_back(options_.attempt_header, std::to_string(attempts_));
    const std::function<void(const SseEvent&)>* events = nullptr;
    StreamGuard* guard = nullptr;
    if (on_event_ && attempt.claims == nullptr) {
      events = &on_event_;
      guard = &guard_;
    } else if (on_event_) {
      const std::size_t index = attempt.hedge ? 1 : 0;
      Claimed& claimed = claimed_[index];
      claimed.attempt = attempt;
      claimed.won = false;
      claimed.on_event = [this, index](const SseEvent& event) { pass_claimed(index, event); };
      if (attempt.hedge) hedge_guard_ = StreamGuard{};
      events = &claimed.on_event;
      guard = attempt.hedge ? &hedge_guard_ : &guard_;
    }
    client_->async_perform(request_, options_, std::move(extra), events, guard, attempt.time_left,
                           std::forward<Handler>(handler));
  }

  /// Returns the idempotency key every attempt sends.
  const std::string& idempotency_key() const noexcept { return key_; }
  /// Returns the attempts started so far.
  int attempts() const noexcept { return attempts_; }
  /// Returns the stream's guard: how much content reached the handler.
  const StreamGuard& stream() const noexcept { return hedge_streams_ ? hedge_guard_ : guard_; }

 private:
  /// The events of one request of a hedged attempt: its own (0) or its hedge (1).
  struct Claimed {
    Attempt attempt;
    bool won = false;  ///< its claim was granted: its events reach the handler
    std::function<void(const SseEvent&)> on_event;
  };

  /// Passes `event` of request `index` to the handler once it claimed the stream. Throws
  /// boost::system::system_error(operation_aborted) when the other request claimed it first.
  void pass_claimed(std::size_t index, const SseEvent& event) {
    Claimed& claimed = claimed_[index];
    if (!claimed.won) {
      if (!claimed.attempt.claim())
        throw boost::system::system_error(boost::asio::error::operation_aborted,
                                          "curl::AsyncCall: the other request of the hedged attempt streams");
      claimed.won = true;
      hedge_streams_ = claimed.attempt.hedge;
    }
    on_event_(event);
  }

  AsyncClient* client_;
  Request request_;
  Options options_;
  std::string key_;
  std::function<void(const SseEvent&)> on_event_;
  StreamGuard guard_;
  StreamGuard hedge_guard_;     ///< a hedge's stream
  bool hedge_streams_ = false;  ///< a hedge's events reach the handler
  Claimed claimed_[2];
  int attempts_ = 0;
};

}  // namespace curl
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_CURL_ASYNC_HPP
