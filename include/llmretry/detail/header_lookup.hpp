#ifndef LLMRETRY_DETAIL_HEADER_LOOKUP_HPP
#define LLMRETRY_DETAIL_HEADER_LOOKUP_HPP

#include <string_view>
#include <type_traits>
#include <utility>

#include "../version.hpp"
#include "text.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace detail {

template <class T, class = void>
struct is_header_lookup : std::false_type {};
template <class T>
struct is_header_lookup<T, std::void_t<decltype(std::declval<const T&>()(std::string_view{}))>> : std::true_type {};

/// Calls visit(value) with the value of header `name` when present. `headers` is a callable that looks a
/// name up (returning std::optional of a string type, a pointer that is null when absent, or a string
/// that is empty when absent), or a container of name/value pairs searched with case-insensitive names.
template <class Headers, class Visit>
void with_header(const Headers& headers, std::string_view name, Visit&& visit) {
  if constexpr (is_header_lookup<Headers>::value) {
    auto&& found = headers(name);
    using Found = std::decay_t<decltype(found)>;
    if constexpr (std::is_pointer_v<Found>) {
      if (found != nullptr) visit(std::string_view{found});
    } else if constexpr (std::is_convertible_v<const Found&, std::string_view>) {
      const std::string_view value{found};
      if (!value.empty()) visit(value);
    } else {
      if (found) visit(std::string_view{*found});
    }
  } else {
    for (const auto& [key, value] : headers) {
      if (iequals(std::string_view{key}, name)) {
        visit(std::string_view{value});
        return;
      }
    }
  }
}

}  // namespace detail
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_DETAIL_HEADER_LOOKUP_HPP
