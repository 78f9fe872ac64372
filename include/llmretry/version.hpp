#ifndef LLMRETRY_VERSION_HPP
#define LLMRETRY_VERSION_HPP

/// The library version, in one place: CMake reads it from here.
#define LLMRETRY_VERSION_MAJOR 0
#define LLMRETRY_VERSION_MINOR 1
#define LLMRETRY_VERSION_PATCH 0

/// The version as one number: major * 10000 + minor * 100 + patch.
#define LLMRETRY_VERSION (LLMRETRY_VERSION_MAJOR * 10000 + LLMRETRY_VERSION_MINOR * 100 + LLMRETRY_VERSION_PATCH)

#endif  // LLMRETRY_VERSION_HPP
