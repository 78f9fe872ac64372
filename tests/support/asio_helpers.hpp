#ifndef LLMRETRY_TESTS_ASIO_HELPERS_HPP
#define LLMRETRY_TESTS_ASIO_HELPERS_HPP

// What the tests of asynchronous calls share: a completion handler that keeps what it received, and a test
// for the exception of a cancelled operation.

#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>

#include <exception>
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

}  // namespace llmretry_test

#endif  // LLMRETRY_TESTS_ASIO_HELPERS_HPP
