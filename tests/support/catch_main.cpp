// The test runners' main, the same for Catch2 3 (whose Catch2::Catch2 target has no main) and Catch2 2.
#if LLMRETRY_CATCH2_MAJOR == 3
#include <catch2/catch_session.hpp>
int main(int argc, char* argv[]) { return Catch::Session().run(argc, argv); }
#else
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#endif
