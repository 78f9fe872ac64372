// Includes the optional adapters a second time in another translation unit: a function defined in a
// header without `inline` is then defined twice and the link fails.
#include <llmretry/curl/curl.hpp>
#include <llmretry/json/error_fields.hpp>
#include <llmretry/json/usage.hpp>
#include <llmretry/loopback/provider.hpp>
#include <llmretry/loopback/rate_limit.hpp>

namespace llmretry_http_second_tu {
int touch() { return llmretry::json::error_fields("{}").empty() ? 1 : 0; }
}  // namespace llmretry_http_second_tu
