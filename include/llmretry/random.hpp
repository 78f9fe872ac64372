#ifndef LLMRETRY_RANDOM_HPP
#define LLMRETRY_RANDOM_HPP

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <thread>

#include "version.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// A UniformRandomBitGenerator over one engine per thread, seeded on its first draw in that thread from
/// std::random_device mixed with the time, the thread and an address, so that no two processes or threads
/// share a sequence. Holds no state itself: copies all draw from the calling thread's engine, and a call
/// that never draws never seeds anything.
class ThreadRng {
 public:
  using result_type = std::uint64_t;
  [[nodiscard]] static constexpr result_type min() noexcept { return 0; }
  [[nodiscard]] static constexpr result_type max() noexcept { return std::numeric_limits<result_type>::max(); }

  /// Returns the next 64 random bits of this thread's engine.
  result_type operator()() { return engine()(); }

  /// Reseeds the calling thread's engine with `seed`, so that its draws from now on repeat from run to
  /// run (a test, a replay); other threads are unaffected.
  static void seed_this_thread(std::uint64_t seed) { engine().seed(seed); }

 private:
  static std::mt19937_64& engine() {
    thread_local std::mt19937_64 instance = seeded();
    return instance;
  }
  static std::mt19937_64 seeded() {
    std::random_device device;
    const auto time = static_cast<std::uint64_t>(std::chrono::high_resolution_clock::now().time_since_epoch().count());
    const auto thread = static_cast<std::uint64_t>(std::hash<std::thread::id>{}(std::this_thread::get_id()));
    const int marker = 0;
    const auto address = static_cast<std::uint64_t>(std::hash<const int*>{}(&marker));
    std::seed_seq seq{device(),
                      device(),
                      device(),
                      device(),
                      static_cast<unsigned>(time),
                      static_cast<unsigned>(time >> 32),
                      static_cast<unsigned>(thread),
                      static_cast<unsigned>(address),
                      static_cast<unsigned>(address >> 32)};
    return std::mt19937_64{seq};
  }
};

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_RANDOM_HPP
