// The success path of async_call_with_retry allocates nothing once Asio's recycling allocator has memory to
// reuse: every operator new in this program is counted.
#include <llmretry/asio.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <exception>

#include "counting_new.hpp"
#include "llmretry_catch.hpp"

TEST_CASE("A first attempt that succeeds allocates nothing once the thread's memory is warm", "[no_alloc][asio]") {
  boost::asio::io_context io;
  const llmretry::RetryPolicy policy;
  // An attempt that answers through the executor, as an asynchronous operation does.
  const auto attempt = [&io](const llmretry::Attempt& /*attempt*/, auto handler) {
    boost::asio::post(io, [handler = std::move(handler)]() mutable { std::move(handler)(nullptr, 7); });
  };
  int answer = 0;
  const auto call = [&] {
    llmretry::asio::async_call_with_retry<int>(
        io.get_executor(), attempt, policy,
        [&answer](std::exception_ptr error, int value) { answer = error ? -1 : value; });
    io.restart();
    io.run();
  };
  call();  // the first call fills the recycling allocator's cache (and the io_context's own)
  REQUIRE(answer == 7);
  CHECK(allocations_during(call) == 0);
  CHECK(answer == 7);
}
