// SimulatedProvider's script language, which tests and examples read from files and command lines: any
// text either parses to a step within the documented bounds or throws std::invalid_argument, nothing else.
#include <stdexcept>

#include <llmretry/testing/simulated_provider.hpp>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto step = llmretry::testing::parse_script_item(llmretry_fuzz::as_text(data, size));
    llmretry_fuzz::require(step.repeat >= 1 && step.repeat <= 1'000'000);
    if (step.failure) {
      llmretry_fuzz::require(!step.failure->provider_wait || step.failure->provider_wait->count() >= 0);
      llmretry_fuzz::require(!llmretry::testing::SimulatedProvider::message(*step.failure).empty());
    }
  } catch (const std::invalid_argument&) {}
  return 0;
}
