#ifndef LLMRETRY_HTTP_STREAM_HPP
#define LLMRETRY_HTTP_STREAM_HPP

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../errors.hpp"
#include "../failure.hpp"
#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// Keeps a streamed answer from being replayed: before any content reached the caller, a failure is
/// retried like any other; after, it becomes FailureKind::stream_interrupted, which is never retried
/// (the caller already showed part of an answer that a new attempt would not repeat word for word).
class StreamGuard {
 public:
  /// Records that `bytes` of content (one event) were handed to the caller.
  void deliver(std::size_t bytes) noexcept {
    ++events_;
    bytes_ += bytes;
  }
  /// Returns true once content has reached the caller.
  bool started() const noexcept { return events_ > 0; }
  /// Returns the bytes of content handed to the caller so far.
  std::size_t delivered_bytes() const noexcept { return bytes_; }
  /// Returns the events handed to the caller so far.
  std::size_t delivered_events() const noexcept { return events_; }
  /// Keeps `headers`: those of the response whose events are delivered (a transport tells them before the
  /// first event).
  void streaming_with(std::vector<std::pair<std::string, std::string>> headers) { headers_ = std::move(headers); }
  /// Returns the headers of the response that streams: empty until the transport told them.
  const std::vector<std::pair<std::string, std::string>>& response_headers() const noexcept { return headers_; }

  /// Returns `failure` unchanged before content reached the caller. After, returns a stream_interrupted
  /// failure with the same status, Sent::maybe_processed, no wait and no `x-should-retry` (which must not revive it).
  Failure failure_for(const Failure& failure) const noexcept {
    if (!started()) return failure;
    return Failure{FailureKind::stream_interrupted, failure.status, std::nullopt, Sent::maybe_processed, std::nullopt};
  }

 private:
  std::size_t events_ = 0;
  std::size_t bytes_ = 0;
  std::vector<std::pair<std::string, std::string>> headers_;
};

/// A streamed answer broke after content had reached the caller: it is never retried. Says how much was
/// delivered and what broke it.
class StreamInterrupted : public ProviderError {
 public:
  /// `guard`: the stream's guard (it must have started); `cause`: the failure that broke the stream.
  StreamInterrupted(const std::string& message, const StreamGuard& guard, const Failure& cause)
      : ProviderError(message, guard.failure_for(cause)),
        cause_(cause),
        bytes_(guard.delivered_bytes()),
        events_(guard.delivered_events()) {}

  /// Returns the failure that broke the stream (a timeout, a reset, an SSE `error` event...).
  const Failure& cause() const noexcept { return cause_; }
  /// Returns the bytes of content the caller received before the break.
  std::size_t delivered_bytes() const noexcept { return bytes_; }
  /// Returns the events the caller received before the break.
  std::size_t delivered_events() const noexcept { return events_; }

 private:
  Failure cause_;
  std::size_t bytes_;
  std::size_t events_;
};

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_HTTP_STREAM_HPP
