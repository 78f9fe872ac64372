// libcurl's memory, counted through curl_global_init_mem (installed before anything else starts libcurl):
// with libcurl 7.88 to 8.6, a streamed request holds no upload buffer once its body is sent and its answer's
// headers have come, unless the body goes chunked.
#include <llmretry/curl/curl.hpp>
#include <llmretry/loopback/provider.hpp>

#include <curl/curl.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <llmretry_catch.hpp>

#include "chat.hpp"

namespace {

/// A size no other libcurl allocation has: the upload buffer's.
constexpr std::size_t upload_buffer = std::size_t{20} << 10;

/// The allocations of upload_buffer bytes libcurl made, and those of them still live.
std::atomic<int> made_upload_buffers{0};
std::atomic<int> live_upload_buffers{0};

// Each block starts with its size, so that free and realloc know what they let go.
constexpr std::size_t prefix = alignof(std::max_align_t);

void* counted_malloc(std::size_t size) {
  if (size > static_cast<std::size_t>(-1) - prefix) return nullptr;
  auto* block = static_cast<unsigned char*>(std::malloc(size + prefix));
  if (block == nullptr) return nullptr;
  std::memcpy(block, &size, sizeof size);
  if (size == upload_buffer) {
    ++made_upload_buffers;
    ++live_upload_buffers;
  }
  return block + prefix;
}

void counted_free(void* pointer) {
  if (pointer == nullptr) return;
  auto* block = static_cast<unsigned char*>(pointer) - prefix;
  std::size_t size = 0;
  std::memcpy(&size, block, sizeof size);
  if (size == upload_buffer) --live_upload_buffers;
  std::free(block);
}

void* counted_realloc(void* pointer, std::size_t size) {
  void* grown = counted_malloc(size);
  if (grown == nullptr || pointer == nullptr) return grown;
  std::size_t old_size = 0;
  std::memcpy(&old_size, static_cast<unsigned char*>(pointer) - prefix, sizeof old_size);
  std::memcpy(grown, pointer, old_size < size ? old_size : size);
  counted_free(pointer);
  return grown;
}

char* counted_strdup(const char* text) {
  const std::size_t size = std::strlen(text) + 1;
  auto* copy = static_cast<char*>(counted_malloc(size));
  if (copy != nullptr) std::memcpy(copy, text, size);
  return copy;
}

void* counted_calloc(std::size_t count, std::size_t size) {
  if (size != 0 && count > static_cast<std::size_t>(-1) / size) return nullptr;
  void* block = counted_malloc(count * size);
  if (block != nullptr) std::memset(block, 0, count * size);
  return block;
}

// Before main, so before the first use of libcurl (which initialises it with the default functions).
const bool counting = curl_global_init_mem(CURL_GLOBAL_DEFAULT, &counted_malloc, &counted_free, &counted_realloc,
                                           &counted_strdup, &counted_calloc) == CURLE_OK;

/// What upload buffers libcurl held while streamed requests ran.
struct Held {
  int made = 0;             ///< buffers made
  std::vector<int> events;  ///< the live buffers at each event
};

/// Makes the streamed request `request` `rounds` times, each with a Call of its own.
Held held_during(const llmretry::curl::Request& request, int rounds) {
  llmretry::curl::Options options = llmretry_test::options_for(llmretry::Provider::openai);
  options.upload_buffer = upload_buffer;
  options.receive_buffer = std::size_t{1} << 10;
  Held held;
  const int made_before = made_upload_buffers.load();
  for (int round = 0; round < rounds; ++round) {
    llmretry::curl::Call call(request, options);
    call.on_event([&](const llmretry::SseEvent&) { held.events.push_back(live_upload_buffers.load()); });
    CHECK(call(llmretry::Attempt{}).status == 200);
  }
  held.made = made_upload_buffers.load() - made_before;
  return held;
}

/// Returns a streamed chat request to `server` whose body is too large to go out with the request's headers
/// over HTTP/1.1: it goes through the upload buffer.
llmretry::curl::Request large_request(const llmretry::testing::LoopbackProvider& server) {
  llmretry::curl::Request request = llmretry_test::chat_request(server);
  request.body = R"({"model":"chat-small","messages":[{"role":"user","content":")" + std::string(100'000, 'x') +
                 R"("}],"stream":true})";
  return request;
}

}  // namespace

TEST_CASE("A streamed request holds no upload buffer once its body is sent and its headers came", "[curl][memory]") {
  REQUIRE(counting);
  llmretry::testing::LoopbackProvider server;
  server.then(llmretry::testing::LoopbackProvider::stream({"Hel", "lo"}));
  server.then(llmretry::testing::LoopbackProvider::stream({"again"}));
  const llmretry::curl::Request request = large_request(server);
  const Held held = held_during(request, 2);  // the second after the first one's was freed
  REQUIRE(held.events.size() == 5);
  if (llmretry::curl::detail::frees_upload_buffer()) {  // otherwise libcurl's buffers are not these
    CHECK(held.made >= 2);                              // one a request at least: the body went through one
    for (const int live : held.events) CHECK(live == 0);
  }
  REQUIRE(server.request_count() == 2);
  CHECK(server.requests()[0].body == request.body);
  CHECK(server.requests()[1].body == request.body);
}

TEST_CASE("A body sent chunked keeps its upload buffer to the end: libcurl counts the framing as sent",
          "[curl][memory]") {
  REQUIRE(counting);
  llmretry::testing::LoopbackProvider server;
  server.then(llmretry::testing::LoopbackProvider::stream({"Hel", "lo"}));
  llmretry::curl::Request request = large_request(server);
  request.headers.emplace_back("transfer-encoding", "chunked");
  const Held held = held_during(request, 1);
  REQUIRE(held.events.size() == 3);
  if (llmretry::curl::detail::frees_upload_buffer()) {
    CHECK(held.made >= 1);
    for (const int live : held.events) CHECK(live == 1);
  }
  REQUIRE(server.request_count() == 1);
  CHECK(server.requests()[0].body == request.body);
}
