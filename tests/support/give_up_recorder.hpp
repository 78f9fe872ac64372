// CallOptions whose on_give_up keeps the report, for tests that check why a call stopped.
#ifndef LLMRETRY_TESTS_GIVE_UP_RECORDER_HPP
#define LLMRETRY_TESTS_GIVE_UP_RECORDER_HPP

#include <llmretry/retry.hpp>

#include <optional>

struct GiveUpRecorder {
  GiveUpRecorder() {
    options.on_give_up = [this](const llmretry::GiveUp& report) { gave_up = report; };
  }
  GiveUpRecorder(const GiveUpRecorder&) = delete;
  GiveUpRecorder& operator=(const GiveUpRecorder&) = delete;

  llmretry::CallOptions options;
  std::optional<llmretry::GiveUp> gave_up;
};

#endif  // LLMRETRY_TESTS_GIVE_UP_RECORDER_HPP
