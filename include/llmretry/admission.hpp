#ifndef LLMRETRY_ADMISSION_HPP
#define LLMRETRY_ADMISSION_HPP

/// Pacing before each attempt, so that calls do not draw 429s in the first place: limits and costs, the
/// rate limiter, the concurrency limit, token estimates, and the deployment that groups them. For many
/// calls at once: the retry budget they share, the circuit breaker, and the pressure signal.
#include "admission/circuit_breaker.hpp"
#include "admission/concurrency.hpp"
#include "admission/deployment.hpp"
#include "admission/hedging.hpp"
#include "admission/limits.hpp"
#include "admission/pressure.hpp"
#include "admission/priority.hpp"
#include "admission/rate_limiter.hpp"
#include "admission/retry_budget.hpp"
#include "admission/settlement.hpp"
#include "admission/shared_pacing.hpp"
#include "admission/tokens.hpp"

#endif  // LLMRETRY_ADMISSION_HPP
