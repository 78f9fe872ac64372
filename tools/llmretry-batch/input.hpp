// The input of llmretry-batch: one request a line in the OpenAI Batch API input format, checked whole
// before anything is sent.
#ifndef LLMRETRY_BATCH_INPUT_HPP
#define LLMRETRY_BATCH_INPUT_HPP

#include <llmretry/admission/tokens.hpp>
#include <llmretry/detail/text.hpp>
#include <llmretry/http/base_url.hpp>
#include <llmretry/json/canonical.hpp>
#include <llmretry/json/estimate.hpp>
#include <llmretry/store/fingerprint.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/labels.hpp"

namespace batch {

/// A problem with the input file: what() names the file, the line and the field.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One input line: `{"custom_id": ..., "method": "POST", "url": "/v1/chat/completions", "body": {...}}`.
struct Request {
  std::size_t line = 0;  ///< 1-based line number in the input file
  std::string custom_id;
  std::string url;                  ///< the absolute URL, resolved against the base URL
  const char* task_type = "other";  ///< the metrics' label of its url (llmretry_tools::task_type): "chat"...
  std::string body;                 ///< the body as sent (compact JSON)
  std::string model;                ///< the body's `model`, empty when it has none
  std::string key;                  ///< the Idempotency-Key: the same on every attempt and every rerun
  llmretry::Cost estimate;
};

/// Returns the Idempotency-Key of a request: "batch-" and the SHA-256 of its canonical custom_id, method,
/// url and body, so that a rerun sends the same key and a changed request a new one.
inline std::string idempotency_key(const nlohmann::json& line) {
  const nlohmann::json identity = {
      {"custom_id", line["custom_id"]}, {"method", line["method"]}, {"url", line["url"]}, {"body", line["body"]}};
  const std::string fingerprint = llmretry::store::fingerprint(identity.dump());
  return "batch-" + fingerprint.substr(fingerprint.find(':') + 1);
}

/// The deepest nesting of arrays and objects in JSON that llmretry-batch reads and writes back (an input line,
/// an answer's body): writing JSON takes a stack frame per level.
inline constexpr int most_depth = 512;

namespace detail {

/// Returns what is wrong with `url`, the path (and query) of a request line, or nullptr: it must begin with one
/// '/', hold only what a URL's path and query may (letters, digits, "-._~!$&'()*+,;=:@/?%"; no space, control
/// character, '#' or byte above 0x7e), and its path no "." or ".." segment, written out or percent-encoded
/// (which would climb out of the base URL), nor an encoded '/' or '\\'.
inline const char* url_problem(std::string_view url) {
  if (url.front() != '/' || url.substr(0, 2) == "//") return "must be a path such as /v1/chat/completions";
  constexpr std::string_view allowed =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:@/?%";
  if (url.find_first_not_of(allowed) != std::string_view::npos)
    return "holds a character a URL path may not (a space, a control character, '#', a byte above 0x7e...)";
  const std::string_view path = url.substr(0, url.find('?'));
  std::string decoded;  // the path with every %2e read as the '.' a server reads
  for (std::size_t i = 0; i < path.size(); ++i) {
    const std::string_view escape = path.substr(i, 3);
    if (llmretry::detail::iequals(escape, "%2e")) {
      decoded += '.';
      i += 2;
    } else if (llmretry::detail::iequals(escape, "%2f") || llmretry::detail::iequals(escape, "%5c")) {
      return "holds an encoded '/' or '\\' (%2F, %5C)";
    } else {
      decoded += path[i];
    }
  }
  for (std::size_t from = 1; from <= decoded.size();) {
    const std::size_t end = std::min(decoded.find('/', from), decoded.size());
    const std::string_view segment = std::string_view(decoded).substr(from, end - from);
    if (segment == "." || segment == "..") return "holds a \".\" or \"..\" segment";
    from = end + 1;
  }
  return nullptr;
}

/// Returns the request on `text`, line `number` of `file`. Throws InputError naming the line and field.
inline Request parse_line(std::string_view text, std::size_t number, const std::string& file,
                          const std::string& base_url) {
  const std::string where = file + ":" + std::to_string(number) + ": ";
  if (text.find('\0') != std::string_view::npos) throw InputError(where + "not JSON (it holds a NUL byte)");
  if (llmretry::json::nested_deeper_than(text, most_depth))
    throw InputError(where + "nests arrays and objects deeper than " + std::to_string(most_depth) + " levels");
  const auto line = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (line.is_discarded()) throw InputError(where + "not JSON");
  if (!line.is_object()) throw InputError(where + "not a JSON object");
  for (const auto& member : line.items()) {
    const std::string& name = member.key();
    if (name != "custom_id" && name != "method" && name != "url" && name != "body")
      throw InputError(where + name + ": unknown field (expected custom_id, method, url, body)");
  }
  const auto string_field = [&](const char* name) -> const std::string& {
    const auto found = line.find(name);
    if (found == line.end()) throw InputError(where + name + ": missing");
    if (!found->is_string() || found->get_ref<const std::string&>().empty())
      throw InputError(where + name + ": must be a non-empty string");
    return found->get_ref<const std::string&>();
  };
  Request request;
  request.line = number;
  request.custom_id = string_field("custom_id");
  if (string_field("method") != "POST") throw InputError(where + "method: must be \"POST\"");
  const std::string& url = string_field("url");
  if (const char* problem = url_problem(url)) throw InputError(where + "url: " + problem);
  const auto body = line.find("body");
  if (body == line.end()) throw InputError(where + "body: missing");
  if (!body->is_object()) throw InputError(where + "body: must be a JSON object");
  request.url = llmretry::resolve_url(base_url, url);
  request.task_type = llmretry_tools::task_type(url);
  request.body = body->dump();
  const auto model = body->find("model");
  if (model != body->end() && model->is_string()) request.model = model->get<std::string>();
  request.key = idempotency_key(line);
  request.estimate = llmretry::json::estimate_of(*body, request.body);
  return request;
}

}  // namespace detail

/// Calls `use(request, text)` for every request of the JSONL file `path` in order (blank lines skipped),
/// `text` its line as read (without its line end), its url resolved against `base_url`; only the line being
/// read and the custom_ids are held. Returns how many requests it read. Throws InputError naming the line
/// and field of the first bad line (the requests before it were used), a custom_id used twice, or a file
/// that cannot be read or holds no request.
template <class Use>
std::size_t for_each_request(const std::string& path, const std::string& base_url, Use&& use) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot be read");
  std::unordered_map<std::string, std::size_t> line_of;
  std::size_t count = 0;
  std::string text;
  for (std::size_t number = 1; std::getline(in, text); ++number) {
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    Request request = detail::parse_line(text, number, path, base_url);
    const auto [first, added] = line_of.emplace(request.custom_id, number);
    if (!added)
      throw InputError(path + ":" + std::to_string(number) + ": custom_id: \"" + request.custom_id +
                       "\" is already used on line " + std::to_string(first->second));
    use(std::move(request), std::string_view(text));
    ++count;
  }
  if (in.bad()) throw InputError(path + ": read error");
  if (count == 0) throw InputError(path + ": no request in the file");
  return count;
}

/// Returns every request of the JSONL file `path` (blank lines skipped), its url resolved against
/// `base_url`. Throws InputError as for_each_request does.
inline std::vector<Request> read_input(const std::string& path, const std::string& base_url) {
  std::vector<Request> requests;
  (void)for_each_request(path, base_url,
                         [&](Request request, std::string_view) { requests.push_back(std::move(request)); });
  return requests;
}

}  // namespace batch

#endif  // LLMRETRY_BATCH_INPUT_HPP
