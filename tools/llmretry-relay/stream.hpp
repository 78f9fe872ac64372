// Streamed answers through llmretry-relay: each server-sent event as the client's connection sends it.
#ifndef LLMRETRY_RELAY_STREAM_HPP
#define LLMRETRY_RELAY_STREAM_HPP

#include <llmretry/http/sse.hpp>

#include <string>

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

}  // namespace relay

#endif  // LLMRETRY_RELAY_STREAM_HPP
