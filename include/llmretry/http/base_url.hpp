#ifndef LLMRETRY_HTTP_BASE_URL_HPP
#define LLMRETRY_HTTP_BASE_URL_HPP

#include <algorithm>
#include <string>
#include <string_view>

#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// Returns `path` (such as "/v1/chat/completions", with or without a query) resolved against the base URL
/// `base` (such as "https://api.openai.com/v1", OPENAI_BASE_URL) as the OpenAI SDKs do: trailing slashes of
/// the base's path are dropped, and a base ending in "/v1" is not doubled ("/v10" is not "/v1"). A query of
/// the base (such as "?api-version=2024-10-21") comes after the path, joined to the path's own query by "&";
/// a fragment of the base is dropped. Never throws (except std::bad_alloc).
[[nodiscard]] inline std::string resolve_url(std::string base, std::string_view path) {
  base.erase(std::min(base.find('#'), base.size()));
  std::string query;
  if (const auto mark = base.find('?'); mark != std::string::npos) {
    query = base.substr(mark + 1);
    base.erase(mark);
  }
  std::string_view path_query;
  if (const auto mark = path.find('?'); mark != std::string_view::npos) {
    path_query = path.substr(mark + 1);
    path = path.substr(0, mark);
  }
  while (!base.empty() && base.back() == '/') base.pop_back();
  constexpr std::string_view version = "/v1";
  const bool base_has_version =
      base.size() >= version.size() && base.compare(base.size() - version.size(), version.size(), version) == 0;
  if (base_has_version && (path == version || path.substr(0, 4) == "/v1/")) path.remove_prefix(version.size());
  base.append(path);
  if (query.empty() && path_query.empty()) return base;
  base.append("?").append(query);
  if (!query.empty() && !path_query.empty()) base.push_back('&');
  return base.append(path_query);
}

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_HTTP_BASE_URL_HPP
