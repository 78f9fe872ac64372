#include <llmretry/http/sse.hpp>

#include <string>
#include <vector>

#include <llmretry_catch.hpp>

using llmretry::SseEvent;
using llmretry::SseParser;

namespace {
std::vector<SseEvent> parse_in_pieces(const std::string& text, std::size_t piece) {
  SseParser parser;
  std::vector<SseEvent> events;
  for (std::size_t i = 0; i < text.size(); i += piece)
    parser.feed(std::string_view(text).substr(i, piece), [&](const SseEvent& event) { events.push_back(event); });
  return events;
}
}  // namespace

TEST_CASE("SSE events, whatever the pieces they arrive in") {
  const std::string text =
      "\xEF\xBB\xBF: keep-alive\r\n"
      "event: message_start\r\ndata: {\"a\":1}\r\n\r\n"
      "data: line one\ndata:line two\nid: 7\n\n"
      "event: ping\n\n"  // no data: not dispatched
      "data: cr only\r\r"
      "event: error\ndata: {\"type\":\"error\"}\n\n"
      "data: incomplete";
  for (std::size_t piece : {std::size_t{1}, std::size_t{2}, std::size_t{7}, text.size()}) {
    INFO("piece " << piece);
    const auto events = parse_in_pieces(text, piece);
    REQUIRE(events.size() == 4);
    CHECK(events[0].event == "message_start");
    CHECK(events[0].data == "{\"a\":1}");
    CHECK(events[1].event == "message");
    CHECK(events[1].data == "line one\nline two");
    CHECK(events[1].id == "7");
    CHECK(events[2].data == "cr only");
    CHECK(events[3].event == "error");
  }
}

TEST_CASE("an empty data line still makes an event") {
  const auto events = parse_in_pieces("data\n\ndata:\ndata:\n\n", 3);
  REQUIRE(events.size() == 2);
  CHECK(events[0].data.empty());
  CHECK(events[1].data == "\n");
}

TEST_CASE("SseParser: one event is held up to its size limit; partial() tells a cut last event") {
  std::vector<llmretry::SseEvent> events;
  const auto collect = [&](const llmretry::SseEvent& event) { events.push_back(event); };
  llmretry::SseParser parser(16);
  parser.feed("data: short\n\n", collect);
  CHECK_FALSE(parser.partial());
  parser.feed("data: 0123456789", collect);
  CHECK(parser.partial());
  CHECK_FALSE(parser.overflowed());
  parser.feed("abcdef\n\ndata: after\n\n", collect);
  CHECK(parser.overflowed());
  REQUIRE(events.size() == 1);
  CHECK(events[0].data == "short");
}
