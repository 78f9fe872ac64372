# Installs the llmretry build tree BUILD_DIR into an empty PREFIX: cmake -DBUILD_DIR=... -DPREFIX=... -P install.cmake
cmake_minimum_required(VERSION 3.24...3.31)
file(REMOVE_RECURSE "${PREFIX}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}" COMMAND_ERROR_IS_FATAL ANY)
