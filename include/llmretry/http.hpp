#ifndef LLMRETRY_HTTP_HPP
#define LLMRETRY_HTTP_HPP

/// What an HTTP answer means to a retry: the failure a response (status and headers) is, the Retry-After
/// and rate-limit headers, each provider's error bodies, server-sent events and streams that break
/// mid-way, idempotency keys, and URLs against a base. Part of the core target; <llmretry/llmretry.hpp>
/// includes it.

#include "http/base_url.hpp"
#include "http/classify.hpp"
#include "http/headers.hpp"
#include "http/idempotency.hpp"
#include "http/providers.hpp"
#include "http/rate_limits.hpp"
#include "http/sse.hpp"
#include "http/stream.hpp"

#endif  // LLMRETRY_HTTP_HPP
