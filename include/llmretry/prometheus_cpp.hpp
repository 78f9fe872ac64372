#ifndef LLMRETRY_PROMETHEUS_CPP_HPP
#define LLMRETRY_PROMETHEUS_CPP_HPP

/// llmretry's metrics in an application's own prometheus::Registry (target llmretry::prometheus_cpp, with
/// prometheus-cpp): prometheus_cpp::Families. Namespace llmretry::prometheus_cpp.

#include "prometheus_cpp/families.hpp"

#endif  // LLMRETRY_PROMETHEUS_CPP_HPP
