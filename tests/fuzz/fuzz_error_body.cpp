// A provider's JSON error body, read by llmretry::json and classified for every provider: any text, JSON or
// not, gives error fields and a failure without crashing, leaking or throwing (std::bad_alloc aside).
#include <llmretry/http/providers.hpp>
#include <llmretry/json/error_fields.hpp>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto fields = llmretry::json::error_fields(llmretry_fuzz::as_text(data, size));
  for (const auto provider : {llmretry::Provider::openai, llmretry::Provider::azure_openai,
                              llmretry::Provider::anthropic, llmretry::Provider::gemini}) {
    for (const int status : {400, 429, 500, 503, 529})
      (void)llmretry::classify_provider_error(provider, status, fields);
  }
  return 0;
}
