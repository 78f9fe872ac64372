// The server-sent events of a streamed answer, from the network in pieces of any size: the first byte of
// the input chooses where the rest is cut in two. Nothing may crash or leak, and the events must be the
// same whether the body arrives whole or cut.
#include <string>
#include <vector>

#include <llmretry/http/sse.hpp>

#include "fuzz_support.hpp"

namespace {

using Events = std::vector<std::string>;

// Returns every event of `pieces` fed one after the other, as "event\nid\ndata".
template <class... Pieces>
Events parse(Pieces... pieces) {
  Events events;
  llmretry::SseParser parser;
  const auto collect = [&](const llmretry::SseEvent& event) {
    events.push_back(event.event + '\n' + event.id + '\n' + event.data);
  };
  (parser.feed(pieces, collect), ...);
  return events;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const auto body = llmretry_fuzz::as_text(data + 1, size - 1);
  const auto cut = data[0] % (body.size() + 1);
  llmretry_fuzz::require(parse(body) == parse(body.substr(0, cut), body.substr(cut)));
  return 0;
}
