#ifndef LLMRETRY_JSON_HPP
#define LLMRETRY_JSON_HPP

/// What llmretry reads in JSON bodies with nlohmann_json (target llmretry::json): providers' error fields,
/// the usage an answer reports, the estimate of a request's cost, canonical JSON for fingerprints, and
/// routing policies. Namespace llmretry::json.

#include "json/canonical.hpp"
#include "json/error_fields.hpp"
#include "json/estimate.hpp"
#include "json/routing_policy.hpp"
#include "json/usage.hpp"

#endif  // LLMRETRY_JSON_HPP
