#ifndef LLMRETRY_HTTP_CLASSIFY_HPP
#define LLMRETRY_HTTP_CLASSIFY_HPP

#include <chrono>
#include <string_view>

#include "../failure.hpp"
#include "../version.hpp"
#include "headers.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// Returns classify_status(status, error_code) completed from the response headers: the wait the
/// provider asked for (see requested_wait, relative to `now`) and its explicit `x-should-retry`.
/// Malformed headers are ignored; never throws.
template <class Headers>
[[nodiscard]] Failure classify_response(int status, const Headers& headers, std::chrono::system_clock::time_point now,
                                        std::string_view error_code = {}) {
  Failure failure = classify_status(status, error_code);
  failure.provider_wait = requested_wait(headers, now);
  failure.should_retry = should_retry(headers);
  return failure;
}

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_HTTP_CLASSIFY_HPP
