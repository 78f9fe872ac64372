#include <llmretry/sim/event_queue.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "llmretry_catch.hpp"

using llmretry::sim::EventQueue;
using llmretry::sim::Time;

TEST_CASE("EventQueue pops events in time order, then by rank, then in push order") {
  EventQueue<std::string> queue;
  CHECK(queue.empty());
  queue.push(Time{30}, 0, "c");
  queue.push(Time{10}, 5, "b-rank5");
  queue.push(Time{10}, 1, "a-rank1");
  queue.push(Time{10}, 5, "b-rank5-later");
  queue.push(Time{0}, 9, "first");
  CHECK(queue.size() == 5);
  std::vector<std::string> order;
  std::vector<Time> times;
  while (!queue.empty()) {
    auto event = queue.pop();
    order.push_back(event.payload);
    times.push_back(event.at);
    CHECK(queue.now() == event.at);
  }
  CHECK(order == std::vector<std::string>{"first", "a-rank1", "b-rank5", "b-rank5-later", "c"});
  CHECK(times == std::vector<Time>{Time{0}, Time{10}, Time{10}, Time{10}, Time{30}});
}

TEST_CASE("EventQueue accepts events at the current instant and refuses the past") {
  EventQueue<int> queue;
  queue.push(Time{100}, 0, 1);
  CHECK(queue.pop().payload == 1);
  SECTION("now is allowed") {
    queue.push(Time{100}, 0, 2);
    CHECK(queue.pop().at == Time{100});
  }
  SECTION("before now throws") { CHECK_THROWS_AS(queue.push(Time{99}, 0, 3), std::invalid_argument); }
}

TEST_CASE("EventQueue keeps a total order over many interleaved pushes") {
  EventQueue<int> queue;
  for (int i = 0; i < 1000; ++i) queue.push(Time{(i * 7919) % 101}, static_cast<std::uint64_t>(i % 3), i);
  Time last{0};
  std::uint64_t last_rank = 0;
  int last_payload = -1;
  while (!queue.empty()) {
    const auto event = queue.pop();
    const bool same_instant = event.at == last;
    CHECK(event.at >= last);
    if (same_instant) CHECK(event.rank >= last_rank);
    if (same_instant && event.rank == last_rank) CHECK(event.payload > last_payload);
    last = event.at;
    last_rank = event.rank;
    last_payload = event.payload;
  }
}
