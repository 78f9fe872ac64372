#ifndef LLMRETRY_REDIS_CONNECTION_HPP
#define LLMRETRY_REDIS_CONNECTION_HPP

/// A connection to one Redis server through hiredis (target llmretry::redis): timeouts on connecting and on
/// every command, Lua scripts by EVALSHA, and every failure thrown as a redis::RedisError naming the operation.

#include <hiredis/hiredis.h>

#include <sys/time.h>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../detail/number.hpp"
#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace redis {

/// Where the server is and how long to wait for it.
struct Options {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::chrono::milliseconds connect_timeout{1000};  ///< for connecting (and reconnecting)
  std::chrono::milliseconds command_timeout{1000};  ///< for each command's reply
  std::string prefix = "llmretry:";                 ///< the stores' keys begin with it
};

/// Returns the options of the URL "redis://HOST[:PORT]" (the port 6379 when absent), the other fields
/// left at their defaults. HOST is a name, an IPv4 address or an IPv6 address in brackets
/// ("redis://[::1]:6379", whose host is "::1"). Throws std::invalid_argument naming what is wrong when the
/// URL is not of that form; the message never quotes the URL, which may hold a password: a user or
/// password ("redis://:PASSWORD@HOST") is refused, since the connection sends no AUTH.
[[nodiscard]] inline Options options_from_url(std::string_view url) {
  constexpr std::string_view scheme = "redis://";
  const auto malformed = [](const std::string& problem) {
    return std::invalid_argument("the Redis URL " + problem + " (expected redis://HOST[:PORT])");
  };
  if (url.substr(0, scheme.size()) != scheme) throw malformed("does not begin with redis://");
  const std::string_view address = url.substr(scheme.size());
  if (address.find('@') != std::string_view::npos)
    throw malformed("has a user or password, which is not supported: the connection sends no AUTH");
  if (address.find_first_of("/?#") != std::string_view::npos)
    throw malformed("has a path, query or fragment, which is not supported");
  Options options;
  std::string_view host = address;
  std::string_view rest;  // what follows the host: empty or ":PORT"
  if (!address.empty() && address.front() == '[') {
    const auto close = address.find(']');
    if (close == std::string_view::npos) throw malformed("has an IPv6 address without its closing ']'");
    host = address.substr(1, close - 1);
    rest = address.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') throw malformed("has text after its IPv6 address");
  } else if (const auto colon = address.find(':'); colon != std::string_view::npos) {
    host = address.substr(0, colon);
    rest = address.substr(colon);
    if (rest.find(':', 1) != std::string_view::npos)
      throw malformed("has an IPv6 address outside brackets (write redis://[::1]:6379)");
  }
  if (host.empty()) throw malformed("has no host");
  options.host = std::string(host);
  if (!rest.empty()) {
    const auto port = llmretry::detail::parse_digits(rest.substr(1));
    if (!port || *port < 1 || *port > 65535) throw malformed("has a port that is not a number from 1 to 65535");
    options.port = static_cast<int>(*port);
  }
  return options;
}

/// What kind of failure a redis::RedisError is.
enum class ErrorKind {
  connection,  ///< could not connect, or the connection broke (refused, reset, closed): the command may
               ///< or may not have run
  timeout,     ///< no reply within the timeout: the command may or may not have run
  reply,       ///< the server answered with an error (wrong type, script error, ...) or an unexpected reply
};

/// Returns the snake_case name of a kind, such as "timeout".
[[nodiscard]] constexpr const char* to_string(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::connection: return "connection";
    case ErrorKind::timeout: return "timeout";
    case ErrorKind::reply: return "reply";
  }
  return "unknown";
}

/// A failure talking to Redis: what() reads "redis <operation> on <host>:<port>: <kind>: <detail>".
class RedisError : public std::runtime_error {
 public:
  /// A failure of `operation` (such as "idempotency claim") against `server` ("host:port").
  RedisError(ErrorKind kind, std::string operation, const std::string& server, const std::string& detail)
      : std::runtime_error("redis " + operation + " on " + server + ": " + to_string(kind) + ": " + detail),
        kind_(kind),
        operation_(std::move(operation)) {}

  /// Returns the kind of failure.
  [[nodiscard]] ErrorKind kind() const noexcept { return kind_; }
  /// Returns the operation that failed, such as "queue take".
  [[nodiscard]] const std::string& operation() const noexcept { return operation_; }

 private:
  ErrorKind kind_;
  std::string operation_;
};

/// A Lua script run atomically by the server. Its source must outlive every connection that runs it.
struct Script {
  std::string_view source;
};

class Connection;

/// One reply, read through accessors that throw redis::RedisError (ErrorKind::reply) naming the operation when
/// the reply is not of the expected type.
class Reply {
 public:
  /// Returns true for a nil reply.
  [[nodiscard]] bool is_nil() const noexcept { return reply_->type == REDIS_REPLY_NIL; }
  /// Returns the integer of an integer reply.
  [[nodiscard]] long long integer() const {
    expect(REDIS_REPLY_INTEGER, "an integer");
    return reply_->integer;
  }
  /// Returns the integer of an integer reply, or of a string reply holding a decimal integer (as hash
  /// fields are).
  [[nodiscard]] long long number() const {
    if (reply_->type == REDIS_REPLY_INTEGER) return reply_->integer;
    const auto value = llmretry::detail::parse_integer(text());
    if (!value) fail("expected an integer, got '" + text() + "'");
    return *value;
  }
  /// Returns the text of a string or status reply.
  [[nodiscard]] std::string text() const {
    if (reply_->type != REDIS_REPLY_STATUS) expect(REDIS_REPLY_STRING, "a string");
    return {reply_->str, reply_->len};
  }
  /// Returns the number of elements of an array reply.
  [[nodiscard]] std::size_t size() const {
    expect(REDIS_REPLY_ARRAY, "an array");
    return reply_->elements;
  }
  /// Returns element `i` of an array reply (a view: it lives as long as this reply).
  [[nodiscard]] Reply operator[](std::size_t i) const {
    if (i >= size()) fail("no element " + std::to_string(i) + " in an array of " + std::to_string(size()));
    const std::shared_ptr<redisReply> element(reply_,
                                              reply_->element[i]);  // NOLINT(*-pointer-arithmetic): hiredis' array
    return {element, context_};
  }

 private:
  friend class Connection;
  struct Context {
    std::string operation;
    std::string server;
  };
  Reply(std::shared_ptr<redisReply> reply, std::shared_ptr<const Context> context)
      : reply_(std::move(reply)), context_(std::move(context)) {}

  void expect(int type, const char* expected) const {
    if (reply_->type != type)
      fail(std::string("expected ") + expected + ", got reply type " + std::to_string(reply_->type));
  }
  [[noreturn]] void fail(const std::string& detail) const {
    throw RedisError(ErrorKind::reply, context_->operation, context_->server, detail);
  }

  std::shared_ptr<redisReply> reply_;
  std::shared_ptr<const Context> context_;
};

/// A connection to one Redis server. Commands from several threads are sent one at a time (give busy
/// threads a connection each). After a broken connection or a timeout the command throws, and the next
/// command connects again: nothing is retried behind the caller's back, since the command may have run.
class Connection {
 public:
  /// Connects to the server of `options`. Throws redis::RedisError (operation "connect") when it cannot.
  explicit Connection(Options options) : options_(std::move(options)) {
    const std::lock_guard<std::mutex> lock(mutex_);
    connect("connect");
  }

  /// Returns the options it was made with.
  [[nodiscard]] const Options& options() const noexcept { return options_; }

  /// Runs the command `args` (such as {"SET", key, value}) and returns its reply. `operation` names it in
  /// errors. Throws redis::RedisError: connection or timeout, or reply when the server answers with an error.
  [[nodiscard]] Reply command(std::string_view operation, const std::vector<std::string_view>& args) {
    const std::lock_guard<std::mutex> lock(mutex_);
    return run(operation, args);
  }

  /// Runs `script` with `keys` and `args` (by EVALSHA, loading it first on this connection, and again
  /// after the server lost its scripts) and returns its reply. Throws redis::RedisError like command().
  [[nodiscard]] Reply eval(std::string_view operation, const Script& script, const std::vector<std::string_view>& keys,
                           const std::vector<std::string_view>& args) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const std::string key_count = std::to_string(keys.size());
    for (int load = 0;; ++load) {
      if (!context_) connect(operation);  // before reading shas_, which connecting clears
      std::string sha = shas_[script.source.data()];
      if (sha.empty()) sha = shas_[script.source.data()] = run(operation, {"SCRIPT", "LOAD", script.source}).text();
      std::vector<std::string_view> argv{"EVALSHA", sha, key_count};
      argv.insert(argv.end(), keys.begin(), keys.end());
      argv.insert(argv.end(), args.begin(), args.end());
      std::string error;
      Reply reply = run(operation, argv, &error);
      if (error.empty()) return reply;
      if (load > 0 || error.rfind("NOSCRIPT", 0) != 0)
        throw RedisError(ErrorKind::reply, std::string(operation), server(), error);
      shas_.erase(script.source.data());  // the server restarted or flushed its scripts: load it again, once
    }
  }

 private:
  struct FreeContext {
    void operator()(redisContext* context) const noexcept { redisFree(context); }
  };

  [[nodiscard]] std::string server() const { return options_.host + ':' + std::to_string(options_.port); }

  static timeval to_timeval(std::chrono::milliseconds timeout) {
    timeval tv{};
    tv.tv_sec = static_cast<decltype(tv.tv_sec)>(timeout.count() / 1000);
    tv.tv_usec = static_cast<decltype(tv.tv_usec)>((timeout.count() % 1000) * 1000);
    return tv;
  }

  /// Throws the error of the failed context call, kind read from hiredis' error and `saved_errno`.
  [[noreturn]] void throw_context_error(std::string_view operation, int saved_errno) {
    const int err = context_->err;
    std::string detail = static_cast<const char*>(context_->errstr);
    ErrorKind kind = ErrorKind::connection;
#ifdef REDIS_ERR_TIMEOUT
    if (err == REDIS_ERR_TIMEOUT) kind = ErrorKind::timeout;
#endif
    if (err == REDIS_ERR_IO &&
        (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK || saved_errno == ETIMEDOUT || saved_errno == EINPROGRESS))
      kind = ErrorKind::timeout;
    if (err == REDIS_ERR_EOF) detail = "the server closed the connection";
    if (err == REDIS_ERR_PROTOCOL) kind = ErrorKind::reply;
    context_.reset();  // unusable now: the next command connects again
    throw RedisError(kind, std::string(operation), server(), detail);
  }

  void connect(std::string_view operation) {
    shas_.clear();
    errno = 0;
    context_.reset(redisConnectWithTimeout(options_.host.c_str(), options_.port, to_timeval(options_.connect_timeout)));
    const int saved_errno = errno;
    if (!context_) throw RedisError(ErrorKind::connection, std::string(operation), server(), "out of memory");
    if (context_->err != 0) throw_context_error(operation, saved_errno);
    if (redisSetTimeout(context_.get(), to_timeval(options_.command_timeout)) != REDIS_OK)
      throw_context_error(operation, errno);
  }

  /// Runs one command on the (re)connected context. A server error reply throws, unless `error` is given:
  /// then its text is written there and the error reply returned.
  Reply run(std::string_view operation, const std::vector<std::string_view>& args, std::string* error = nullptr) {
    if (!context_) connect(operation);
    std::vector<const char*> argv;
    std::vector<std::size_t> lengths;
    for (const auto arg : args) {
      argv.push_back(arg.data());
      lengths.push_back(arg.size());
    }
    errno = 0;
    auto* raw = static_cast<redisReply*>(
        redisCommandArgv(context_.get(), static_cast<int>(argv.size()), argv.data(), lengths.data()));
    const int saved_errno = errno;
    if (raw == nullptr) throw_context_error(operation, saved_errno);
    auto context = std::make_shared<const Reply::Context>(Reply::Context{std::string(operation), server()});
    Reply reply(std::shared_ptr<redisReply>(raw, freeReplyObject), context);
    if (raw->type == REDIS_REPLY_ERROR) {
      std::string text(raw->str, raw->len);
      if (error == nullptr) throw RedisError(ErrorKind::reply, std::string(operation), server(), text);
      *error = std::move(text);
    }
    return reply;
  }

  Options options_;
  std::mutex mutex_;
  std::unique_ptr<redisContext, FreeContext> context_;
  std::unordered_map<const char*, std::string> shas_;  ///< script source -> SHA1 loaded on this connection
};

}  // namespace redis
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_REDIS_CONNECTION_HPP
