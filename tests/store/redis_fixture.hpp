// One redis-server for the whole runner, started on first use; each fixture gets its own key prefix.
#ifndef LLMRETRY_TESTS_STORE_REDIS_FIXTURE_HPP
#define LLMRETRY_TESTS_STORE_REDIS_FIXTURE_HPP

#include <llmretry/redis/connection.hpp>
#include <llmretry/redis/testing_server.hpp>

#include <atomic>
#include <string>

#include <unistd.h>

namespace redis_fixture {

/// The runner's server, started on first call.
inline llmretry::testing::RedisServer& server() {
  static llmretry::testing::RedisServer instance;
  return instance;
}

/// Options that reach server() with a prefix no other fixture of any process uses.
inline llmretry::redis::Options unique_options() {
  static std::atomic<int> next{0};
  return server().connection_options("test:" + std::to_string(::getpid()) + ":" + std::to_string(next++) + ":");
}

}  // namespace redis_fixture

#endif  // LLMRETRY_TESTS_STORE_REDIS_FIXTURE_HPP
