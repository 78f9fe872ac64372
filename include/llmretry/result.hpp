#ifndef LLMRETRY_RESULT_HPP
#define LLMRETRY_RESULT_HPP

#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include <cstdlib>
#include "failure.hpp"
#include "version.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// The error side of a Result: the classified failure and a message for people.
struct Error {
  Failure failure;
  std::string message;
};

/// Returns the failure an Error carries. call_with_retry finds `failure_of(result.error())` by argument
/// dependent lookup, so an error type of your own works once it has a `failure_of` in its namespace (the
/// overload for exceptions is in errors.hpp).
inline const Failure& failure_of(const Error& error) noexcept { return error.failure; }
/// Returns the failure itself, so that `std::expected<T, Failure>` (or any expected-like type whose error
/// is a Failure) works with call_with_retry as it is.
inline const Failure& failure_of(const Failure& failure) noexcept { return failure; }

/// A value or an Error, for code that reports failures without exceptions. Any type with `has_value()`
/// and `error()` is treated the same way by call_with_retry (std::expected, tl::expected...).
template <class T>
class Result {
 public:
  /// A successful result holding `value`.
  Result(T value) : state_(std::in_place_index<0>, std::move(value)) {}  // NOLINT(google-explicit-constructor)
  /// A failed result holding `error`.
  Result(Error error) : state_(std::in_place_index<1>, std::move(error)) {}  // NOLINT(google-explicit-constructor)

  /// Returns true when the result holds a value.
  bool has_value() const noexcept { return state_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  /// Returns the value. Requires has_value(); otherwise aborts (a programming error, like
  /// dereferencing an empty optional, but caught).
  T& value() & { return check(), std::get<0>(state_); }
  const T& value() const& { return check(), std::get<0>(state_); }
  T&& value() && { return check(), std::get<0>(std::move(state_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  /// Returns the error. Requires !has_value(); otherwise aborts.
  const Error& error() const& {
    if (has_value()) std::abort();
    return std::get<1>(state_);
  }

 private:
  void check() const {
    if (!has_value()) std::abort();
  }
  std::variant<T, Error> state_;
};

/// A result with no value: success or an Error.
template <>
class Result<void> {
 public:
  /// A successful result.
  Result() noexcept = default;
  /// A failed result holding `error`.
  Result(Error error) : error_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  /// Returns true on success.
  bool has_value() const noexcept { return !error_.has_value(); }
  explicit operator bool() const noexcept { return has_value(); }
  /// Returns the error. Requires !has_value(); otherwise aborts.
  const Error& error() const& {
    if (has_value()) std::abort();
    return *error_;
  }

 private:
  std::optional<Error> error_;
};

namespace detail {

template <class R, class = void>
struct is_result_like : std::false_type {};
template <class R>
struct is_result_like<
    R, std::void_t<decltype(bool(std::declval<const R&>().has_value())), decltype(std::declval<const R&>().error())>>
    : std::true_type {};

/// Returns the failure a failed result-like value carries, through `failure_of` found by ADL.
template <class R>
Failure failure_of_result(const R& result) {
  using llmretry::failure_of;
  return failure_of(result.error());
}

}  // namespace detail

/// True when call_with_retry reads failures from the returned value (it has has_value() and error()).
template <class R>
inline constexpr bool is_result_like_v = detail::is_result_like<std::decay_t<R>>::value;

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_RESULT_HPP
