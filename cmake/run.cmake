# arfusion-run (tools/run/): the multi-process launcher (one process per rank), and its CPU tests.
# Host code only (no CUDA, no library link), so it builds in seconds and its tests run on every
# machine: the unit tests of parsing, line relay and exit verdict, and end-to-end tests that run
# the built launcher on /bin/sh commands (ctest label cpu, a few seconds on 2 cores).
# cmake/install.cmake installs it with the other arfusion-* tools.
option(ARF_BUILD_RUN "Build arfusion-run" ON)
if(NOT ARF_BUILD_RUN)
  return()
endif()

find_package(CLI11 CONFIG REQUIRED)
set(ARF_RUN_DIR ${CMAKE_CURRENT_SOURCE_DIR}/tools/run)

add_library(arfusion_run_core STATIC
  ${ARF_RUN_DIR}/args.cc ${ARF_RUN_DIR}/launcher.cc ${ARF_RUN_DIR}/output.cc
  ${ARF_RUN_DIR}/verdict.cc)
target_include_directories(arfusion_run_core PUBLIC ${ARF_RUN_DIR})
target_link_libraries(arfusion_run_core PUBLIC CLI11::CLI11)
target_compile_options(arfusion_run_core PRIVATE ${ARF_WARNINGS})

add_executable(arfusion-run ${ARF_RUN_DIR}/main.cc)
target_link_libraries(arfusion-run PRIVATE arfusion_run_core)
target_compile_options(arfusion-run PRIVATE ${ARF_WARNINGS})

if(ARF_BUILD_TESTS)
  add_executable(arfusion_run_tests ${ARF_RUN_DIR}/test_args.cc ${ARF_RUN_DIR}/test_verdict.cc
    ${ARF_RUN_DIR}/test_launcher.cc)
  target_link_libraries(arfusion_run_tests PRIVATE arfusion_run_core GTest::gtest_main)
  target_compile_definitions(arfusion_run_tests PRIVATE
    ARF_RUN_BINARY="$<TARGET_FILE:arfusion-run>")
  target_compile_options(arfusion_run_tests PRIVATE ${ARF_WARNINGS})
  add_dependencies(arfusion_run_tests arfusion-run)
  add_test(NAME run_tests COMMAND arfusion_run_tests)
  set_tests_properties(run_tests PROPERTIES LABELS cpu TIMEOUT 60)
endif()
