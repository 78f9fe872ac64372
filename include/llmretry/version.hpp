#ifndef LLMRETRY_VERSION_HPP
#define LLMRETRY_VERSION_HPP

/// The library version, in one place: CMake reads it from here.
#define LLMRETRY_VERSION_MAJOR 0
#define LLMRETRY_VERSION_MINOR 1
#define LLMRETRY_VERSION_PATCH 0

/// The version as one number: major * 10000 + minor * 100 + patch.
#define LLMRETRY_VERSION (LLMRETRY_VERSION_MAJOR * 10000 + LLMRETRY_VERSION_MINOR * 100 + LLMRETRY_VERSION_PATCH)

/// The inline namespace every name of the library is declared in, `v<major>_<minor>` (v0_1): code built
/// against two versions that may differ in layout (every 0.x minor, see docs/versioning.md) links as two
/// sets of names instead of mixing them. Spell the names `llmretry::X`, never with it.
#define LLMRETRY_ABI_NAMESPACE LLMRETRY_DETAIL_ABI_NAME(LLMRETRY_VERSION_MAJOR, LLMRETRY_VERSION_MINOR)
#define LLMRETRY_DETAIL_ABI_NAME(major, minor) LLMRETRY_DETAIL_ABI_PASTE(major, minor)
#define LLMRETRY_DETAIL_ABI_PASTE(major, minor) v##major##_##minor

/// Opens, and closes, namespace llmretry and its inline ABI namespace: every header's names are inside.
// One line each, for the tools that read this header line by line.
// clang-format off
#define LLMRETRY_BEGIN_NAMESPACE namespace llmretry { inline namespace LLMRETRY_ABI_NAMESPACE {
#define LLMRETRY_END_NAMESPACE } }
// clang-format on

#endif  // LLMRETRY_VERSION_HPP
