// Streamed answers through llmretry-relay: the upstream call runs on a thread of its own and hands each
// server-sent event to the client's connection as it arrives.
#ifndef LLMRETRY_RELAY_STREAM_HPP
#define LLMRETRY_RELAY_STREAM_HPP

#include <llmretry/http/sse.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "errors.hpp"
#include "forward.hpp"

namespace relay {

/// Returns `event` in the text/event-stream format, ready to write: its `event:` (unless "message"),
/// `id:` and `data:` lines, then the blank line that ends it.
inline std::string sse_text(const llmretry::SseEvent& event) {
  std::string text;
  if (event.event != "message") text.append("event: ").append(event.event).append("\n");
  if (!event.id.empty()) text.append("id: ").append(event.id).append("\n");
  std::size_t begin = 0;
  for (;;) {
    const auto end = event.data.find('\n', begin);
    text.append("data: ")
        .append(event.data, begin, end == std::string::npos ? std::string::npos : end - begin)
        .append("\n");
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  return text.append("\n");
}

/// The events of one streamed call, from the thread that makes it to the thread that writes them to the
/// client. Thread-safe.
class StreamPipe {
 public:
  /// What receives each event of the call.
  using OnEvent = std::function<void(const llmretry::SseEvent&)>;
  /// The call: given the receiver of its events and the flag that cancels it, returns its Answer.
  using Call = std::function<Answer(const OnEvent*, const std::atomic<bool>* cancel)>;

  /// Starts `call` on a thread of its own. An exception escaping it ends the call with a 502
  /// (code "internal_error") whose text says nothing of the exception.
  explicit StreamPipe(Call call) : thread_([this, call = std::move(call)] { run(call); }) {}
  StreamPipe(const StreamPipe&) = delete;
  StreamPipe& operator=(const StreamPipe&) = delete;
  StreamPipe(StreamPipe&&) = delete;
  StreamPipe& operator=(StreamPipe&&) = delete;
  /// Cancels the call if it still runs, and waits for its thread.
  ~StreamPipe() {
    cancel();
    thread_.join();
  }

  /// Waits until the first event arrived or the call ended. Returns the call's answer when it ended
  /// before any event (a refusal, an error, or an upstream that did not stream), nullopt once it streams.
  std::optional<Answer> first() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return !chunks_.empty() || answer_; });
    if (!chunks_.empty()) return std::nullopt;
    return std::move(answer_);
  }

  /// Waits for the next events. Returns them joined, or nullopt once the call has ended and every event
  /// was taken; `failed` then holds the call's answer when the stream ended in error after it had begun.
  std::optional<std::string> next(std::optional<Answer>& failed) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return !chunks_.empty() || answer_; });
    if (chunks_.empty()) {
      if (answer_->status < 200 || answer_->status > 299) failed = answer_;
      return std::nullopt;
    }
    std::string text;
    for (auto& chunk : chunks_) text += chunk;
    chunks_.clear();
    return text;
  }

  /// Makes the call stop at its next event, or within about a second (the client went away).
  void cancel() noexcept { cancelled_ = true; }

 private:
  void run(const Call& call) {
    std::optional<Answer> answer;
    try {
      const OnEvent on_event = [this](const llmretry::SseEvent& event) { push(sse_text(event)); };
      answer = call(&on_event, &cancelled_);
    } catch (...) {
      answer.emplace();
      answer->status = 502;
      answer->body = error_body({502, "the relay failed to make the call", "server_error", "internal_error"});
    }
    const std::lock_guard<std::mutex> lock(mutex_);
    answer_ = std::move(answer);
    changed_.notify_all();
  }

  void push(std::string text) {
    if (cancelled_) throw StreamCut("the client went away");
    const std::lock_guard<std::mutex> lock(mutex_);
    chunks_.push_back(std::move(text));
    changed_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::string> chunks_;
  std::optional<Answer> answer_;
  std::atomic<bool> cancelled_{false};
  std::thread thread_;  ///< last: it starts once the rest is ready
};

}  // namespace relay

#endif  // LLMRETRY_RELAY_STREAM_HPP
