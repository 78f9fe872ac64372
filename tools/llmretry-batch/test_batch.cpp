// End to end: the rate-limited loopback provider runs in this process, llmretry-batch as a child process
// pointed at it with OPENAI_BASE_URL. Every line is answered once, 429s stay rare, a rerun sends nothing,
// and a run killed with SIGKILL and run again answers no line twice and sends no completed request again;
// the same with the queue and operations table in Redis (--redis, a redis-server started by the test).
#include <llmretry/loopback/provider.hpp>
#if LLMRETRY_BATCH_TEST_REDIS
#include <llmretry/redis/connection.hpp>
#include <llmretry/redis/idempotency_store.hpp>
#include <llmretry/redis/job_queue.hpp>
#include <llmretry/redis/testing_server.hpp>
#include <llmretry/store/fingerprint.hpp>
#endif

#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <child_process.hpp>
#include <llmretry_catch.hpp>
#include <test_time.hpp>

#include "input.hpp"

using namespace std::chrono_literals;
using llmretry::testing::LoopbackLimits;
using llmretry::testing::LoopbackProvider;

namespace {

/// 30,000 requests and 1,800,000 tokens per minute, enforced per second (500 requests and 30,000 tokens a
/// second); each answer takes 10 ms. 2,000 lines of about 55 tokens need about 3 s.
LoopbackLimits limits() {
  LoopbackLimits limits;
  limits.requests_per_minute = 30'000;
  limits.tokens_per_minute = 1'800'000;
  limits.latency = 10ms;
  return limits;
}

/// A fresh directory for one test's files.
std::filesystem::path work_dir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(LLMRETRY_BATCH_WORK_DIR) / "test_work" / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

/// Writes `count` chat completion requests, custom_id "ticket-N".
std::string write_input(const std::filesystem::path& dir, int count) {
  const std::string path = (dir / "input.jsonl").string();
  std::ofstream out(path);
  for (int i = 1; i <= count; ++i)
    out << R"({"custom_id":"ticket-)" << i
        << R"(","method":"POST","url":"/v1/chat/completions","body":{"model":"loopback","max_tokens":20,)"
        << R"("messages":[{"role":"user","content":"Summarise ticket )" << i << R"( in one line."}]}})" << '\n';
  return path;
}

/// llmretry-batch as a child process, OPENAI_BASE_URL set to `base_url` (unset when empty), its output
/// and errors in files of `dir`.
class Child : public llmretry_test::ChildProcess {
 public:
  Child(const std::vector<std::string>& arguments, const std::string& base_url, const std::filesystem::path& dir)
      : ChildProcess(
            LLMRETRY_BATCH_PROGRAM, arguments, dir, {"OPENAI_"},
            base_url.empty() ? std::vector<std::string>{} : std::vector<std::string>{"OPENAI_BASE_URL=" + base_url}) {}

  /// Kills it with SIGKILL and waits for it.
  void kill_now() {
    CHECK(wait(SIGKILL) == 128 + SIGKILL);
    CHECK(ended_by_signal());
  }
};

/// Returns the parsed lines of a JSONL file (none when it does not exist).
std::vector<nlohmann::json> lines_of(const std::filesystem::path& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string text; std::getline(in, text);) lines.push_back(nlohmann::json::parse(text));
  return lines;
}

/// Returns how many complete lines `path` holds.
std::size_t line_count(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::size_t count = 0;
  for (std::string text; std::getline(in, text);) ++count;
  return count;
}

/// Waits until `path` holds `count` complete lines, written by `child`. REQUIREs that `child` runs meanwhile
/// and that they come within a minute (scaled).
void wait_for_lines(Child& child, const std::filesystem::path& path, std::size_t count) {
  const auto end = std::chrono::steady_clock::now() + llmretry_test::scaled(std::chrono::minutes{1});
  while (line_count(path) < count) {
    REQUIRE_FALSE(child.ended());
    REQUIRE(std::chrono::steady_clock::now() < end);
    std::this_thread::sleep_for(2ms);
  }
}

/// Waits until `condition()` holds. REQUIREs that it does within `bound` (scaled).
template <class Condition>
void wait_until(const Condition& condition, std::chrono::milliseconds bound) {
  const auto end = std::chrono::steady_clock::now() + llmretry_test::scaled(bound);
  while (!condition()) {
    REQUIRE(std::chrono::steady_clock::now() < end);
    std::this_thread::sleep_for(5ms);
  }
}

/// Returns how many times each custom_id has a line in the output and errors files together.
std::map<std::string, int> answers(const std::filesystem::path& dir) {
  std::map<std::string, int> count;
  for (const char* file : {"output.jsonl", "output.errors.jsonl"})
    for (const auto& line : lines_of(dir / file)) ++count[line.at("custom_id").get<std::string>()];
  return count;
}

/// Checks that each of the `count` tickets has exactly one line, a 200 answer in the output file.
void check_answered_once(const std::filesystem::path& dir, int count) {
  const auto answered = answers(dir);
  CHECK(answered.size() == static_cast<std::size_t>(count));
  for (const auto& [id, times] : answered) {
    INFO(id);
    CHECK(times == 1);
  }
  CHECK(line_count(dir / "output.errors.jsonl") == 0);
  for (const auto& line : lines_of(dir / "output.jsonl")) CHECK(line.at("response").at("status_code") == 200);
}

/// Returns a line of the Batch output format answering `custom_id`, its body padded with `padding` bytes.
std::string answer_line(const std::string& custom_id, std::size_t padding = 0) {
  return R"({"id":"batch_req_0","custom_id":")" + custom_id +
         R"(","response":{"status_code":200,"request_id":"","body":{"padding":")" + std::string(padding, 'x') +
         R"("}},"error":null})";
}

/// A TCP socket bound to a port of 127.0.0.1 while it lives: listening, it takes connections into its backlog
/// and answers none; not listening, every connection to it is refused.
class BoundSocket {
 public:
  explicit BoundSocket(bool listening) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    REQUIRE(fd_ >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
    if (listening) REQUIRE(::listen(fd_, 8) == 0);
    socklen_t length = sizeof address;
    REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    port_ = ntohs(address.sin_port);
  }
  BoundSocket(const BoundSocket&) = delete;
  BoundSocket& operator=(const BoundSocket&) = delete;
  BoundSocket(BoundSocket&&) = delete;
  BoundSocket& operator=(BoundSocket&&) = delete;
  ~BoundSocket() { ::close(fd_); }

  /// Returns an OpenAI base URL on its port.
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1"; }
  /// Returns the socket.
  int fd() const noexcept { return fd_; }

 private:
  int fd_;
  int port_ = 0;
};

/// Returns the Idempotency-Key of each request the provider received, from the `from`th on.
std::vector<std::string> keys_received(const LoopbackProvider& provider, std::size_t from) {
  std::vector<std::string> keys;
  const auto requests = provider.requests();
  for (std::size_t i = from; i < requests.size(); ++i)
    keys.push_back(requests[i].header("Idempotency-Key").value_or(""));
  return keys;
}

}  // namespace

TEST_CASE("2,000 lines against the rate-limited loopback provider: each answered once, a rerun sends nothing") {
  LoopbackProvider provider;
  provider.enforce(limits());
  const auto dir = work_dir("learned");
  const std::string input = write_input(dir, 2000);
  const std::vector<std::string> arguments{input, (dir / "output.jsonl").string(), "--concurrency", "16"};

  const auto start = std::chrono::steady_clock::now();
  Child first(arguments, provider.base_url() + "/v1", dir);
  REQUIRE(first.wait() == 0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto requests = static_cast<std::int64_t>(provider.request_count());
  const double share = static_cast<double>(provider.refused()) / static_cast<double>(requests);
  std::printf("llmretry-batch, 2,000 lines, limits learned: %lld requests, %lld answered 429 (%.2f %%), %.2f s\n%s",
              static_cast<long long>(requests), static_cast<long long>(provider.refused()), 100.0 * share, seconds,
              first.err().c_str());
  check_answered_once(dir, 2000);
  CHECK(provider.served() == 2000);
  // Under a sanitizer requests reach the provider late after their reservation, some of them together.
  CHECK(share <= (llmretry_test::time_scale == 1 ? 0.01 : 0.05));
  CHECK(first.err().find("wall time") != std::string::npos);

  // Every Idempotency-Key is the request's own, the same on its retries.
  std::set<std::string> keys;
  const auto sent = provider.requests();
  for (const auto& request : batch::read_input(input, provider.base_url() + "/v1")) keys.insert(request.key);
  for (const auto& request : sent) CHECK(keys.count(request.header("Idempotency-Key").value_or("")) == 1);
  CHECK(sent.front().path == "/v1/chat/completions");

  Child rerun(arguments, provider.base_url() + "/v1", dir);
  CHECK(rerun.wait() == 0);
  CHECK(provider.request_count() == sent.size());
  CHECK(rerun.err().find("requests: 0 sent") != std::string::npos);
  check_answered_once(dir, 2000);
}

TEST_CASE("killed with SIGKILL mid-run and run again: no line answered twice, no completed request sent again") {
  LoopbackProvider provider;
  provider.enforce(limits());
  const auto dir = work_dir("killed");
  const std::string input = write_input(dir, 2000);
  const std::vector<std::string> arguments{
      input, (dir / "output.jsonl").string(), "--concurrency", "16", "--rpm", "30000", "--tpm", "1800000"};

  Child first(arguments, provider.base_url(), dir);
  wait_for_lines(first, dir / "output.jsonl", 600);
  first.kill_now();
  const std::size_t sent_before = provider.request_count();
  std::set<std::string> completed;  // the keys of the lines written before the kill
  std::map<std::string, std::string> key_of;
  for (const auto& request : batch::read_input(input, provider.base_url())) key_of[request.custom_id] = request.key;
  for (const auto& line : lines_of(dir / "output.jsonl")) completed.insert(key_of.at(line.at("custom_id")));

  Child rerun(arguments, provider.base_url(), dir);
  CHECK(rerun.wait() == 0);
  check_answered_once(dir, 2000);
  const auto resent = keys_received(provider, sent_before);
  std::size_t resent_completed = 0;
  for (const auto& key : resent) resent_completed += completed.count(key);
  std::printf(
      "llmretry-batch killed after %zu lines (%zu requests sent), rerun: %zu requests, %zu of them of a "
      "completed line\n%s",
      completed.size(), sent_before, resent.size(), resent_completed, rerun.err().c_str());
  CHECK(resent_completed == 0);
  CHECK(resent.size() < 2000 - completed.size() + 100);  // the rest, their 429s and those in flight at the kill
}

TEST_CASE("SIGINT mid-run: the requests in flight are written, status 130; a rerun sends the rest, none twice") {
  LoopbackProvider provider;
  LoopbackLimits slow = limits();  // no 429: every request sent is answered
  slow.requests_per_minute = 1'000'000'000;
  slow.tokens_per_minute = 1'000'000'000;
  slow.latency = 20ms;
  provider.enforce(slow);
  const auto dir = work_dir("interrupted");
  const std::string input = write_input(dir, 2000);
  const std::vector<std::string> arguments{input,  (dir / "output.jsonl").string(), "--concurrency", "16", "--rpm",
                                           "30000"};

  Child first(arguments, provider.base_url(), dir);
  wait_for_lines(first, dir / "output.jsonl", 400);
  first.signal(SIGINT);
  const std::optional<int> status = first.wait_for(llmretry_test::scaled(60s));
  REQUIRE(status);
  CHECK(*status == 130);
  CHECK(first.ended_by_signal());  // so that a shell stops the script or loop that ran it
  INFO(first.err());
  CHECK_THAT(first.err(), llmretry_catch::contains("stopping: nothing more is sent"));
  CHECK_THAT(first.err(), llmretry_catch::contains("lines: 2000"));
  CHECK_THAT(first.err(), llmretry_catch::contains("stopped by SIGINT"));
  const std::size_t written = lines_of(dir / "output.jsonl").size();  // each line whole: every one parses
  CHECK(written < 2000);
  CHECK(provider.request_count() == written);  // no request answered but left unwritten

  Child rerun(arguments, provider.base_url(), dir);
  CHECK(rerun.wait() == 0);
  check_answered_once(dir, 2000);
  CHECK(provider.request_count() == 2000);  // no request sent twice
}

TEST_CASE("SIGTERM while a request waits for capacity: the wait is cut short, status 143") {
  LoopbackProvider provider;
  provider.enforce(limits());
  const auto dir = work_dir("terminated");
  const std::string input = write_input(dir, 3);
  // One request a minute: the first goes at once, the second waits a minute for capacity.
  Child child({input, (dir / "output.jsonl").string(), "--concurrency", "2", "--rpm", "1"}, provider.base_url(), dir);
  wait_for_lines(child, dir / "output.jsonl", 1);
  std::this_thread::sleep_for(200ms);  // the second request is in its wait by then (it is not sent either way)
  child.signal(SIGTERM);
  const std::optional<int> status = child.wait_for(llmretry_test::scaled(30s));
  REQUIRE(status);
  CHECK(*status == 143);
  CHECK(child.ended_by_signal());
  CHECK(provider.request_count() == 1);
  CHECK(line_count(dir / "output.jsonl") == 1);
  CHECK_THAT(child.err(), llmretry_catch::contains("stopped by SIGTERM: 2 lines without an answer"));
}

TEST_CASE("a SIGINT the process was started ignoring stays ignored") {
  LoopbackProvider provider;
  provider.enforce(limits());
  const auto dir = work_dir("ignoring");
  const std::string input = write_input(dir, 2000);  // 4 s at least, paced: it runs when the signal comes
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction before {};
  REQUIRE(::sigaction(SIGINT, &ignore, &before) == 0);  // inherited by the child, as from a shell's `&`
  Child child({input, (dir / "output.jsonl").string(), "--concurrency", "4", "--rpm", "30000"}, provider.base_url(),
              dir);
  REQUIRE(::sigaction(SIGINT, &before, nullptr) == 0);
  wait_for_lines(child, dir / "output.jsonl", 1);
  REQUIRE_FALSE(child.ended());
  child.signal(SIGINT);
  const std::optional<int> status = child.wait_for(llmretry_test::scaled(60s));
  REQUIRE(status);
  CHECK(*status == 0);
  check_answered_once(dir, 2000);
  CHECK(child.err().find("stopping:") == std::string::npos);
}

TEST_CASE("a second SIGINT quits at once, a request still in flight") {
  const BoundSocket silent(true);  // takes the connection, never answers: the request stays in flight 60 s
  const auto dir = work_dir("second_signal");
  const std::string input = write_input(dir, 1);
  Child child({input, (dir / "output.jsonl").string(), "--concurrency", "1"}, silent.base_url(), dir);
  pollfd waiting{silent.fd(), POLLIN, 0};
  REQUIRE(::poll(&waiting, 1, static_cast<int>(llmretry_test::scaled(30s).count() * 1000)) == 1);
  const int connection = ::accept(silent.fd(), nullptr, nullptr);
  REQUIRE(connection >= 0);
  char request[256];
  REQUIRE(::read(connection, request, sizeof request) > 0);  // the request is sent: it is in flight

  child.signal(SIGINT);
  // Two signals sent close together may count as one: the second goes once the first was taken.
  wait_until([&] { return child.err().find("stopping:") != std::string::npos; }, 30s);
  CHECK_FALSE(child.ended());  // waiting for the request in flight
  child.signal(SIGINT);
  const std::optional<int> status = child.wait_for(llmretry_test::scaled(30s));
  REQUIRE(status);
  CHECK(*status == 130);
  CHECK(child.ended_by_signal());
  CHECK(line_count(dir / "output.jsonl") == 0);
  ::close(connection);
}

TEST_CASE("a bad input line exits with status 2 naming the line and field, before sending anything") {
  LoopbackProvider provider;
  const auto dir = work_dir("bad_input");
  const auto run_with = [&](const std::string& second_line) {
    const std::string path = (dir / "input.jsonl").string();
    std::ofstream(path) << R"({"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{}})" << '\n'
                        << second_line << '\n';
    Child child({path, (dir / "output.jsonl").string()}, provider.base_url(), dir);
    CHECK(child.wait() == 2);
    return child.err();
  };
  CHECK_THAT(run_with(R"({"method":"POST","url":"/v1/chat/completions","body":{}})"),
             llmretry_catch::contains("input.jsonl:2: custom_id: missing"));
  CHECK_THAT(run_with(R"({"custom_id":"b","method":"POST","url":7,"body":{}})"),
             llmretry_catch::contains("input.jsonl:2: url: must be a non-empty string"));
  CHECK_THAT(run_with(R"({"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{}})"),
             llmretry_catch::contains("input.jsonl:2: custom_id: \"a\" is already used on line 1"));
  CHECK_THAT(run_with(R"({"custom_id":"b","method":"GET","url":"/v1/models","body":{}})"),
             llmretry_catch::contains("input.jsonl:2: method: must be \"POST\""));
  CHECK_THAT(run_with(R"({"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":[]})"),
             llmretry_catch::contains("input.jsonl:2: body: must be a JSON object"));
  CHECK_THAT(run_with(R"({"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":{},"x":1})"),
             llmretry_catch::contains("input.jsonl:2: x: unknown field"));
  CHECK_THAT(run_with(R"({"custom_id":"b",)"), llmretry_catch::contains("input.jsonl:2: not JSON"));
  CHECK_THAT(run_with(std::string(R"({"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":{}})") +
                      '\0' + R"({"not":"json)"),
             llmretry_catch::contains("input.jsonl:2: not JSON (it holds a NUL byte)"));
  for (const char* url : {"v1/chat/completions", "//evil.example/v1/chat/completions"})
    CHECK_THAT(run_with(std::string(R"({"custom_id":"b","method":"POST","url":")") + url + R"(","body":{}})"),
               llmretry_catch::contains("input.jsonl:2: url: must be a path such as /v1/chat/completions"));
  for (const char* url : {"/v1/chat completions", "/v1/chat/completions\\r\\nX-Evil:1", "/v1/chat\\r",
                          "/v1/chat\\u0001", "/v1/chat\\u00e9", "/v1/chat#x", "/v1/chat\\\\x"})
    CHECK_THAT(run_with(std::string(R"({"custom_id":"b","method":"POST","url":")") + url + R"(","body":{}})"),
               llmretry_catch::contains("input.jsonl:2: url: holds a character a URL path may not"));
  for (const char* url : {"/v1/../../internal/admin", "/v1/./chat/completions", "/v1/chat/..", "/v1/..?x=1",
                          "/v1/%2e%2e/%2E%2e/internal/admin", "/v1/.%2e/admin", "/v1/%2e/chat"})
    CHECK_THAT(run_with(std::string(R"({"custom_id":"b","method":"POST","url":")") + url + R"(","body":{}})"),
               llmretry_catch::contains("input.jsonl:2: url: holds a \".\" or \"..\" segment"));
  for (const char* url : {"/v1/..%2Finternal", "/v1/%2f%2fevil", "/v1/%5C..%5Cadmin"})
    CHECK_THAT(run_with(std::string(R"({"custom_id":"b","method":"POST","url":")") + url + R"(","body":{}})"),
               llmretry_catch::contains("input.jsonl:2: url: holds an encoded '/' or '\\' (%2F, %5C)"));
  CHECK_THAT(run_with(R"({"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":{"x":)" +
                      std::string(600, '[') + std::string(600, ']') + "}}"),
             llmretry_catch::contains("input.jsonl:2: nests arrays and objects deeper than 512 levels"));
  CHECK(provider.request_count() == 0);
}

TEST_CASE("an answer nested deeper than 512 levels is written as the string it is, not as JSON (no crash)") {
  LoopbackProvider provider;
  const std::string deep = std::string(40'000, '[') + std::string(40'000, ']');
  const std::string shallow = std::string(512, '[') + std::string(512, ']');
  for (const std::string& body : {deep, shallow}) {
    llmretry::testing::ScriptedResponse answer;
    answer.body = body;
    provider.then(answer);
  }
  const auto dir = work_dir("deep_answer");
  Child child({write_input(dir, 2), (dir / "output.jsonl").string(), "--concurrency", "1"}, provider.base_url(), dir);
  CHECK(child.wait() == 0);
  INFO(child.err());
  const auto lines = lines_of(dir / "output.jsonl");
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].at("response").at("body") == deep);
  CHECK(lines[1].at("response").at("body").is_array());  // 512 levels: JSON still
}

TEST_CASE("url_problem: paths a base URL's host serves beneath it pass, with any query") {
  for (const char* url : {"/v1/chat/completions", "/v1/chat/completions?x=%2e%2e/../",
                          "/openai/deployments/gpt-4o/"
                          "chat/completions?api-version=2024-10-21",
                          "/v1/files/file-abc%20x", "/v1/a.b/..c/.d"}) {
    INFO(url);
    CHECK(batch::detail::url_problem(url) == nullptr);
  }
}

TEST_CASE("a request that fails for good goes to the errors file with the stop reason and the provider's code") {
  LoopbackProvider provider;
  provider.then(LoopbackProvider::context_length_exceeded());
  const auto dir = work_dir("errors");
  const std::string path = (dir / "input.jsonl").string();
  std::ofstream(path) << R"({"custom_id":"long","method":"POST","url":"/v1/chat/completions","body":{}})" << '\n';
  Child child({path, (dir / "output.jsonl").string(), "--concurrency", "1"}, provider.base_url() + "/v1/", dir);
  CHECK(child.wait() == 1);
  const auto errors = lines_of(dir / "output.errors.jsonl");
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].at("custom_id") == "long");
  CHECK(errors[0].at("error").at("code") == "context_length_exceeded");
  CHECK(errors[0].at("error").at("message") == "HTTP 400 context_length (context_length_exceeded)");
  CHECK(errors[0].at("error").at("stop_reason") == "not_retryable");
  CHECK(errors[0].at("response").at("status_code") == 400);
  CHECK(provider.requests().at(0).path == "/v1/chat/completions");

  Child rerun({path, (dir / "output.jsonl").string()}, provider.base_url(), dir);
  CHECK(rerun.wait() == 1);  // answered in the errors file: not sent again
  CHECK(provider.request_count() == 1);
}

TEST_CASE("an attempt that failed without an error answer: the errors line says what the HTTP client saw") {
  LoopbackProvider provider;
  auto huge = LoopbackProvider::chat_completion("x");
  for (int i = 0; i < 80; ++i) huge.headers.emplace_back("X-Filler-" + std::to_string(i), std::string(1000, 'h'));
  provider.then(huge);
  const auto dir = work_dir("failed_with");
  const std::string path = (dir / "input.jsonl").string();
  std::ofstream(path) << R"({"custom_id":"huge","method":"POST","url":"/v1/chat/completions","body":{}})" << '\n';
  Child child({path, (dir / "output.jsonl").string(), "--concurrency", "1"}, provider.base_url(), dir);
  CHECK(child.wait() == 1);
  const auto errors = lines_of(dir / "output.errors.jsonl");
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].at("error").at("code") == "too_large");
  CHECK(errors[0].at("error").at("message") == "HTTP 200 too_large: the answer passed Options::max_header_bytes");
  CHECK(errors[0].at("error").at("attempts") == 1);
}

TEST_CASE(
    "--max-attempts: a request that gets no answer at all is tried that many times, then written to the errors "
    "file with what the HTTP client saw") {
  const BoundSocket refusing(false);
  const std::string nowhere = refusing.base_url();
  const auto dir = work_dir("max_attempts");
  const std::string path = (dir / "input.jsonl").string();
  std::ofstream(path) << R"({"custom_id":"lost","method":"POST","url":"/v1/chat/completions","body":{}})" << '\n';
  Child child({path, (dir / "output.jsonl").string(), "--concurrency", "1", "--max-attempts", "2"}, nowhere, dir);
  CHECK(child.wait() == 1);
  const auto errors = lines_of(dir / "output.errors.jsonl");
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].at("custom_id") == "lost");
  CHECK(errors[0].at("error").at("stop_reason") == "attempts_exhausted");
  CHECK(errors[0].at("error").at("attempts") == 2);
  const std::string message = errors[0].at("error").at("message");
  CHECK_THAT(message, llmretry_catch::contains("Couldn't connect to server"));
  CHECK(line_count(dir / "output.jsonl") == 0);

  for (const char* count : {"0", "101", "two"}) {
    Child refused({path, (dir / "again.jsonl").string(), "--max-attempts", count}, nowhere, dir);
    CHECK(refused.wait() == 2);
    CHECK_THAT(refused.err(), llmretry_catch::contains("--max-attempts"));
  }
  CHECK_FALSE(std::filesystem::exists(dir / "again.jsonl"));
}

TEST_CASE("OUTPUT or --errors naming INPUT, or OUTPUT and ERRORS one file: status 2, no file touched, nothing sent") {
  LoopbackProvider provider;
  const auto dir = work_dir("same_file");
  const std::string input = write_input(dir, 200);
  const std::string before = llmretry_test::read_file(input);
  std::filesystem::create_hard_link(input, dir / "input-link.jsonl");
  std::ofstream(dir / "output.jsonl").flush();
  std::filesystem::create_symlink(dir / "output.jsonl", dir / "output-link.jsonl");
  const auto refused = [&](const std::vector<std::string>& arguments, const std::string& message) {
    Child child(arguments, provider.base_url(), dir);
    CHECK(child.wait() == 2);
    CHECK_THAT(child.err(), llmretry_catch::contains(message));
    CHECK(llmretry_test::read_file(input) == before);
  };
  refused({input, input}, "OUTPUT " + input + " is the file INPUT names");
  refused({input, (dir / "input-link.jsonl").string()}, "is the file INPUT names");
  refused({input, (dir / "new.jsonl").string(), "--errors", input}, "--errors " + input + " is the file INPUT names");
  CHECK(!std::filesystem::exists(dir / "new.jsonl"));
  refused({input, (dir / "output.jsonl").string(), "--errors", (dir / "output-link.jsonl").string()},
          "is the file OUTPUT names");
  CHECK(!std::filesystem::exists(dir / "output.errors.jsonl"));
  // Two spellings of one new path, relative to where the program runs: refused before either is created.
  const std::string fresh = std::filesystem::relative(dir / "fresh.jsonl").string();
  refused({input, fresh, "--errors", "./" + fresh}, "--errors ./" + fresh + " is the file OUTPUT names");
  refused({input, fresh, "--errors", (std::filesystem::relative(dir) / ".." / "same_file" / "fresh.jsonl").string()},
          "is the file OUTPUT names");
  CHECK(!std::filesystem::exists(dir / "fresh.jsonl"));
  CHECK(provider.request_count() == 0);
}

TEST_CASE("an OUTPUT holding what is not Batch output is refused untouched; a complete last line is kept") {
  LoopbackProvider provider;
  provider.enforce(limits());
  const auto dir = work_dir("foreign_output");
  const std::string input = write_input(dir, 3);
  const auto output = dir / "output.jsonl";
  const auto refused = [&](const std::string& content, const std::string& message) {
    std::ofstream(output, std::ios::binary | std::ios::trunc) << content;
    Child child({input, output.string()}, provider.base_url(), dir);
    CHECK(child.wait() == 2);
    CHECK_THAT(child.err(), llmretry_catch::contains(message));
    CHECK(llmretry_test::read_file(output) == content);
  };
  refused(llmretry_test::read_file(input), "output.jsonl:1: not a line of the Batch output format");
  refused(answer_line("ticket-1") + "\n{\"custom_id\":\"ticket-2\"}\n", "output.jsonl:2: not a line of the Batch");
  refused("hello", "output.jsonl:1: not a line of the Batch output format");
  CHECK(provider.request_count() == 0);

  // A last line without its newline that parses was written whole: it counts, and is not cut.
  std::ofstream(output, std::ios::binary | std::ios::trunc) << answer_line("ticket-2");
  Child child({input, output.string()}, provider.base_url(), dir);
  CHECK(child.wait() == 0);
  const auto lines = lines_of(output);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].at("custom_id") == "ticket-2");
  CHECK(provider.request_count() == 2);

  // A last line cut short by a crash while writing it is cut, and its request sent again.
  std::ofstream(output, std::ios::binary | std::ios::trunc) << answer_line("ticket-1") << '\n'
                                                            << answer_line("ticket-2").substr(0, 40);
  Child torn({input, output.string()}, provider.base_url(), dir);
  CHECK(torn.wait() == 0);
  CHECK(lines_of(output).size() == 3);
  CHECK(provider.request_count() == 4);
}

TEST_CASE("an OUTPUT or ERRORS that is not a regular file is refused with status 2 before anything is sent") {
  LoopbackProvider provider;
  const auto dir = work_dir("not_regular");
  const std::string input = write_input(dir, 3);
  const std::string fifo = (dir / "fifo").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const auto refused = [&](const std::vector<std::string>& arguments, const std::string& file) {
    Child child(arguments, provider.base_url(), dir);
    CHECK(child.wait() == 2);
    CHECK_THAT(child.err(), llmretry_catch::contains(file + ": not a regular file"));
    CHECK(child.err().find("see --help") == std::string::npos);
  };
  refused({input, "/dev/null"}, "/dev/null");
  refused({input, fifo}, fifo);
  refused({input, (dir / "output.jsonl").string(), "--errors", "/dev/null"}, "/dev/null");
  CHECK(provider.request_count() == 0);
}

TEST_CASE("OUTPUT /dev/full is refused at once, not read") {
  const auto dir = work_dir("dev_full");
  Child child({write_input(dir, 3), "/dev/full"}, "http://127.0.0.1:9", dir);
  CHECK(child.wait() == 2);
  CHECK_THAT(child.err(), llmretry_catch::contains("/dev/full: not a regular file"));
}

TEST_CASE("OUTPUT /dev/stdout, a file: it holds the answers alone, the summary goes to stderr") {
  LoopbackProvider provider;
  provider.enforce(limits());
  const auto dir = work_dir("stdout");
  Child child({write_input(dir, 20), "/dev/stdout", "--errors", (dir / "errors.jsonl").string()}, provider.base_url(),
              dir);
  CHECK(child.wait() == 0);
  CHECK_THAT(child.err(), llmretry_catch::contains("wall time"));
  std::ifstream out(dir / "stdout.txt");
  std::size_t answered = 0;
  for (std::string text; std::getline(out, text); ++answered) {
    INFO(text);
    const auto line = nlohmann::json::parse(text, nullptr, false);
    REQUIRE(line.is_object());
    CHECK(line.at("response").at("status_code") == 200);
  }
  CHECK(answered == 20);
}

TEST_CASE("resuming a large output reads it a line at a time: it does not cost the output's size in memory") {
  LoopbackProvider provider;
  const auto dir = work_dir("large_output");
  const std::string input = write_input(dir, 2000);
  const auto output = dir / "output.jsonl";
  {
    std::ofstream out(output, std::ios::binary);
    for (int i = 1; i <= 2000; ++i) out << answer_line("ticket-" + std::to_string(i), 50'000) << '\n';
  }
  const auto size_kib = static_cast<long>(std::filesystem::file_size(output) / 1024);
  Child child({input, output.string()}, provider.base_url(), dir);
  CHECK(child.wait() == 0);
  CHECK(provider.request_count() == 0);
  std::printf("llmretry-batch resuming a %ld KiB output: %ld KiB at most in memory\n", size_kib, child.max_rss_kib());
  if (llmretry_test::time_scale == 1)  // a sanitizer's allocator keeps what is freed for a while
    CHECK(child.max_rss_kib() < size_kib / 2);
}

TEST_CASE("a rerun with --retry-errors sends again the lines of the errors file that failed for a temporary cause") {
  LoopbackProvider provider;
  provider.enforce(limits());
  // ticket-1 is asked to wait an hour: provider_wait_too_long; the deployment pauses as long, so tickets 2
  // and 3 cannot be sent within the wait budget (wait_budget). Both causes pass.
  provider.then(LoopbackProvider::rate_limit_exceeded("requests", std::chrono::hours{1}));
  const auto dir = work_dir("retry_errors");
  const std::vector<std::string> arguments{write_input(dir, 3), (dir / "output.jsonl").string(), "--concurrency", "1"};
  Child first(arguments, provider.base_url(), dir);
  CHECK(first.wait() == 1);
  const auto errors = lines_of(dir / "output.errors.jsonl");
  REQUIRE(errors.size() == 3);
  CHECK(errors[0].at("error").at("stop_reason") == "provider_wait_too_long");
  CHECK(provider.request_count() == 1);

  Child again(arguments, provider.base_url(), dir);
  CHECK(again.wait() == 1);  // without --retry-errors, every line of the errors file is final
  CHECK(provider.request_count() == 1);

  auto retry = arguments;
  retry.emplace_back("--retry-errors");
  {
    // Another run writing to the same errors file (under another OUTPUT) holds its lock: refused before any
    // line is dropped, the file as it was.
    const std::string before = llmretry_test::read_file((dir / "output.errors.jsonl").string());
    const int held = ::open((dir / "output.errors.jsonl").c_str(), O_RDONLY);
    REQUIRE(held >= 0);
    REQUIRE(::flock(held, LOCK_EX | LOCK_NB) == 0);
    Child refused(retry, provider.base_url(), dir);
    CHECK(refused.wait() == 2);
    CHECK_THAT(refused.err(), llmretry_catch::contains("output.errors.jsonl: in use by another llmretry-batch"));
    ::close(held);
    CHECK(llmretry_test::read_file((dir / "output.errors.jsonl").string()) == before);
    CHECK(provider.request_count() == 1);
  }
  // The errors file a symbolic link to a file of mode 0600: the file is replaced, the link and the mode stay.
  std::filesystem::rename(dir / "output.errors.jsonl", dir / "kept.errors.jsonl");
  std::filesystem::permissions(dir / "kept.errors.jsonl",
                               std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  std::filesystem::create_symlink("kept.errors.jsonl", dir / "output.errors.jsonl");
  provider.then(LoopbackProvider::context_length_exceeded());  // ticket-1 now fails for good
  Child retried(retry, provider.base_url(), dir);
  CHECK(retried.wait() == 1);
  INFO(retried.err());
  CHECK(provider.request_count() == 4);
  const auto now_errors = lines_of(dir / "output.errors.jsonl");
  REQUIRE(now_errors.size() == 1);
  CHECK(now_errors[0].at("custom_id") == "ticket-1");
  CHECK(now_errors[0].at("error").at("stop_reason") == "not_retryable");
  CHECK(lines_of(dir / "output.jsonl").size() == 2);
  CHECK(std::filesystem::is_symlink(dir / "output.errors.jsonl"));
  CHECK(lines_of(dir / "kept.errors.jsonl").size() == 1);
  CHECK(std::filesystem::status(dir / "kept.errors.jsonl").permissions() ==
        (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));

  Child final_run(retry, provider.base_url(), dir);  // a final line is not sent again
  CHECK(final_run.wait() == 1);
  CHECK(provider.request_count() == 4);
}

namespace {

/// Returns the number after "<what> " in the summary line of `err` that begins with `line` ("tokens: "), such
/// as the 12 of "tokens: 12 reserved" (-1 when it is not there).
long long summary_number(const std::string& err, const std::string& line, const std::string& what) {
  const auto at = err.find(line);
  if (at == std::string::npos) return -1;
  const auto end = err.find('\n', at);
  const std::string text = err.substr(at, end - at);
  const auto word = text.find(" " + what);
  if (word == std::string::npos) return -1;
  const auto start = text.rfind(' ', word - 1);
  return std::stoll(text.substr(start + 1, word - start - 1));
}

/// Returns the files of `dir` whose name begins with `prefix`.
std::vector<std::string> files_beginning(const std::filesystem::path& dir, const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0) names.push_back(name);
  }
  return names;
}

}  // namespace

TEST_CASE("--metrics-file: the library's families and the batch's lines, labelled with the priority and tenant") {
  LoopbackProvider provider;
  provider.enforce(limits());
  // The first request sent is answered 429 (then answered when sent again), the second fails for good.
  provider.then(LoopbackProvider::rate_limit_exceeded("requests", 50ms));
  provider.then(LoopbackProvider::context_length_exceeded());
  const auto dir = work_dir("metrics_file");
  const std::string input = write_input(dir, 5);
  const auto metrics = dir / "metrics.prom";
  // An earlier version, also known under a second name: replaced by a rename, never written in place.
  std::ofstream(metrics) << "# an earlier version\n";
  std::filesystem::create_hard_link(metrics, dir / "earlier.prom");
  Child child({input, (dir / "output.jsonl").string(), "--concurrency", "1", "--priority", "batch", "--tenant", "acme",
               "--metrics-file", metrics.string()},
              provider.base_url(), dir);
  REQUIRE(child.wait() == 1);
  INFO(child.err());
  REQUIRE(provider.request_count() == 6);

  const std::string text = llmretry_test::read_file(metrics);
  INFO(text);
  const auto has = [&](const std::string& line) { CHECK_THAT(text, llmretry_catch::contains(line + "\n")); };
  has("# TYPE llm_batch_lines_total counter");
  has(R"(llm_batch_lines_total{outcome="answered",priority="batch",tenant="acme"} 4)");
  has(R"(llm_batch_lines_total{outcome="failed",priority="batch",tenant="acme"} 1)");
  has("# TYPE llm_batch_lines_remaining gauge");
  has(R"(llm_batch_lines_remaining{priority="batch",tenant="acme"} 0)");
  has(R"(llm_requests_total{provider="openai",model="loopback",status="success"} 4)");
  has(R"(llm_requests_total{provider="openai",model="loopback",status="not_retryable"} 1)");
  has(R"(llm_retries_total{provider="openai",model="loopback",error_type="rate_limited"} 1)");
  has(R"(llm_rate_limit_hits_total{provider="openai",model="loopback",limit_type="unknown"} 1)");
  has(R"(llm_queue_depth{priority="batch",task_type="chat"} 0)");
  has(R"(llm_queue_wait_seconds_count{priority="batch",task_type="chat"} 5)");
  has(R"(llm_queue_wait_seconds_bucket{priority="batch",task_type="chat",le="+Inf"} 5)");
  // The tokens are those of the summary: reserved for each of the 6 requests sent, used by the 4 answers.
  const long long reserved = summary_number(child.err(), "tokens: ", "reserved");
  const long long used = summary_number(child.err(), "tokens: ", "used");
  CHECK(reserved > 0);
  CHECK(used > 0);
  has(R"(llm_tokens_reserved_total{provider="openai",model="loopback"} )" + std::to_string(reserved));
  has(R"(llm_tokens_used_total{provider="openai",model="loopback"} )" + std::to_string(used));
  CHECK(text.find("llm_requests_total{provider=\"openai\",model=\"loopback\",status=\"gave_up\"}") ==
        std::string::npos);

  // Replaced whole: the earlier version is still under its other name, no new version left beside it.
  CHECK(llmretry_test::read_file(dir / "earlier.prom") == "# an earlier version\n");
  CHECK(files_beginning(dir, "metrics.prom") == std::vector<std::string>{"metrics.prom"});
}

TEST_CASE("--metrics-file: without --tenant the tenant label is empty; the file is written while the run goes on") {
  LoopbackProvider provider;
  provider.enforce(limits());
  provider.then(LoopbackProvider::hang(60s));  // the first request holds the run open a minute
  const auto dir = work_dir("metrics_file_periodic");
  const auto metrics = dir / "metrics.prom";
  Child child(
      {write_input(dir, 3), (dir / "output.jsonl").string(), "--concurrency", "2", "--metrics-file", metrics.string()},
      provider.base_url(), dir);
  // The two other lines are answered at once; a later version of the file says so while the first hangs.
  const std::string answered = R"(llm_batch_lines_total{outcome="answered",priority="interactive",tenant=""} 2)";
  bool seen = false;
  while (!seen && !child.ended()) {
    seen = llmretry_test::read_file(metrics).find(answered) != std::string::npos;
    if (!seen) std::this_thread::sleep_for(20ms);
  }
  CHECK(seen);
  CHECK(!child.ended());  // written every few seconds, not only at exit
  const std::string text = llmretry_test::read_file(metrics);
  CHECK_THAT(text, llmretry_catch::contains(R"(llm_batch_lines_remaining{priority="interactive",tenant=""} 1)"));
  CHECK_THAT(text, llmretry_catch::contains(R"(llm_queue_depth{priority="interactive",task_type="chat"} 0)"));
  if (!child.ended()) child.kill_now();
}

TEST_CASE("--metrics-file naming a directory, a link or a file of the run is refused with status 2, untouched") {
  LoopbackProvider provider;
  const auto dir = work_dir("metrics_file_refused");
  const std::string input = write_input(dir, 3);
  const std::string output = (dir / "output.jsonl").string();
  const auto taken = dir / "taken";
  std::filesystem::create_directories(taken / "inside");
  std::ofstream(dir / "target.prom") << "someone else's\n";
  std::filesystem::create_symlink(dir / "target.prom", dir / "link.prom");
  const auto refused = [&](const std::vector<std::string>& arguments, const std::string& message) {
    Child child(arguments, provider.base_url(), dir);
    CHECK(child.wait() == 2);
    INFO(child.err());
    CHECK_THAT(child.err(), llmretry_catch::contains(message));
  };
  refused({input, output, "--metrics-file", taken.string()},
          "--metrics-file " + taken.string() + ": not a regular file");
  refused({input, output, "--metrics-file", (dir / "link.prom").string()}, "link.prom: not a regular file");
  refused({input, output, "--metrics-file", input}, "--metrics-file " + input + " is the file " + input);
  // OUTPUT and the errors file of a first run do not exist yet: refused by name.
  refused({input, output, "--metrics-file", output}, "--metrics-file " + output + " is the file " + output);
  refused({input, output, "--metrics-file", (dir / "." / "output.errors.jsonl").string()},
          "is the file " + (dir / "output.errors.jsonl").string());
  // A relative OUTPUT that does not exist yet, and the metrics file spelled another way.
  const std::string fresh = std::filesystem::relative(dir / "fresh.jsonl").string();
  const std::string fresh_errors = std::filesystem::relative(dir / "fresh.errors.jsonl").string();
  refused({input, fresh, "--metrics-file", "./" + fresh}, "--metrics-file ./" + fresh + " is the file " + fresh);
  refused({input, fresh, "--metrics-file", "./" + fresh_errors},
          "--metrics-file ./" + fresh_errors + " is the file " + fresh_errors);
  CHECK_FALSE(std::filesystem::exists(dir / "fresh.jsonl"));
  CHECK_FALSE(std::filesystem::exists(output));
  refused({input, output, "--metrics-file", (dir / "nowhere" / "metrics.prom").string()},
          "nowhere/metrics.prom: cannot write its new version beside it");
#if LLMRETRY_BATCH_TEST_REDIS
  refused({"work", "--redis", "redis://127.0.0.1:1", "--batch", "b", "--metrics-file", taken.string()},
          "--metrics-file " + taken.string() + ": not a regular file");
#endif
  CHECK(std::filesystem::is_directory(taken / "inside"));
  CHECK(llmretry_test::read_file(dir / "target.prom") == "someone else's\n");
  CHECK(std::filesystem::is_symlink(dir / "link.prom"));
  CHECK(provider.request_count() == 0);
}

#if LLMRETRY_BATCH_TEST_REDIS
namespace {

/// Returns "redis://127.0.0.1:PORT" for `server`.
std::string url_of(const llmretry::testing::RedisServer& server) {
  return "redis://127.0.0.1:" + std::to_string(server.port());
}

/// Returns how many jobs are taken (held by a worker) in every batch queue on `server`.
long long taken_jobs(const llmretry::testing::RedisServer& server) {
  llmretry::redis::Connection connection(server.connection_options());
  const auto keys = connection.command("keys", {"KEYS", "llmretry:queue:*:taken"});
  long long taken = 0;
  for (std::size_t i = 0; i < keys.size(); ++i)
    taken += connection.command("zcard", {"ZCARD", keys[i].text()}).integer();
  return taken;
}

}  // namespace

TEST_CASE("--redis: every line answered once, a rerun sends nothing", "[redis]") {
  llmretry::testing::RedisServer server;
  LoopbackProvider provider;
  provider.enforce(limits());
  const auto dir = work_dir("redis");
  const std::string input = write_input(dir, 300);
  const std::vector<std::string> arguments{
      input, (dir / "output.jsonl").string(), "--concurrency", "8", "--redis", url_of(server)};
  Child first(arguments, provider.base_url(), dir);
  REQUIRE(first.wait() == 0);
  INFO(first.out() << first.err());
  check_answered_once(dir, 300);
  CHECK(provider.served() == 300);
  CHECK(taken_jobs(server) == 0);

  const std::size_t sent = provider.request_count();
  Child rerun(arguments, provider.base_url(), dir);
  CHECK(rerun.wait() == 0);
  CHECK(provider.request_count() == sent);
  CHECK(rerun.err().find("requests: 0 sent") != std::string::npos);
}

TEST_CASE("--redis: processes on one key pace as one, from limits they learn", "[redis][fleet]") {
  // 6,000 requests a minute enforced per second (100 a second, 100 at once), tokens to spare; no limit given
  // to the processes: they learn it from the provider's headers, through the one Redis they share.
  LoopbackLimits shared_limits;
  shared_limits.requests_per_minute = 6'000;
  shared_limits.tokens_per_minute = 6'000'000;
  shared_limits.latency = 10ms;
  for (const int processes : {2, 4}) {
    DYNAMIC_SECTION(processes << " processes of 300 lines each") {
      llmretry::testing::RedisServer server;
      LoopbackProvider provider;
      provider.enforce(shared_limits);
      std::vector<std::filesystem::path> dirs;
      std::vector<std::unique_ptr<Child>> children;
      const auto start = std::chrono::steady_clock::now();
      for (int p = 0; p < processes; ++p) {
        dirs.push_back(work_dir("fleet-" + std::to_string(processes) + "-" + std::to_string(p)));
        const std::string input = write_input(dirs.back(), 300);
        children.push_back(
            std::make_unique<Child>(std::vector<std::string>{input, (dirs.back() / "output.jsonl").string(),
                                                             "--concurrency", "8", "--redis", url_of(server)},
                                    provider.base_url(), dirs.back()));
      }
      for (auto& child : children) {
        INFO(child->out() << child->err());
        CHECK(child->wait() == 0);
      }
      const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
      for (const auto& dir : dirs) check_answered_once(dir, 300);
      const auto requests = static_cast<double>(provider.request_count());
      const double share_429 = static_cast<double>(provider.refused()) / requests;
      // The bound the limit sets: the first 100 at once, then 100 a second.
      const double bound = (300.0 * processes - 100.0) / 100.0;
      WARN(processes << " processes: " << requests << " requests, " << provider.refused() << " answered 429 ("
                     << 100 * share_429 << " %), " << took.count() << " s for a bound of " << bound << " s ("
                     << took.count() / bound << "x)");
      CHECK(provider.served() == 300 * processes);
      // Under a sanitizer requests reach the provider late after their reservation, some of them together;
      // processes pacing alone would see about a third refused.
      CHECK(share_429 <= (llmretry_test::time_scale == 1 ? 0.02 : 0.10));
    }
  }
}

TEST_CASE("--redis: killed with SIGKILL mid-run and run again at once: each line once, no completed request resent",
          "[redis]") {
  llmretry::testing::RedisServer server;
  LoopbackProvider provider;
  provider.enforce(limits());
  const auto dir = work_dir("redis_killed");
  const std::string input = write_input(dir, 400);
  const std::vector<std::string> arguments{
      input, (dir / "output.jsonl").string(), "--concurrency", "8", "--redis", url_of(server)};
  Child first(arguments, provider.base_url(), dir);
  wait_for_lines(first, dir / "output.jsonl", 100);
  first.kill_now();
  const std::size_t sent_before = provider.request_count();
  // The jobs the dead run held: without reclaiming them, the rerun would wait 90 s (the visibility timeout).
  const long long held = taken_jobs(server);
  REQUIRE(held > 0);  // else the rerun's reclaim would be checked on nothing
  std::set<std::string> completed;
  std::map<std::string, std::string> key_of;
  for (const auto& request : batch::read_input(input, provider.base_url())) key_of[request.custom_id] = request.key;
  for (const auto& line : lines_of(dir / "output.jsonl")) completed.insert(key_of.at(line.at("custom_id")));

  Child rerun(arguments, provider.base_url(), dir);
  CHECK(rerun.wait() == 0);
  INFO(rerun.out() << rerun.err());
  check_answered_once(dir, 400);
  CHECK(rerun.err().find("(" + std::to_string(held) + " of its jobs reclaimed)") != std::string::npos);
  const auto resent = keys_received(provider, sent_before);
  std::size_t resent_completed = 0;
  for (const auto& key : resent) resent_completed += completed.count(key);
  std::printf("llmretry-batch --redis killed after %zu lines, holding %lld jobs; rerun: %zu requests\n%s",
              completed.size(), held, resent.size(), rerun.err().c_str());
  CHECK(resent_completed == 0);
  CHECK(std::set<std::string>(resent.begin(), resent.end()).size() == 400 - completed.size());
  CHECK(taken_jobs(server) == 0);
}

TEST_CASE("--redis: a request that may have run before its last failure stays in flight", "[redis]") {
  llmretry::testing::RedisServer server;
  LoopbackProvider provider;
  provider.then(LoopbackProvider::service_unavailable());  // may have been processed (and billed)
  provider.then(LoopbackProvider::rate_limit_exceeded("requests", std::chrono::hours{1}));  // refused, no work
  const auto dir = work_dir("redis-in-flight");
  const std::string path = (dir / "input.jsonl").string();
  std::ofstream(path) << R"({"custom_id":"once","method":"POST","url":"/v1/chat/completions","body":{}})" << '\n';
  Child child({path, (dir / "output.jsonl").string(), "--concurrency", "1", "--redis", url_of(server)},
              provider.base_url() + "/v1/", dir);
  CHECK(child.wait() == 1);
  INFO(child.out() << child.err());
  const auto errors = lines_of(dir / "output.errors.jsonl");
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].at("error").at("stop_reason") == "provider_wait_too_long");
  CHECK(provider.request_count() == 2);
  llmretry::redis::Connection connection(server.connection_options());
  const auto keys = connection.command("keys", {"KEYS", "llmretry:op:*"});
  REQUIRE(keys.size() == 1);
  // The last failure did no work, but the 503 before it may have: not "failed", which may begin again as new.
  CHECK(connection.command("hget", {"HGET", keys[0].text(), "status"}).text() == "in_flight");
}

TEST_CASE("--redis: a second llmretry-batch on the same output is refused while the first runs", "[redis]") {
  llmretry::testing::RedisServer server;
  LoopbackProvider provider;
  provider.enforce(limits());
  // The first answer at once, then the next ones (the other requests in flight) after 2 s: the first run has
  // written a line, and holds the lock, well before it can end, so the second certainly starts while it runs.
  provider.then(LoopbackProvider::chat_completion("first"));
  for (int i = 0; i < 16; ++i) provider.then(LoopbackProvider::hang(2s));
  const auto dir = work_dir("redis_two");
  const auto second_dir = work_dir("redis_two_second");  // its own stdout and stderr
  const std::string input = write_input(dir, 300);
  const std::vector<std::string> arguments{
      input, (dir / "output.jsonl").string(), "--concurrency", "8", "--redis", url_of(server)};
  Child first(arguments, provider.base_url(), dir);
  wait_for_lines(first, dir / "output.jsonl", 1);  // it holds the lock
  Child second(arguments, provider.base_url(), second_dir);
  CHECK(second.wait() == 2);
  CHECK(line_count(dir / "output.jsonl") < 300);  // the first run was still running
  CHECK_THAT(second.err(), llmretry_catch::contains("output.jsonl: in use by another llmretry-batch"));
  REQUIRE(first.wait() == 0);
  check_answered_once(dir, 300);
  CHECK(provider.served() == 300);
}
TEST_CASE("--redis: the queue flushed mid-run stops the run with status 3 naming the cause; a rerun resumes",
          "[redis]") {
  llmretry::testing::RedisServer server;
  LoopbackProvider provider;
  provider.enforce(limits());
  const auto dir = work_dir("redis_flushed");
  const std::vector<std::string> arguments{
      write_input(dir, 2000), (dir / "output.jsonl").string(), "--concurrency", "8", "--redis", url_of(server)};
  Child first(arguments, provider.base_url(), dir);
  wait_for_lines(first, dir / "output.jsonl", 200);
  llmretry::redis::Connection connection(server.connection_options());
  (void)connection.command("flushall", {"FLUSHALL"});
  const std::optional<int> status = first.wait_for(llmretry_test::scaled(30s));
  REQUIRE(status.has_value());  // not polling forever
  CHECK(*status == 3);
  CHECK_THAT(first.err(), llmretry_catch::contains("jobs were lost"));

  Child rerun(arguments, provider.base_url(), dir);
  CHECK(rerun.wait() == 0);
  check_answered_once(dir, 2000);
}

TEST_CASE("--redis: --fresh forgets the batch's records, so that a batch whose files were moved away runs again",
          "[redis]") {
  llmretry::testing::RedisServer server;
  LoopbackProvider provider;
  provider.enforce(limits());
  const auto dir = work_dir("redis_fresh");
  const std::vector<std::string> arguments{write_input(dir, 5), (dir / "output.jsonl").string(), "--redis",
                                           url_of(server)};
  Child first(arguments, provider.base_url(), dir);
  REQUIRE(first.wait() == 0);
  std::filesystem::rename(dir / "output.jsonl", dir / "first.jsonl");

  Child again(arguments, provider.base_url(), dir);  // Redis remembers every request completed
  CHECK(again.wait() == 1);
  const auto errors = lines_of(dir / "output.errors.jsonl");
  REQUIRE(errors.size() == 5);
  CHECK(errors[0].at("error").at("code") == "already_completed");
  CHECK(provider.request_count() == 5);

  auto fresh = arguments;
  fresh.emplace_back("--fresh");
  Child afresh(fresh, provider.base_url(), dir);
  CHECK(afresh.wait() == 0);
  INFO(afresh.err());
  CHECK(provider.request_count() == 10);
  check_answered_once(dir, 5);
}

namespace {

/// Submits `lines` requests (write_input, in `dir`) to `server` as batch `name`; REQUIREs that it succeeds.
void submit_batch(const llmretry::testing::RedisServer& server, const LoopbackProvider& provider,
                  const std::filesystem::path& dir, int lines, const std::string& name) {
  Child submitted({"submit", write_input(dir, lines), "--redis", url_of(server), "--batch", name}, provider.base_url(),
                  dir);
  REQUIRE(submitted.wait() == 0);
}

/// The job queue of the fleet batch `name` on `server`, as llmretry-batch names it.
struct FleetQueue {
  FleetQueue(const llmretry::testing::RedisServer& server, const std::string& name)
      : connection(server.connection_options()), queue(connection, "fleet:" + name) {}
  /// Returns the ids (Idempotency-Keys) of every result kept.
  std::set<std::string> finished() {
    std::set<std::string> ids;
    std::string cursor;
    do {
      auto page = queue.results(cursor, 500);
      for (const auto& result : page.results) ids.insert(result.id);
      cursor = page.cursor;
    } while (!cursor.empty());
    return ids;
  }
  llmretry::redis::Connection connection;
  llmretry::redis::JobQueue queue;
};

}  // namespace

TEST_CASE("fleet: bad usage, an unknown batch, a bad input or a file not to replace: status 2, nothing destroyed",
          "[redis]") {
  llmretry::testing::RedisServer server;
  LoopbackProvider provider;
  const auto dir = work_dir("fleet_usage");
  const std::string input = write_input(dir, 3);
  const std::string before = llmretry_test::read_file(input);
  const std::string redis = url_of(server);
  const auto refused = [&](const std::vector<std::string>& arguments, const std::string& message) {
    Child child(arguments, provider.base_url(), dir);
    CHECK(child.wait() == 2);
    INFO(child.err());
    CHECK_THAT(child.err(), llmretry_catch::contains(message));
  };
  refused({"submit", input, "--redis", redis}, "--batch is required");
  refused({"submit", input, "--batch", "b"}, "--redis is required");
  refused({"submit", "--redis", redis, "--batch", "b"}, "INPUT is required");
  refused({"submit", input, "--redis", redis, "--batch", "no/slash"}, "--batch: \"no/slash\"");
  refused({"work", "--redis", redis, "--batch", "b", "--lease", "soon"}, "--lease: \"soon\" is not a duration");
  refused({"work", "--redis", redis, "--batch", "b", "--lease", "10ms"}, "--lease: 10ms is outside 300ms to 1h");
  refused({"work", "--redis", redis, "--batch", "b", "--redis-timeout", "500"}, "--redis-timeout: \"500\" has no unit");
  refused({"status", "--redis", redis, "--batch", "b", "--redis-timeout", "5ms"},
          "--redis-timeout: 5ms is outside 10ms to 10m");
  refused({"submit", input, "--redis", redis, "--batch", "b", "--redis-timeout", "11m"},
          "--redis-timeout: 11m is outside 10ms to 10m");
  refused({"work", "--redis", "http://x", "--batch", "b"}, "--redis");
  refused({"work", "--redis", redis, "--batch", "never-submitted"}, "no such batch in Redis");
  refused({"collect", "--redis", redis, "--batch", "never-submitted", "out.jsonl"}, "no such batch in Redis");
  refused({"status", "--redis", redis, "--batch", "never-submitted"}, "no such batch in Redis");
  refused({"collect", "--redis", redis, "--batch", "b"}, "OUTPUT is required");
  refused({"work", "--redis", redis, "--batch", "b", "--bogus"}, "--bogus");
  refused({"work", "--redis", redis, "--batch", "b", "--max-attempts", "0"}, "--max-attempts");

  const std::string bad = (dir / "bad.jsonl").string();
  std::ofstream(bad) << R"({"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{}})" << '\n'
                     << R"({"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{}})" << '\n';
  refused({"submit", bad, "--redis", redis, "--batch", "b"}, "bad.jsonl:2: custom_id: \"a\" is already used on line 1");

  Child submitted({"submit", input, "--redis", redis, "--batch", "b"}, provider.base_url(), dir);
  REQUIRE(submitted.wait() == 0);
  refused({"submit", (dir / "bad.jsonl").string(), "--redis", redis, "--batch", "b"}, "bad.jsonl:2");
  const std::string other = (dir / "other.jsonl").string();
  std::ofstream(other) << R"({"custom_id":"z","method":"POST","url":"/v1/chat/completions","body":{}})" << '\n';
  refused({"submit", other, "--redis", redis, "--batch", "b"}, "--batch b: already holds another input");

  provider.enforce(limits());
  Child worker({"work", "--redis", redis, "--batch", "b", "--concurrency", "2"}, provider.base_url(), dir);
  REQUIRE(worker.wait() == 0);
  // collect never replaces what is not Batch output (the input, here), nor a device.
  refused({"collect", "--redis", redis, "--batch", "b", input}, "input.jsonl:1: not a line of the Batch output format");
  CHECK(llmretry_test::read_file(input) == before);
  refused({"collect", "--redis", redis, "--batch", "b", "/dev/null"}, "/dev/null: not a regular file");
  refused({"collect", "--redis", redis, "--batch", "b", (dir / "out.jsonl").string(), "--errors", input},
          "input.jsonl:1: not a line of the Batch output format");
  CHECK(llmretry_test::read_file(input) == before);
  Child collected({"collect", "--redis", redis, "--batch", "b", (dir / "output.jsonl").string()}, provider.base_url(),
                  dir);
  CHECK(collected.wait() == 0);
  check_answered_once(dir, 3);
  Child again({"collect", "--redis", redis, "--batch", "b", (dir / "output.jsonl").string()}, provider.base_url(), dir);
  CHECK(again.wait() == 0);  // an earlier collect's output is replaced whole: still one line each
  check_answered_once(dir, 3);
  CHECK(provider.served() == 3);
}

TEST_CASE("--redis: a run lease held by another host refuses the single form with status 2", "[redis]") {
  llmretry::testing::RedisServer server;
  LoopbackProvider provider;
  const auto dir = work_dir("run_lease");
  const std::string input = write_input(dir, 3);
  const std::string output = (dir / "output.jsonl").string();
  const std::string fingerprint = llmretry::store::fingerprint(std::filesystem::absolute(output).string());
  const std::string name = "batch:" + fingerprint.substr(fingerprint.find(':') + 1, 16);
  llmretry::redis::Connection connection(server.connection_options());
  llmretry::redis::IdempotencyStore leases(connection);
  REQUIRE(leases.claim("run:" + name, "llmretry-batch run", "host:another-host").status ==
          llmretry::store::ClaimStatus::claimed);
  Child refused({input, output, "--redis", url_of(server)}, provider.base_url(), dir);
  CHECK(refused.wait() == 2);
  CHECK_THAT(refused.err(), llmretry_catch::contains("in use by another llmretry-batch on another host"));
  CHECK(provider.request_count() == 0);

  REQUIRE(leases.release("run:" + name, "host:another-host"));
  provider.enforce(limits());
  Child runs({input, output, "--redis", url_of(server)}, provider.base_url(), dir);
  CHECK(runs.wait() == 0);
  check_answered_once(dir, 3);
}

TEST_CASE("fleet: 1,200 lines, 3 workers, one killed with SIGKILL a third of the way, a fourth started later",
          "[redis][workers]") {
  llmretry::testing::RedisServer server;
  // 6,000 requests a minute enforced per second (100 a second): the batch takes about 12 s, so that the
  // kill and the fourth worker land in its middle.
  LoopbackLimits fleet_limits;
  fleet_limits.requests_per_minute = 6'000;
  fleet_limits.tokens_per_minute = 6'000'000;
  fleet_limits.latency = 10ms;
  LoopbackProvider provider;
  provider.enforce(fleet_limits);
  const auto dir = work_dir("fleet_workers");
  const std::string input = write_input(dir, 1200);
  const std::string redis = url_of(server);
  const std::vector<std::string> submit{"submit", input, "--redis", redis, "--batch", "tickets"};
  Child first_submit(submit, provider.base_url(), dir);
  REQUIRE(first_submit.wait() == 0);
  CHECK_THAT(first_submit.err(), llmretry_catch::contains("1200 enqueued now"));
  Child second_submit(submit, provider.base_url(), dir);
  REQUIRE(second_submit.wait() == 0);
  CHECK_THAT(second_submit.err(), llmretry_catch::contains("0 enqueued now, 1200 already there or done"));
  FleetQueue fleet(server, "tickets");
  CHECK(fleet.queue.counts().ready == 1200);

  // A lease short enough for the test, long enough that a live worker always renews it in time (scaled for
  // sanitizer builds, whose workers run slower).
  const std::string lease = std::to_string(llmretry_test::scaled(std::chrono::seconds{3}).count()) + "s";
  const std::string redis_wait = std::to_string(llmretry_test::scaled(std::chrono::seconds{30}).count()) + "s";
  const std::vector<std::string> work{"work", "--redis", redis, "--batch",      "tickets", "--concurrency",
                                      "4",    "--lease", lease, "--redis-wait", redis_wait};
  std::vector<std::unique_ptr<Child>> workers;
  for (int w = 0; w < 4; ++w) std::filesystem::create_directories(dir / ("worker-" + std::to_string(w)));
  for (int w = 0; w < 3; ++w)
    workers.push_back(std::make_unique<Child>(work, provider.base_url(), dir / ("worker-" + std::to_string(w))));

  while (fleet.queue.counts().done < 400) std::this_thread::sleep_for(5ms);
  // Before the end: collect writes nothing and says so; status prints the counts.
  Child early({"collect", "--redis", redis, "--batch", "tickets", (dir / "output.jsonl").string()}, provider.base_url(),
              dir);
  CHECK(early.wait() == 4);
  CHECK_THAT(early.err(), llmretry_catch::contains("batch tickets is not finished"));
  CHECK_FALSE(std::filesystem::exists(dir / "output.jsonl"));
  Child status({"status", "--redis", redis, "--batch", "tickets"}, provider.base_url(), dir / "worker-3");
  CHECK(status.wait() == 0);
  INFO(status.out());
  CHECK_THAT(status.out(), llmretry_catch::contains("batch tickets: 1200 lines"));
  CHECK_THAT(status.out(), llmretry_catch::contains("workers alive 3"));
  CHECK_THAT(status.out(), llmretry_catch::contains("in flight"));
  CHECK_THAT(status.out(), llmretry_catch::contains("ETA"));

  workers[0]->kill_now();
  const auto held_at_kill = fleet.queue.counts().taken;
  const std::set<std::string> completed = fleet.finished();  // before the count: no false alarm
  const std::size_t sent_before = provider.request_count();
  workers.push_back(std::make_unique<Child>(work, provider.base_url(), dir / "worker-3"));
  for (std::size_t w = 1; w < workers.size(); ++w) {
    const std::optional<int> exit = workers[w]->wait_for(llmretry_test::scaled(90s));
    REQUIRE(exit.has_value());
    INFO(workers[w]->err());
    CHECK(*exit == 0);
    // A live worker renews its jobs: none of them was taken by another worker.
    CHECK_THAT(workers[w]->err(), llmretry_catch::contains("; 0 jobs lost to other workers"));
  }

  Child collected({"collect", "--redis", redis, "--batch", "tickets", (dir / "output.jsonl").string()},
                  provider.base_url(), dir);
  CHECK(collected.wait() == 0);
  check_answered_once(dir, 1200);

  std::map<std::string, std::string> key_of;
  std::set<std::string> keys;
  for (const auto& request : batch::read_input(input, provider.base_url())) keys.insert(request.key);
  std::map<std::string, int> sent_per_key;
  for (const auto& key : keys_received(provider, 0)) {
    CHECK(keys.count(key) == 1);  // every attempt under its request's own key
    ++sent_per_key[key];
  }
  CHECK(sent_per_key.size() == 1200);
  std::size_t resent_completed = 0;
  for (const auto& key : keys_received(provider, sent_before)) resent_completed += completed.count(key);
  CHECK(resent_completed == 0);  // no request that completed was sent again
  // Served twice: at most the killed worker's requests in flight (its concurrency), none of them completed
  // twice (each custom_id has one line).
  const std::int64_t served_twice = provider.served() - 1200;
  const double share_429 = static_cast<double>(provider.refused()) / static_cast<double>(provider.request_count());
  WARN("fleet of 3 + 1 workers, 1,200 lines: "
       << provider.request_count() << " requests, " << provider.refused() << " answered 429 (" << 100 * share_429
       << " %), " << served_twice << " served twice (in flight at the kill), " << held_at_kill
       << " jobs held at the kill, " << completed.size() << " completed before it");
  CHECK(served_twice >= 0);
  CHECK(served_twice <= 4);
  CHECK(share_429 <= (llmretry_test::time_scale == 1 ? 0.02 : 0.10));  // sanitizers: see the test above
  const auto counts = fleet.queue.counts();
  CHECK(counts.done == 1200);
  CHECK(counts.ready + counts.delayed + counts.taken + counts.dead == 0);
}

TEST_CASE(
    "fleet: Redis killed mid-run and restarted from its append-only file: workers ride it out, none hangs, "
    "every line answered once",
    "[redis][workers]") {
  llmretry::testing::RedisServerOptions persisted;
  persisted.append_only = true;
  llmretry::testing::RedisServer server(persisted);
  LoopbackLimits fleet_limits;
  fleet_limits.requests_per_minute = 6'000;
  fleet_limits.tokens_per_minute = 6'000'000;
  fleet_limits.latency = 10ms;
  LoopbackProvider provider;
  provider.enforce(fleet_limits);
  const auto dir = work_dir("fleet_redis_restart");
  const std::string input = write_input(dir, 600);
  const std::string redis = url_of(server);
  Child submitted({"submit", input, "--redis", redis, "--batch", "tickets"}, provider.base_url(), dir);
  REQUIRE(submitted.wait() == 0);

  const std::string lease = std::to_string(llmretry_test::scaled(std::chrono::seconds{3}).count()) + "s";
  const std::string redis_wait = std::to_string(llmretry_test::scaled(std::chrono::seconds{30}).count()) + "s";
  const std::vector<std::string> work{"work", "--redis", redis, "--batch",      "tickets", "--concurrency",
                                      "4",    "--lease", lease, "--redis-wait", redis_wait};
  const auto run_workers = [&](const std::string& round) {
    std::vector<std::unique_ptr<Child>> workers;
    for (int w = 0; w < 2; ++w) {
      const auto worker_dir = dir / (round + "-" + std::to_string(w));
      std::filesystem::create_directories(worker_dir);
      workers.push_back(std::make_unique<Child>(work, provider.base_url(), worker_dir));
    }
    return workers;
  };
  auto first = run_workers("first");
  std::size_t done_at_kill = 0;
  {
    FleetQueue fleet(server, "tickets");
    const auto give_up = std::chrono::steady_clock::now() + llmretry_test::scaled(60s);
    while ((done_at_kill = fleet.queue.counts().done) < 200 && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(5ms);
  }
  server.kill();
  server.restart();
  CHECK(done_at_kill < 600);  // killed mid-run
  std::string exits;
  for (auto& worker : first) {
    const std::optional<int> exit = worker->wait_for(llmretry_test::scaled(60s));
    REQUIRE(exit.has_value());  // no worker hangs
    INFO(worker->err());
    CHECK(*exit == 0);  // rode out the restart
    exits.append(" ").append(std::to_string(*exit));
  }
  WARN("Redis killed at " << done_at_kill << " of 600 lines done; the first workers exited with" << exits);
  auto second = run_workers("second");  // what the first left: its jobs come back once their lease lapses
  for (auto& worker : second) {
    const std::optional<int> exit = worker->wait_for(llmretry_test::scaled(60s));
    REQUIRE(exit.has_value());
    INFO(worker->err());
    CHECK(*exit == 0);
  }
  Child collected({"collect", "--redis", redis, "--batch", "tickets", (dir / "output.jsonl").string()},
                  provider.base_url(), dir);
  CHECK(collected.wait() == 0);
  check_answered_once(dir, 600);
  // Served twice: at most the requests in flight when Redis went away (2 workers of 4), each under its key.
  CHECK(provider.served() - 600 <= 8);
}

TEST_CASE(
    "fleet: Redis silent mid-run, a worker under --redis-wait 1s: stops with the default --redis-timeout, "
    "waits it out with a longer one",
    "[redis][workers]") {
  for (const bool longer : {false, true}) {
    // Each command may wait 10 s then (scaled, within the option's 10 min): 2.5 s of silence stays inside it,
    // while with the default 1 s it is an outage longer than --redis-wait.
    const auto timeout = std::min<std::chrono::milliseconds>(llmretry_test::scaled(10s), 10min);
    INFO((longer ? "--redis-timeout " + std::to_string(timeout.count()) + "ms" : std::string("the default")));
    llmretry::testing::RedisServer server;
    LoopbackProvider provider;
    LoopbackLimits limits;
    limits.requests_per_minute = 6'000;
    limits.tokens_per_minute = 6'000'000;
    limits.latency = 20ms;
    provider.enforce(limits);
    const auto dir = work_dir(longer ? "fleet_redis_slow" : "fleet_redis_hung");
    const std::string input = write_input(dir, 300);
    const std::string redis = url_of(server);
    Child submitted({"submit", input, "--redis", redis, "--batch", "tickets"}, provider.base_url(), dir);
    REQUIRE(submitted.wait() == 0);
    std::vector<std::string> arguments{"work", "--redis", redis, "--batch", "tickets"};
    arguments.insert(arguments.end(), {"--concurrency", "2", "--redis-wait", "1s"});
    if (longer) arguments.insert(arguments.end(), {"--redis-timeout", std::to_string(timeout.count()) + "ms"});
    Child worker(arguments, provider.base_url(), dir);
    {
      FleetQueue fleet(server, "tickets");
      const auto give_up = std::chrono::steady_clock::now() + llmretry_test::scaled(60s);
      while (fleet.queue.counts().done < 20 && std::chrono::steady_clock::now() < give_up)
        std::this_thread::sleep_for(5ms);
    }
    server.pause();  // connections stay open, nothing answers
    if (longer) {
      std::this_thread::sleep_for(2500ms);  // on purpose: 1.5 s past the default timeout
      server.resume();
    }
    const std::optional<int> exit = worker.wait_for(llmretry_test::scaled(60s));
    server.resume();
    REQUIRE(exit.has_value());  // it does not hang
    INFO(worker.err());
    if (longer) {
      CHECK(*exit == 0);
      FleetQueue fleet(server, "tickets");
      CHECK(fleet.queue.counts().done == 300);
    } else {
      CHECK(*exit == 3);
      CHECK(worker.err().find("stopped: redis") != std::string::npos);
      CHECK(worker.err().find("timeout") != std::string::npos);
    }
  }
}

TEST_CASE("fleet: SIGTERM while Redis is down: a worker still records the answers that came, once Redis is back",
          "[redis][workers]") {
  llmretry::testing::RedisServerOptions persisted;
  persisted.append_only = true;
  llmretry::testing::RedisServer server(persisted);
  LoopbackProvider provider;
  LoopbackLimits slow = limits();
  slow.latency = 1500ms;  // the answers come while Redis is down
  provider.enforce(slow);
  const auto dir = work_dir("fleet_stopped_in_outage");
  submit_batch(server, provider, dir, 4, "t");
  Child worker({"work", "--redis", url_of(server), "--batch", "t", "--concurrency", "4", "--redis-wait", "1m"},
               provider.base_url(), dir);
  wait_until([&] { return provider.request_count() == 4; }, 30s);
  server.kill();  // before the answers come: recording them fails until it is back
  worker.signal(SIGTERM);
  std::this_thread::sleep_for(3s);  // on purpose: the answers come, and their recording fails at least once
  server.restart();
  const std::optional<int> status = worker.wait_for(llmretry_test::scaled(60s));
  REQUIRE(status);
  INFO(worker.err());
  CHECK(*status == 143);
  CHECK(worker.ended_by_signal());
  FleetQueue fleet(server, "t");
  CHECK(fleet.queue.counts().done == 4);  // every answer paid for is recorded
  CHECK(provider.request_count() == 4);   // nothing more was sent
}

TEST_CASE("fleet: SIGTERM while a worker waits for capacity: the job it held is back in the queue at once",
          "[redis][workers]") {
  llmretry::testing::RedisServer server;
  LoopbackProvider provider;
  provider.enforce(limits());
  const auto dir = work_dir("fleet_handed_back");
  submit_batch(server, provider, dir, 3, "h");
  // One request a minute: the first goes at once, the second waits a minute for capacity.
  Child worker({"work", "--redis", url_of(server), "--batch", "h", "--concurrency", "2", "--rpm", "1"},
               provider.base_url(), dir);
  FleetQueue fleet(server, "h");
  wait_until([&] { return fleet.queue.counts().done == 1; }, 30s);
  std::this_thread::sleep_for(200ms);  // the second request is in its wait by then (it is not sent either way)
  worker.signal(SIGTERM);
  const std::optional<int> status = worker.wait_for(llmretry_test::scaled(30s));
  REQUIRE(status);
  CHECK(*status == 143);
  CHECK(worker.ended_by_signal());
  const auto counts = fleet.queue.counts();
  CHECK(counts.done == 1);
  CHECK(counts.taken == 0);  // nothing left held until a lease lapses
  CHECK(counts.ready + counts.delayed == 2);
  CHECK(provider.request_count() == 1);

  // Its pacing (one a minute) is kept in Redis under the name every worker of this provider shares, and workers
  // sharing it give it the same limits: forgotten, so that the next one paces afresh at its own.
  const auto paced = fleet.connection.command("keys", {"KEYS", "*limit:{*"});
  REQUIRE(paced.size() > 0);
  for (std::size_t i = 0; i < paced.size(); ++i) (void)fleet.connection.command("del", {"DEL", paced[i].text()});
  Child next({"work", "--redis", url_of(server), "--batch", "h", "--rpm", "30000"}, provider.base_url(), dir);
  CHECK(next.wait() == 0);
  CHECK(fleet.queue.counts().done == 3);
  CHECK(provider.request_count() == 3);
  INFO(next.err());
  // Neither job left was sent: none is counted as possibly sent by an earlier worker.
  CHECK_THAT(next.err(), llmretry_catch::contains(", 0 left in flight by an earlier run"));
}

TEST_CASE("fleet: work --metrics-file counts the worker's lines, with no remaining count of its own", "[redis]") {
  llmretry::testing::RedisServer server;
  LoopbackProvider provider;
  provider.enforce(limits());
  const auto dir = work_dir("fleet_metrics_file");
  submit_batch(server, provider, dir, 4, "m");
  const auto metrics = dir / "worker.prom";
  Child worker({"work", "--redis", url_of(server), "--batch", "m", "--concurrency", "2", "--priority", "standard",
                "--tenant", "team-b", "--metrics-file", metrics.string()},
               provider.base_url(), dir);
  REQUIRE(worker.wait() == 0);
  const std::string text = llmretry_test::read_file(metrics);
  INFO(text);
  CHECK_THAT(text, llmretry_catch::contains(
                       R"(llm_batch_lines_total{outcome="answered",priority="standard",tenant="team-b"} 4)"));
  CHECK_THAT(text,
             llmretry_catch::contains(R"(llm_requests_total{provider="openai",model="loopback",status="success"} 4)"));
  CHECK_THAT(text, llmretry_catch::contains(R"(llm_queue_wait_seconds_count{priority="standard",task_type="chat"} 4)"));
  CHECK_THAT(text, llmretry_catch::contains("# TYPE llm_batch_lines_remaining gauge\n"));
  CHECK(text.find("llm_batch_lines_remaining{") == std::string::npos);
  CHECK(files_beginning(dir, "worker.prom") == std::vector<std::string>{"worker.prom"});
}
#endif
