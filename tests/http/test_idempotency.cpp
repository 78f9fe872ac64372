#include <llmretry/http/idempotency.hpp>

#include <random>
#include <set>
#include <string>

#include <llmretry_catch.hpp>

namespace {
bool is_uuid_v4(const std::string& key) {
  if (key.size() != 36) return false;
  for (std::size_t i = 0; i < key.size(); ++i) {
    const char c = key[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-') return false;
    } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  return key[14] == '4' && (key[19] == '8' || key[19] == '9' || key[19] == 'a' || key[19] == 'b');
}
}  // namespace

TEST_CASE("uuid_v4 is a version 4, variant 10 UUID drawn from the generator") {
  std::mt19937_64 a(42), b(42);
  const auto key = llmretry::uuid_v4(a);
  CHECK(is_uuid_v4(key));
  CHECK(llmretry::uuid_v4(b) == key);  // all from the generator: reproducible with a seeded one
  CHECK(llmretry::uuid_v4(a) != key);
}

TEST_CASE("new_idempotency_key gives a new UUID v4 every time") {
  std::set<std::string> keys;
  for (int i = 0; i < 1000; ++i) {
    const auto key = llmretry::new_idempotency_key();
    REQUIRE(is_uuid_v4(key));
    keys.insert(key);
  }
  CHECK(keys.size() == 1000);
}
