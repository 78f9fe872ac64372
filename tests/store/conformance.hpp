// The conformance suite of the stores: every implementation passes the same tests. A runner defines
// LLMRETRY_STORE_FIXTURES, the fixture types to run them against, then includes this file. A fixture has
//   std::unique_ptr<store::IdempotencyStore> idempotency(store::IdempotencyOptions);
//   std::unique_ptr<store::OperationsTable> operations(store::OperationsOptions);
//   std::unique_ptr<store::JobQueue> queue(store::JobQueueOptions);
//   void advance(std::chrono::milliseconds);  // lets that much time pass for the stores
//   std::chrono::system_clock::time_point now();  // the stores' time
// Timed tests use leases of a few hundred milliseconds, so that a real server's clock can run them.
#ifndef LLMRETRY_TESTS_STORE_CONFORMANCE_HPP
#define LLMRETRY_TESTS_STORE_CONFORMANCE_HPP

#include <llmretry/http/idempotency.hpp>
#include <llmretry/store/fingerprint.hpp>
#include <llmretry/store/idempotency_store.hpp>
#include <llmretry/store/job_queue.hpp>
#include <llmretry/store/operations.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "llmretry_catch.hpp"

namespace conformance {

using namespace std::chrono_literals;
namespace store = llmretry::store;
using llmretry::Cost;

// A lease, retention or timeout that the tests outlive. On Redis the time really passes (the fixture sleeps).
inline constexpr auto short_time = 1000ms;
inline constexpr auto past_it = 1500ms;  // more than short_time
// Waited after short_time / 2 and a write that starts short_time again: past the first one's end, with 450 ms
// to spare against a late wake-up before the second's (300 ms leases leaving 75 ms were not always enough on a
// loaded machine running the suite two tests at a time).
inline constexpr auto just_past_half = short_time / 2 + 50ms;

inline store::IdempotencyOptions short_idempotency() {
  store::IdempotencyOptions options;
  options.lease = short_time;
  options.retention = short_time;
  return options;
}

}  // namespace conformance

TEMPLATE_TEST_CASE("idempotency: the first claim runs, the others are told in flight or mismatch",
                   "[store][idempotency]", LLMRETRY_STORE_FIXTURES) {
  using namespace conformance;
  TestType fixture;
  auto keys = fixture.idempotency({});
  const std::string fp = store::fingerprint("{\"a\":1}");
  const auto first = keys->claim("k1", fp, "token-1");
  CHECK(first.status == store::ClaimStatus::claimed);
  CHECK(store::conflict_status(first.status) == 0);

  const auto second = keys->claim("k1", fp, "token-2");
  CHECK(second.status == store::ClaimStatus::in_flight);
  CHECK(store::conflict_status(second.status) == 409);
  CHECK(second.lease_left > 0ms);
  CHECK(second.lease_left <= store::IdempotencyOptions{}.lease);
  CHECK_FALSE(second.response);

  const auto other = keys->claim("k1", store::fingerprint("{\"a\":2}"), "token-2");
  CHECK(other.status == store::ClaimStatus::mismatch);
  CHECK(store::conflict_status(other.status) == 422);

  SECTION("the same token claims again (its first answer was lost)") {
    CHECK(keys->claim("k1", fp, "token-1").status == store::ClaimStatus::claimed);
  }
  SECTION("complete stores the response for every later claim") {
    const store::StoredResponse response{
        200, "{\"text\":\"hello\"}", {{"x-request-id", "req_1"}, {"retry-after-ms", "1:2"}, {"empty", ""}}};
    CHECK(keys->complete("k1", "token-1", response));
    const auto later = keys->claim("k1", fp, "token-3");
    CHECK(later.status == store::ClaimStatus::completed);
    REQUIRE(later.response);
    CHECK(*later.response == response);
    CHECK(keys->claim("k1", store::fingerprint("{\"a\":2}"), "token-3").status == store::ClaimStatus::mismatch);
    CHECK(keys->complete("k1", "token-1", response));  // repeated: still true, nothing changes
    CHECK_FALSE(keys->complete("k1", "token-2", store::StoredResponse{500, "other"}));
    CHECK(keys->claim("k1", fp, "token-4").response == response);
    CHECK_FALSE(keys->release("k1", "token-1"));  // a completed key is never released
    CHECK_FALSE(keys->renew("k1", "token-1"));
  }
  SECTION("release frees the key: a retry runs it again (a cut stream is released, not stored)") {
    CHECK_FALSE(keys->release("k1", "token-2"));
    CHECK(keys->release("k1", "token-1"));
    CHECK_FALSE(keys->release("k1", "token-1"));
    CHECK(keys->claim("k1", fp, "token-2").status == store::ClaimStatus::claimed);
    CHECK_FALSE(keys->complete("k1", "token-1", store::StoredResponse{200, "late"}));
  }
  SECTION("keys are independent") { CHECK(keys->claim("k2", fp, "token-2").status == store::ClaimStatus::claimed); }
}

TEMPLATE_TEST_CASE("idempotency: a claim is a lease; a completed key is forgotten after the retention",
                   "[store][idempotency]", LLMRETRY_STORE_FIXTURES) {
  using namespace conformance;
  TestType fixture;
  auto keys = fixture.idempotency(short_idempotency());
  const std::string fp = store::fingerprint("body");
  REQUIRE(keys->claim("k", fp, "dead-worker").status == store::ClaimStatus::claimed);

  SECTION("a holder that dies does not block the key") {
    fixture.advance(past_it);
    CHECK(keys->claim("k", fp, "next").status == store::ClaimStatus::claimed);
    CHECK_FALSE(keys->complete("k", "dead-worker", store::StoredResponse{200, "late"}));
    CHECK(keys->complete("k", "next", store::StoredResponse{200, "ok"}));
  }
  SECTION("renew starts the lease again") {
    fixture.advance(short_time / 2);
    CHECK(keys->renew("k", "dead-worker"));
    fixture.advance(just_past_half);
    CHECK(keys->claim("k", fp, "next").status == store::ClaimStatus::in_flight);
    CHECK_FALSE(keys->renew("k", "next"));
  }
  SECTION("retention") {
    REQUIRE(keys->complete("k", "dead-worker", store::StoredResponse{200, "ok"}));
    CHECK(keys->claim("k", store::fingerprint("another body"), "next").status == store::ClaimStatus::mismatch);
    fixture.advance(past_it);
    CHECK(keys->claim("k", store::fingerprint("another body"), "next").status == store::ClaimStatus::claimed);
  }
}

TEMPLATE_TEST_CASE("idempotency: keys of 1 to 255 bytes; concurrent claims, one winner", "[store][idempotency]",
                   LLMRETRY_STORE_FIXTURES) {
  using namespace conformance;
  TestType fixture;
  auto keys = fixture.idempotency({});
  CHECK(keys->claim(std::string(255, 'k'), "fp", "t").status == store::ClaimStatus::claimed);
  CHECK_THROWS_AS(keys->claim(std::string(256, 'k'), "fp", "t"), std::invalid_argument);
  CHECK_THROWS_AS(keys->claim("", "fp", "t"), std::invalid_argument);
  CHECK_THROWS_AS(keys->claim("k", "fp", ""), std::invalid_argument);

  std::atomic<int> claimed{0}, in_flight{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i)
    threads.emplace_back([&, i] {
      const auto status = keys->claim("race", "fp", std::string("token-").append(std::to_string(i))).status;
      ++(status == store::ClaimStatus::claimed ? claimed : in_flight);
    });
  for (auto& thread : threads) thread.join();
  CHECK(claimed == 1);
  CHECK(in_flight == 15);
}

TEMPLATE_TEST_CASE("operations: one record per operation, written before sending and on completion",
                   "[store][operations]", LLMRETRY_STORE_FIXTURES) {
  using namespace conformance;
  TestType fixture;
  auto table = fixture.operations({});
  const auto before = fixture.now() - 1s;
  CHECK_FALSE(table->find("op"));

  const auto begun = table->begin("op", "anthropic", "claude-sonnet");
  CHECK(begun.started);
  CHECK(begun.operation.id == "op");
  CHECK(begun.operation.status == store::OperationStatus::in_flight);
  CHECK(begun.operation.provider == "anthropic");
  CHECK(begun.operation.model == "claude-sonnet");
  CHECK(begun.operation.provider_request_id.empty());
  CHECK(begun.operation.usage == Cost{0, 0, 0});
  CHECK(begun.operation.created_at >= before);
  CHECK(begun.operation.created_at <= fixture.now() + 1s);
  CHECK(begun.operation.updated_at == begun.operation.created_at);

  SECTION("an operation in flight is not begun again, at any provider (it may have run)") {
    const auto again = table->begin("op", "openai", "gpt");
    CHECK_FALSE(again.started);
    CHECK(again.operation.status == store::OperationStatus::in_flight);
    CHECK(again.operation.provider == "anthropic");
  }
  SECTION("complete records where and for how much; a resumed batch skips it") {
    CHECK(table->complete("op", "req_abc123", Cost{1, 4180, 612}));
    const auto found = table->find("op");
    REQUIRE(found);
    CHECK(found->status == store::OperationStatus::completed);
    CHECK(found->provider_request_id == "req_abc123");
    CHECK(found->usage == Cost{1, 4180, 612});
    CHECK(found->created_at == begun.operation.created_at);
    CHECK(found->updated_at >= found->created_at);
    CHECK(table->complete("op", "req_abc123", Cost{1, 4180, 612}));  // repeated
    CHECK_FALSE(table->complete("op", "req_other", Cost{1, 1, 1}));
    CHECK_FALSE(table->fail("op"));
    const auto again = table->begin("op", "openai", "gpt");
    CHECK_FALSE(again.started);
    CHECK(again.operation.status == store::OperationStatus::completed);
    CHECK(again.operation.provider_request_id == "req_abc123");
  }
  SECTION("a failed operation (not sent) begins again, elsewhere") {
    CHECK(table->fail("op"));
    CHECK(table->fail("op"));
    CHECK(table->find("op")->status == store::OperationStatus::failed);
    CHECK_FALSE(table->complete("op", "req", {}));
    const auto again = table->begin("op", "openai", "gpt");
    CHECK(again.started);
    CHECK(again.operation.status == store::OperationStatus::in_flight);
    CHECK(again.operation.provider == "openai");
    CHECK(again.operation.created_at == begun.operation.created_at);
  }
  SECTION("unknown operations") {
    CHECK_FALSE(table->complete("unknown", "req", {}));
    CHECK_FALSE(table->fail("unknown"));
    CHECK_FALSE(table->find("unknown"));
  }
}

TEMPLATE_TEST_CASE("operations: records are forgotten after the retention", "[store][operations]",
                   LLMRETRY_STORE_FIXTURES) {
  using namespace conformance;
  TestType fixture;
  store::OperationsOptions options;
  options.retention = short_time;
  auto table = fixture.operations(options);
  REQUIRE(table->begin("op", "p", "m").started);
  fixture.advance(short_time / 2);
  REQUIRE(table->complete("op", "req", Cost{1, 1, 2}));  // a write starts the retention again
  fixture.advance(just_past_half);
  CHECK(table->find("op"));
  fixture.advance(past_it);
  CHECK_FALSE(table->find("op"));
}

TEMPLATE_TEST_CASE("queue: enqueue, take, ack; by priority, oldest first", "[store][queue]", LLMRETRY_STORE_FIXTURES) {
  using namespace conformance;
  TestType fixture;
  auto queue = fixture.queue({});
  CHECK(queue->enqueue({"a", "payload a", 0, 0ms}));
  CHECK_FALSE(queue->enqueue({"a", "again", 9, 0ms}));
  CHECK(queue->enqueue({"b", "payload b", 5, 0ms}));
  CHECK(queue->enqueue({"c", "payload c", 0, 0ms}));
  CHECK(queue->enqueue({"d", "payload d", 5, 0ms}));
  CHECK(queue->enqueue({"e", "payload e", -3, 0ms}));
  CHECK(queue->counts().ready == 5);

  std::vector<std::string> order;
  while (auto job = queue->take()) {
    CHECK(job->attempts == 1);
    CHECK(job->payload == "payload " + job->id);
    CHECK_FALSE(job->token.empty());
    order.push_back(job->id);
    if (job->id == "b") CHECK(job->priority == 5);
  }
  CHECK(order == std::vector<std::string>{"b", "d", "a", "c", "e"});
  const auto counts = queue->counts();
  CHECK(counts.ready == 0);
  CHECK(counts.taken == 5);
  CHECK_THROWS_AS(queue->enqueue({"", "x", 0, 0ms}), std::invalid_argument);
  CHECK_THROWS_AS(queue->enqueue({std::string(256, 'x'), "x", 0, 0ms}), std::invalid_argument);
  CHECK_THROWS_AS(fixture.queue(store::JobQueueOptions{1s, 0}), std::invalid_argument);
}

TEMPLATE_TEST_CASE("queue: ack, retry_later, bury and extend need the holder's token", "[store][queue]",
                   LLMRETRY_STORE_FIXTURES) {
  using namespace conformance;
  TestType fixture;
  auto queue = fixture.queue(store::JobQueueOptions{short_time, 2});
  REQUIRE(queue->enqueue({"job", "p", 0, 0ms}));
  auto job = queue->take();
  REQUIRE(job);
  CHECK_FALSE(queue->take());
  CHECK_FALSE(queue->ack("job", "not the token"));
  CHECK_FALSE(queue->ack("other", job->token));

  SECTION("ack removes it") {
    CHECK(queue->ack("job", job->token));
    CHECK_FALSE(queue->ack("job", job->token));
    const auto counts = queue->counts();
    CHECK(counts.ready + counts.delayed + counts.taken + counts.dead == 0);
    CHECK(queue->enqueue({"job", "p", 0, 0ms}));  // a done job's id is free again
  }
  SECTION("a failed attempt waits in delayed until its not_before, then the last one goes to the dead letter") {
    CHECK(queue->retry_later("job", job->token, short_time));
    CHECK_FALSE(queue->ack("job", job->token));
    CHECK(queue->counts().delayed == 1);
    CHECK(queue->counts().ready == 0);
    CHECK_FALSE(queue->take());
    fixture.advance(past_it);
    job = queue->take();
    REQUIRE(job);
    CHECK(job->attempts == 2);
    CHECK(queue->retry_later("job", job->token, 0ms));
    CHECK_FALSE(queue->take());  // max_attempts 2 used up
    const auto counts = queue->counts();
    CHECK(counts.dead == 1);
    CHECK(counts.ready + counts.delayed + counts.taken == 0);
    const auto dead = queue->dead_letters(10);
    REQUIRE(dead.size() == 1);
    CHECK(dead[0].id == "job");
    CHECK(dead[0].payload == "p");
    CHECK(dead[0].attempts == 2);
    CHECK(dead[0].token.empty());
    CHECK(queue->dead_letters(0).empty());
    CHECK_FALSE(queue->enqueue({"job", "p", 0, 0ms}));
  }
  SECTION("bury sends it to the dead letter at once") {
    CHECK(queue->bury("job", job->token));
    CHECK_FALSE(queue->bury("job", job->token));
    CHECK(queue->counts().dead == 1);
    CHECK(queue->dead_letters(1).at(0).attempts == 1);
  }
  SECTION("a worker that dies: the job comes back after the visibility timeout, its token is void") {
    fixture.advance(past_it);
    const auto again = queue->take();
    REQUIRE(again);
    CHECK(again->id == "job");
    CHECK(again->attempts == 2);
    CHECK(again->token != job->token);
    CHECK_FALSE(queue->ack("job", job->token));
    CHECK(queue->ack("job", again->token));
  }
  SECTION("reclaim: every taken job is ready again at once, its token void; delayed jobs stay delayed") {
    REQUIRE(queue->enqueue({"later", "p", 0, short_time}));
    REQUIRE(queue->enqueue({"second", "p", 0, 0ms}));
    const auto second = queue->take();
    REQUIRE(second);
    CHECK(queue->reclaim() == 2);
    CHECK(queue->reclaim() == 0);
    const auto counts = queue->counts();
    CHECK(counts.ready == 2);
    CHECK(counts.delayed == 1);
    CHECK(counts.taken == 0);
    CHECK_FALSE(queue->ack("job", job->token));
    CHECK_FALSE(queue->ack("second", second->token));
    std::set<std::string> taken;
    for (auto again = queue->take(); again; again = queue->take()) {
      CHECK(again->attempts == 2);
      CHECK(queue->ack(again->id, again->token));
      taken.insert(again->id);
    }
    CHECK(taken == std::set<std::string>{"job", "second"});
  }
  SECTION("extend keeps it") {
    fixture.advance(short_time / 2);
    CHECK(queue->extend("job", job->token));
    fixture.advance(just_past_half);
    CHECK_FALSE(queue->take());
    CHECK(queue->ack("job", job->token));
  }
}

TEMPLATE_TEST_CASE("queue: finish removes a job and keeps its result; its id is not enqueued again", "[store][queue]",
                   LLMRETRY_STORE_FIXTURES) {
  using namespace conformance;
  TestType fixture;
  auto queue = fixture.queue(store::JobQueueOptions{short_time, 3});
  REQUIRE(queue->enqueue({"a", "p", 0, 0ms}));
  REQUIRE(queue->enqueue({"b", "p", 0, 0ms}));
  const auto a = queue->take();
  REQUIRE(a);
  CHECK_FALSE(queue->finish("a", "not the token", "answer a", false));
  CHECK_FALSE(queue->result("a"));
  CHECK(queue->finish("a", a->token, "answer a", false));
  CHECK_FALSE(queue->finish("a", a->token, "again", false));  // no longer held
  CHECK_FALSE(queue->ack("a", a->token));
  const auto kept = queue->result("a");
  REQUIRE(kept);
  CHECK(kept->id == "a");
  CHECK(kept->value == "answer a");
  CHECK_FALSE(kept->failed);
  CHECK_FALSE(queue->enqueue({"a", "p", 0, 0ms}));  // done: never enqueued again while its result is kept
  auto counts = queue->counts();
  CHECK(counts.done == 1);
  CHECK(counts.failed == 0);
  CHECK(counts.ready == 1);
  CHECK(counts.taken == 0);

  SECTION("a failed result, and the results page after page, in the order kept, each once") {
    const auto b = queue->take();
    REQUIRE(b);
    CHECK(queue->finish("b", b->token, "", true));
    for (int i = 0; i < 5; ++i) {
      const std::string id = std::string("n").append(std::to_string(i));  // not "n" + ...: GCC 12 -O3 -Wrestrict
      REQUIRE(queue->enqueue({id, "p", 0, 0ms}));
      const auto job = queue->take();
      REQUIRE(job);
      REQUIRE(queue->finish(id, job->token, "value " + id, false));
    }
    counts = queue->counts();
    CHECK(counts.done == 6);
    CHECK(counts.failed == 1);
    CHECK(queue->result("b")->failed);
    CHECK(queue->result("b")->value.empty());
    std::vector<std::string> order;
    std::string cursor;
    int pages = 0;
    do {
      const auto page = queue->results(cursor, 3);
      CHECK(page.results.size() <= 3);
      for (const auto& result : page.results) order.push_back(result.id);
      cursor = page.cursor;
      ++pages;
    } while (!cursor.empty());
    CHECK(pages == 3);
    CHECK(order == std::vector<std::string>{"a", "b", "n0", "n1", "n2", "n3", "n4"});
    CHECK(queue->results("", 100).results.at(2).value == "value n0");
    CHECK(queue->results("", 100).cursor.empty());
  }
  SECTION("a job taken again after its visibility timeout: only the new holder finishes it") {
    const auto b = queue->take();
    REQUIRE(b);
    fixture.advance(past_it);
    const auto again = queue->take();
    REQUIRE(again);
    CHECK_FALSE(queue->finish("b", b->token, "late", false));
    CHECK(queue->finish("b", again->token, "on time", false));
    CHECK(queue->result("b")->value == "on time");
    CHECK(queue->counts().done == 2);
  }
  SECTION("results are forgotten together after the retention; then the id may be enqueued again") {
    const auto b = queue->take();  // out of the way: on Redis, the queues of one fixture are one queue
    REQUIRE(b);
    REQUIRE(queue->ack("b", b->token));
    auto short_lived = fixture.queue(store::JobQueueOptions{short_time, 3, short_time});
    REQUIRE(short_lived->enqueue({"x", "p", 0, 0ms}));
    const auto x = short_lived->take();
    REQUIRE(x);
    REQUIRE(short_lived->finish("x", x->token, "v", false));
    fixture.advance(past_it);
    CHECK_FALSE(short_lived->result("x"));
    CHECK(short_lived->counts().done == 0);
    CHECK(short_lived->enqueue({"x", "p", 0, 0ms}));
  }
  CHECK_THROWS_AS(fixture.queue(store::JobQueueOptions{1s, 1, 0ms}), std::invalid_argument);
}

TEMPLATE_TEST_CASE("queue: reclaim counts more jobs than one Redis script reclaims (1,000)", "[store][queue]",
                   LLMRETRY_STORE_FIXTURES) {
  using namespace conformance;
  TestType fixture;
  // A visibility timeout that the 2,002 round trips below cannot outlast, however slow the machine.
  auto queue = fixture.queue(store::JobQueueOptions{10min, 2});
  for (int i = 0; i < 1001; ++i) REQUIRE(queue->enqueue({std::string("many").append(std::to_string(i)), "p", 0, 0ms}));
  for (int i = 0; i < 1001; ++i) REQUIRE(queue->take());
  CHECK(queue->reclaim() == 1001);
  CHECK(queue->counts().ready == 1001);
  CHECK(queue->counts().taken == 0);
}

TEMPLATE_TEST_CASE("queue: delayed jobs; concurrent takers get each job once", "[store][queue]",
                   LLMRETRY_STORE_FIXTURES) {
  using namespace conformance;
  TestType fixture;
  auto queue = fixture.queue({});
  REQUIRE(queue->enqueue({"later", "p", 9, short_time}));
  REQUIRE(queue->enqueue({"now", "p", 0, 0ms}));
  CHECK(queue->counts().delayed == 1);
  auto job = queue->take();
  REQUIRE(job);
  CHECK(job->id == "now");
  CHECK_FALSE(queue->take());
  fixture.advance(past_it);
  job = queue->take();
  REQUIRE(job);
  CHECK(job->id == "later");

  constexpr int jobs = 200;
  for (int i = 0; i < jobs; ++i) REQUIRE(queue->enqueue({std::string("j").append(std::to_string(i)), "p", i % 3, 0ms}));
  std::mutex mutex;
  std::multiset<std::string> taken;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      while (auto next = queue->take()) {
        const bool acked = queue->ack(next->id, next->token);
        const std::lock_guard<std::mutex> lock(mutex);
        CHECK(acked);
        taken.insert(next->id);
      }
    });
  for (auto& thread : threads) thread.join();
  CHECK(taken.size() == jobs);
  CHECK(std::set<std::string>(taken.begin(), taken.end()).size() == jobs);
}

#endif  // LLMRETRY_TESTS_STORE_CONFORMANCE_HPP
