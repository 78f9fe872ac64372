#ifndef LLMRETRY_TESTS_ASIO_HELPERS_HPP
#define LLMRETRY_TESTS_ASIO_HELPERS_HPP

// What the tests of asynchronous calls share: a completion handler that keeps what it received, and a test
// for the exception of a cancelled operation.

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <exception>
#include <memory>
#include <utility>

namespace llmretry_test {

/// What a completion handler with the signature void(std::exception_ptr, R) received.
template <class R>
struct Received {
  bool called = false;
  std::exception_ptr error;
  R answer{};

  /// Returns the handler that fills this in; it must outlive the operation.
  auto handler() {
    return [this](std::exception_ptr e, R a) {
      called = true;
      error = std::move(e);
      answer = std::move(a);
    };
  }
};

/// Returns true when `error` holds boost::system::system_error with boost::asio::error::operation_aborted.
inline bool is_cancelled(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const boost::system::system_error& e) {
    return e.code() == boost::asio::error::operation_aborted;
  } catch (...) {
    return false;
  }
}

/// Starts, on `io`, an attempt that never answers by itself: a timer of an hour that completes early, with
/// operation_aborted as `handler`'s exception (and `R{}`), when `handler`'s cancellation slot is emitted.
template <class R, class Handler>
void hang(boost::asio::io_context& io, Handler handler) {
  auto timer = std::make_shared<boost::asio::steady_timer>(io, std::chrono::hours{1});
  auto slot = boost::asio::get_associated_cancellation_slot(handler);
  if (slot.is_connected()) slot.assign([timer](boost::asio::cancellation_type) { timer->cancel(); });
  timer->async_wait([timer, handler = std::move(handler)](boost::system::error_code ended) mutable {
    std::move(handler)(std::make_exception_ptr(boost::system::system_error(ended)), R{});
  });
}

}  // namespace llmretry_test

#endif  // LLMRETRY_TESTS_ASIO_HELPERS_HPP
