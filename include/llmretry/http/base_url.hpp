#ifndef LLMRETRY_HTTP_BASE_URL_HPP
#define LLMRETRY_HTTP_BASE_URL_HPP

#include <string>
#include <string_view>

#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// Returns `path` (such as "/v1/chat/completions") resolved against the base URL `base` (such as
/// "https://api.openai.com/v1", OPENAI_BASE_URL) as the OpenAI SDKs do: trailing slashes of the base are
/// dropped, and a base ending in "/v1" is not doubled ("/v10" is not "/v1"). Never throws (except
/// std::bad_alloc).
[[nodiscard]] inline std::string resolve_url(std::string base, std::string_view path) {
  while (!base.empty() && base.back() == '/') base.pop_back();
  constexpr std::string_view version = "/v1";
  const bool base_has_version =
      base.size() >= version.size() && base.compare(base.size() - version.size(), version.size(), version) == 0;
  if (base_has_version && (path == version || path.substr(0, 4) == "/v1/")) path.remove_prefix(version.size());
  return base.append(path);
}

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_HTTP_BASE_URL_HPP
