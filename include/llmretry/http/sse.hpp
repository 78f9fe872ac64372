#ifndef LLMRETRY_HTTP_SSE_HPP
#define LLMRETRY_HTTP_SSE_HPP

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// One server-sent event, as dispatched by SseParser.
struct SseEvent {
  std::string event = "message";  ///< the `event:` field; "message" when the server sent none
  std::string data;               ///< the `data:` lines joined with '\n'
  std::string id;                 ///< the `id:` field of this event, if any
};

/// An incremental parser of a `text/event-stream` body (the WHATWG server-sent events format): feed it
/// the bytes as they arrive, in pieces of any size, and it calls back once per complete event.
/// Lines may end in "\r\n", "\n" or "\r"; comments (":" lines, the keep-alives) and unknown fields are
/// skipped; an event without data is not dispatched. Never throws on malformed input.
/// One event's data, with the line being read, is held up to a size limit (any other field is one line,
/// so within it too); past it the parser stops (see overflowed), so a server cannot make it buffer
/// without bound.
class SseParser {
 public:
  /// The default limit of one event: 1 MiB.
  static constexpr std::size_t default_max_event_bytes = std::size_t{1} << 20;

  /// A parser that holds at most `max_event_bytes` of one event.
  explicit SseParser(std::size_t max_event_bytes = default_max_event_bytes) noexcept : max_(max_event_bytes) {}

  /// Parses `bytes` and calls `on_event(const SseEvent&)` for each event they complete. An incomplete
  /// last line is kept for the next call. Once an event passes the size limit, this and every later
  /// call ignore their bytes. Throws only what `on_event` throws.
  template <class OnEvent>
  void feed(std::string_view bytes, OnEvent&& on_event) {
    for (char c : bytes) {
      if (overflowed_) return;
      if (after_cr_ && c == '\n') {
        after_cr_ = false;
        continue;
      }
      after_cr_ = c == '\r';
      if (c == '\r' || c == '\n') {
        end_line(on_event);
      } else if (line_.size() + pending_.data.size() >= max_) {
        overflowed_ = true;
      } else {
        line_ += c;
      }
    }
  }

  /// Returns true once an event passed the size limit: the stream cannot be read further.
  bool overflowed() const noexcept { return overflowed_; }
  /// Returns true when bytes were fed that no dispatched event accounted for yet: an incomplete line, or
  /// data lines not yet ended by a blank line. At the end of a stream, its last event was cut.
  bool partial() const noexcept { return !line_.empty() || has_data_; }

 private:
  template <class OnEvent>
  void end_line(OnEvent& on_event) {
    std::string_view line = line_;
    if (first_line_) {
      first_line_ = false;
      if (line.substr(0, 3) == "\xEF\xBB\xBF") line.remove_prefix(3);  // byte order mark
    }
    if (line.empty()) {
      if (has_data_) {
        pending_.data.pop_back();  // the '\n' after the last data line
        SseEvent event = std::move(pending_);
        pending_ = SseEvent{};
        has_data_ = false;
        on_event(static_cast<const SseEvent&>(event));
      } else {
        pending_ = SseEvent{};
      }
      line_.clear();
      return;
    }
    if (line.front() != ':') {
      const auto colon = line.find(':');
      const std::string_view field = line.substr(0, colon);
      std::string_view value = colon == std::string_view::npos ? std::string_view{} : line.substr(colon + 1);
      if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      if (field == "data") {
        pending_.data.append(value).push_back('\n');
        has_data_ = true;
      } else if (field == "event") {
        pending_.event = value.empty() ? "message" : std::string(value);
      } else if (field == "id") {
        pending_.id = std::string(value);
      }
    }
    line_.clear();
  }

  std::string line_;
  SseEvent pending_;
  bool has_data_ = false;
  bool after_cr_ = false;
  bool first_line_ = true;
  bool overflowed_ = false;
  std::size_t max_;
};

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_HTTP_SSE_HPP
