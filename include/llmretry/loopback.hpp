#ifndef LLMRETRY_LOOPBACK_HPP
#define LLMRETRY_LOOPBACK_HPP

/// The loopback provider (target llmretry::loopback, cpp-httplib): a scriptable OpenAI-style HTTP server
/// on 127.0.0.1 for tests, examples and benchmarks, and its rate-limited mode. Its names are test helpers,
/// in llmretry::testing like the others.

#include "loopback/provider.hpp"
#include "loopback/rate_limit.hpp"

#endif  // LLMRETRY_LOOPBACK_HPP
