// Built with -fno-exceptions: the result-value style is the whole story. A plain program (no test
// framework, which needs exceptions) that returns non-zero on the first wrong answer.
#include <llmretry/llmretry.hpp>

#include <cstdio>
#include <random>
#include <vector>

namespace {
int failures = 0;

void expect(bool ok, const char* what) {
  std::printf("%s: %s\n", ok ? "pass" : "FAIL", what);
  if (!ok) ++failures;
}

struct RecordingSleep {
  std::vector<std::chrono::milliseconds>* waits;
  void operator()(std::chrono::milliseconds wait) const { waits->push_back(wait); }
};
}  // namespace

int main() {
  using namespace std::chrono_literals;
  llmretry::RetryPolicy policy;
  policy.jitter = llmretry::Jitter::none;

  std::vector<std::chrono::milliseconds> waits;
  int calls = 0;
  const auto ok = llmretry::call_with_retry(
      [&]() -> llmretry::Result<int> {
        if (++calls < 3) return llmretry::Error{llmretry::classify_status(503), "HTTP 503"};
        return 42;
      },
      policy, RecordingSleep{&waits}, std::mt19937_64{1});
  expect(ok.has_value() && *ok == 42, "retried until a value came back");
  expect(waits == std::vector<std::chrono::milliseconds>{500ms, 1s}, "waits 0.5 s then 1 s");

  llmretry::StopReason reason{};
  llmretry::CallOptions options;
  options.on_give_up = [&](const llmretry::GiveUp& info) { reason = info.reason; };
  calls = 0;
  const auto failed = llmretry::call_with_retry(
      [&]() -> llmretry::Result<void> {
        ++calls;
        return llmretry::Error{llmretry::classify_status(400), "HTTP 400"};
      },
      policy, RecordingSleep{&waits}, std::mt19937_64{1}, llmretry::NoRetryHook{}, options);
  expect(!failed.has_value() && calls == 1, "400 is not retried");
  expect(reason == llmretry::StopReason::not_retryable, "gave up as not retryable");

  std::printf("%d passed, %d failed\n", 4 - failures, failures);
  return failures == 0 ? 0 : 1;
}
