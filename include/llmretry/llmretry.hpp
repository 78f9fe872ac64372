#ifndef LLMRETRY_LLMRETRY_HPP
#define LLMRETRY_LLMRETRY_HPP

/// Everything llmretry offers, in one include. The testing helpers are separate: <llmretry/testing.hpp>;
/// so are the stores shared by processes, which throw: <llmretry/store.hpp>;
/// so is what counts and exports metrics (metrics::Registry, the Prometheus text, the OpenTelemetry
/// attributes): <llmretry/metrics.hpp>; the events and the observe() guard are here;
/// so are the adapters that need a dependency: <llmretry/curl/curl.hpp>, <llmretry/json.hpp>,
/// <llmretry/redis.hpp> and <llmretry/loopback.hpp>.

#include "admission.hpp"
#include "attempt.hpp"
#include "backoff.hpp"
#include "clock.hpp"
#include "decision.hpp"
#include "engine.hpp"
#include "errors.hpp"
#include "failure.hpp"
#include "fallback.hpp"
#include "guard.hpp"
#include "http.hpp"
#include "metrics/observe.hpp"
#include "policy.hpp"
#include "random.hpp"
#include "result.hpp"
#include "retry.hpp"
#include "version.hpp"
#include "vocabulary.hpp"

#endif  // LLMRETRY_LLMRETRY_HPP
