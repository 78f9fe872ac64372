#ifndef LLMRETRY_SIM_HPP
#define LLMRETRY_SIM_HPP

/// The virtual-time simulator: many clients, driven by the library's own RetryState, against a
/// rate-limited provider. Separate from <llmretry/llmretry.hpp>, which it does not need to be part of.

#include "sim/event_queue.hpp"
#include "sim/fleet.hpp"
#include "sim/hedging.hpp"
#include "sim/hosts.hpp"
#include "sim/pacing.hpp"
#include "sim/priorities.hpp"
#include "sim/provider.hpp"
#include "sim/random.hpp"
#include "sim/report.hpp"
#include "sim/scenarios.hpp"
#include "sim/simulation.hpp"
#include "sim/store.hpp"

#endif  // LLMRETRY_SIM_HPP
