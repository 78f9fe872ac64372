#include <llmretry/random.hpp>

#include <thread>

#include "llmretry_catch.hpp"

using llmretry::ThreadRng;

TEST_CASE("ThreadRng is a 64-bit UniformRandomBitGenerator", "[random]") {
  STATIC_REQUIRE(ThreadRng::min() == 0);
  STATIC_REQUIRE(ThreadRng::max() == ~std::uint64_t{0});
  ThreadRng rng;
  std::uint64_t high_bits = 0;  // a 32-bit engine widened to 64 bits would leave these zero
  for (int i = 0; i < 64; ++i) high_bits |= rng() >> 32;
  CHECK(high_bits == 0xFFFFFFFFu);
}

TEST_CASE("Each thread draws from its own engine", "[random]") {
  // Seeded alike, two threads draw the same sequence, and draws in one do not move the other's.
  ThreadRng::seed_this_thread(42);
  const std::uint64_t here_first = ThreadRng{}();
  std::uint64_t there_first = 0, there_second = 0;
  std::thread([&] {
    ThreadRng::seed_this_thread(42);
    there_first = ThreadRng{}();
    there_second = ThreadRng{}();
  }).join();
  CHECK(there_first == here_first);
  CHECK(ThreadRng{}() == there_second);
}

TEST_CASE("Unseeded threads draw different sequences", "[random]") {
  std::uint64_t first_there = 0, first_elsewhere = 0;
  std::thread([&] { first_there = ThreadRng{}(); }).join();
  std::thread([&] { first_elsewhere = ThreadRng{}(); }).join();
  CHECK(first_there != first_elsewhere);
}
