#ifndef LLMRETRY_LLMRETRY_HPP
#define LLMRETRY_LLMRETRY_HPP

/// Everything llmretry offers, in one include. The testing helpers are separate: <llmretry/testing.hpp>.

#include "backoff.hpp"
#include "classify.hpp"
#include "decision.hpp"
#include "errors.hpp"
#include "failure.hpp"
#include "headers.hpp"
#include "policy.hpp"
#include "random.hpp"
#include "result.hpp"
#include "retry.hpp"
#include "version.hpp"

#endif  // LLMRETRY_LLMRETRY_HPP
