#include <llmretry/result.hpp>

#include <llmretry/http/classify.hpp>

#include <optional>
#include <string>

#include "llmretry_catch.hpp"

using namespace llmretry;

namespace my_app {
// An application's own error type: a failure_of in its namespace makes it usable by call_with_retry.
struct ApiError {
  int http_status;
};
inline llmretry::Failure failure_of(const ApiError& error) { return llmretry::classify_status(error.http_status); }
template <class T>
struct Expected {  // a minimal expected-like type
  std::optional<T> value;
  ApiError err{0};
  bool has_value() const { return value.has_value(); }
  const ApiError& error() const { return err; }
};
}  // namespace my_app

TEST_CASE("Result holds a value or an Error", "[result]") {
  Result<std::string> ok = std::string("hello");
  CHECK(ok.has_value());
  CHECK(static_cast<bool>(ok));
  CHECK(*ok == "hello");
  CHECK(ok->size() == 5);
  CHECK(ok.value() == "hello");

  Result<std::string> failed = Error{classify_status(503), "HTTP 503"};
  CHECK_FALSE(failed.has_value());
  CHECK(failed.error().failure.kind == FailureKind::server_error);
  CHECK(failed.error().message == "HTTP 503");
  CHECK(failure_of(failed.error()).status == 503);
}

TEST_CASE("Result<void> is success or an Error", "[result]") {
  Result<void> ok;
  CHECK(ok.has_value());
  Result<void> failed = Error{classify_status(429), "slow down"};
  CHECK_FALSE(failed);
  CHECK(failed.error().failure.kind == FailureKind::rate_limited);
}

TEST_CASE("Result-like types are detected by has_value() and error()", "[result]") {
  STATIC_REQUIRE(is_result_like_v<Result<int>>);
  STATIC_REQUIRE(is_result_like_v<Result<void>>);
  STATIC_REQUIRE(is_result_like_v<my_app::Expected<int>>);
  STATIC_REQUIRE_FALSE(is_result_like_v<int>);
  STATIC_REQUIRE_FALSE(is_result_like_v<std::string>);
  STATIC_REQUIRE_FALSE(is_result_like_v<std::optional<int>>);  // no error(): not a failure channel
}

TEST_CASE("An application's own error type reaches its failure_of by argument-dependent lookup", "[result]") {
  my_app::Expected<int> failed{std::nullopt, my_app::ApiError{429}};
  CHECK(detail::failure_of_result(failed).kind == FailureKind::rate_limited);
}
