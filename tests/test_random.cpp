#include <llmretry/random.hpp>

#include <set>
#include <thread>

#include "llmretry_catch.hpp"

using llmretry::ThreadRng;

TEST_CASE("ThreadRng is a 64-bit UniformRandomBitGenerator", "[random]") {
  STATIC_REQUIRE(ThreadRng::min() == 0);
  STATIC_REQUIRE(ThreadRng::max() == ~std::uint64_t{0});
  ThreadRng rng;
  std::set<std::uint64_t> seen;
  for (int i = 0; i < 100; ++i) seen.insert(rng());
  CHECK(seen.size() == 100);
}

TEST_CASE("Each thread draws its own sequence", "[random]") {
  std::uint64_t first_here = ThreadRng{}();
  std::uint64_t first_there = 0;
  std::thread([&] { first_there = ThreadRng{}(); }).join();
  std::uint64_t first_elsewhere = 0;
  std::thread([&] { first_elsewhere = ThreadRng{}(); }).join();
  CHECK(first_here != first_there);
  CHECK(first_there != first_elsewhere);
}
