#ifndef LLMRETRY_TESTING_HPP
#define LLMRETRY_TESTING_HPP

/// The helpers for tests of code that uses llmretry: a scripted provider, a sleep that records, and a
/// clock that moves only when told to.

#include "testing/fake_sleep.hpp"
#include "testing/manual_clock.hpp"
#include "testing/simulated_provider.hpp"

#endif  // LLMRETRY_TESTING_HPP
