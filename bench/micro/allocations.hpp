// Counts the calls of the global operator new in the benchmark program (defined in main.cpp).
#ifndef LLMRETRY_BENCH_ALLOCATIONS_HPP
#define LLMRETRY_BENCH_ALLOCATIONS_HPP

#include <cstdint>

namespace llmretry_bench {

/// Returns how many times the global operator new has run in this program.
std::uint64_t allocations() noexcept;

}  // namespace llmretry_bench

#endif  // LLMRETRY_BENCH_ALLOCATIONS_HPP
