#ifndef LLMRETRY_LLMRETRY_HPP
#define LLMRETRY_LLMRETRY_HPP

/// Everything llmretry offers, in one include. The testing helpers are separate: <llmretry/testing.hpp>;
/// so are the stores shared by processes, which throw: <llmretry/store/...>;
/// so are the adapters that need a dependency: <llmretry/curl/curl.hpp>, <llmretry/json/error_fields.hpp>,
/// <llmretry/json/canonical.hpp>, <llmretry/redis/...> and <llmretry/testing/loopback/provider.hpp>.

#include "attempt.hpp"
#include "backoff.hpp"
#include "classify.hpp"
#include "decision.hpp"
#include "errors.hpp"
#include "failure.hpp"
#include "guard.hpp"
#include "headers.hpp"
#include "idempotency.hpp"
#include "policy.hpp"
#include "providers.hpp"
#include "random.hpp"
#include "rate_limits.hpp"
#include "result.hpp"
#include "retry.hpp"
#include "sse.hpp"
#include "stream.hpp"
#include "version.hpp"

#endif  // LLMRETRY_LLMRETRY_HPP
