#ifndef LLMRETRY_CURL_HPP
#define LLMRETRY_CURL_HPP

/// Calling a provider over HTTP with libcurl (target llmretry::curl): curl::Call, curl::Session, curl::Options,
/// curl::Response. Namespace llmretry::curl.

#include "curl/curl.hpp"

#endif  // LLMRETRY_CURL_HPP
