// The test runner's main: Catch2 v3 supplies its own (Catch2::Catch2WithMain is not needed for that
// reason: this file keeps one build for both versions).
#if LLMRETRY_CATCH2_MAJOR == 3
#include <catch2/catch_session.hpp>
int main(int argc, char* argv[]) { return Catch::Session().run(argc, argv); }
#else
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#endif
