#ifndef LLMRETRY_ASIO_HPP
#define LLMRETRY_ASIO_HPP

/// Calling asynchronously on Boost.Asio (target llmretry::asio): asio::async_call_with_retry, the timer-based
/// driver of the step engine, and asio::async_call_with_fallback along a FallbackChain. Namespace llmretry::asio.

#include "asio/call.hpp"
#include "asio/fallback.hpp"

#endif  // LLMRETRY_ASIO_HPP
