#ifndef LLMRETRY_METRICS_HPP
#define LLMRETRY_METRICS_HPP

/// Metrics of the calls: the events an Observer receives, the Registry that counts them and writes them in
/// the Prometheus text format, the guard observe() that reports the calls of call_with_retry, and the
/// events' OpenTelemetry attributes.
#include "metrics/observe.hpp"
#include "metrics/observer.hpp"
#include "metrics/otel.hpp"
#include "metrics/prometheus.hpp"
#include "metrics/registry.hpp"

#endif  // LLMRETRY_METRICS_HPP
